// TlsTunnel: TLS to a Redis server for a client that speaks plain sockets. Debian's hiredis
// (0.14) has no TLS, so the Redis client (store/redis-client.h) talks to one end of a socket pair
// (hiredis's redisConnectFd) and the tunnel's thread moves the bytes between the other end and a
// TLS connection (OpenSSL) to the server, in both directions, until either side closes.
//
// The server's certificate is verified against the CA file (else the system's trusted CAs) and
// against the host: its DNS name, or its IP address when the host is one. A client certificate
// and key are sent when given (Redis asks for one unless tls-auth-clients is off). Every failure
// (a file that cannot be read, no connection, a certificate that does not verify, a handshake the
// server refuses) is a Status that says which.
//
// Thread contract: Open, TakeClientFd and the destructor are called from one thread (the owner);
// the tunnel's own thread alone touches the TLS connection after Open returns. The destructor
// stops and joins it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace impress::store {

struct TlsFiles {
  std::string ca_file;    // PEM CAs to verify the server with; empty: the system's
  std::string cert_file;  // PEM client certificate (chain); empty: none
  std::string key_file;   // PEM key of the client certificate
};

// Whether the files named can be read and hold what they should (a clear error before any
// connection): kInvalidArgument naming the file otherwise.
Status CheckTlsFiles(const TlsFiles& files);

class TlsTunnel {
 public:
  // Connects to host:port, completes the TLS handshake within `timeout`, and starts the thread.
  static Result<std::unique_ptr<TlsTunnel>> Open(const std::string& host, int port, const TlsFiles& files,
                                                 std::chrono::milliseconds timeout);
  ~TlsTunnel();
  TlsTunnel(const TlsTunnel&) = delete;
  TlsTunnel& operator=(const TlsTunnel&) = delete;

  // The plain end for the client (once; the caller owns and closes it). Bytes written to it go to
  // the server encrypted; the server's replies come out of it. It reads end-of-file once the TLS
  // connection is closed or fails.
  int TakeClientFd();

  struct State;

 private:
  explicit TlsTunnel(std::unique_ptr<State> s);
  void Pump();
  std::unique_ptr<State> s_;
  std::thread thread_;
};

}  // namespace impress::store
