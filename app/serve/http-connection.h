// The connection layer of `impress serve` under cpp-httplib: GuardedHttpServer owns every
// accepted socket from its first byte to its close, so that each limit holds while the request
// is read, not after it was buffered:
//   - request line and headers: a deadline from their first byte and a byte budget (408 / 431);
//   - the body: read by the route (Connection::ReadBody), Content-Length and chunked alike, up to
//     the body limit (413 at the first byte past it; the rest is never read) and a deadline (408);
//   - connections per client address (429 before anything is read);
//   - a connection whose request was refused before its body was read is closed after the
//     answer (and drained for a bounded time, so that the client reads the answer rather than a
//     reset), never parsed further.
// httplib (0.11) offers a pre-routing handler and content-reader routes, but its read timeout is
// per read() (a client sending a byte a second never meets it), its chunked reader has no size
// limit and its line reader no length limit; the stream below is where those limits live.
//
// Thread contract: GuardedHttpServer is used as httplib::Server is (configure, then listen on
// one thread; stop from any). Each connection is served by one pool thread; CurrentConnection()
// is that thread's connection while httplib runs its handlers, and is meant for them alone.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "base/mutex.h"

namespace impress::serve {

struct ConnectionLimits {
  double header_timeout_s = 10;  // request line and headers, from their first byte
  double body_timeout_s = 60;    // the body, from the end of the headers
  double idle_timeout_s = 5;     // a kept-alive connection waiting for its next request
  double write_timeout_s = 60;   // one write of the response making no progress
  size_t max_header_bytes = 64 << 10;
  size_t max_connections_per_client = 16;  // open connections from one address
  size_t max_requests_per_connection = 100;
};

// Open connections per client address. Internally synchronized.
class ClientCounter {
 public:
  explicit ClientCounter(size_t max_per_client) : max_per_client_(max_per_client) {}
  // False (nothing counted) when `address` already has max_per_client connections.
  bool Acquire(const std::string& address) EXCLUDES(mu_);
  void Release(const std::string& address) EXCLUDES(mu_);
  size_t open(const std::string& address) EXCLUDES(mu_);

 private:
  const size_t max_per_client_;
  Mutex mu_;
  std::map<std::string, size_t> open_ GUARDED_BY(mu_);
};

// Why reading a request stopped short.
enum class ReadFailure { kNone, kHeaderTimeout, kHeadersTooLarge, kBodyTimeout, kBodyTooLarge, kMalformed, kClosed };

// One accepted connection, as its handlers see it. Used only by the connection's pool thread.
class Connection {
 public:
  // The headers are read: called by the pre-routing handler, starts the body's deadline. A
  // body is read only by ReadBody (the routes that take one).
  void BeginBody();
  // The connection closes after this response (the request's body was not, or not all, read).
  void CloseAfterResponse() { close_after_ = true; }
  // Reads the request's body (Content-Length or chunked) into *body: at most max_bytes of
  // payload and within the body deadline. On failure the connection closes after the answer.
  ReadFailure ReadBody(const httplib::Request& req, size_t max_bytes, std::string* body);
  // True once the client closed its side (hung up) while its request is being answered.
  bool PeerClosed() const;
  ReadFailure failure() const { return failure_; }

 private:
  friend class GuardedHttpServer;
  class Stream;
  enum class Phase { kHeaders, kBody };
  // `listening`: the server's socket, INVALID_SOCKET once it stops (an idle wait then ends).
  Connection(int sock, const ConnectionLimits& limits, const std::atomic<socket_t>& listening);
  // Reads up to n bytes within the current phase's deadline; <= 0: none (failure_ says why).
  ptrdiff_t Read(char* out, size_t n);
  bool ReadExact(char* out, size_t n);
  // One CRLF-terminated line, at most max_len bytes (without the CRLF).
  bool ReadLine(std::string* line, size_t max_len);
  bool WaitReadable();
  void Fail(ReadFailure f);

  const int sock_;
  const ConnectionLimits& limits_;
  const std::atomic<socket_t>& listening_;
  bool idle_ = false;  // waiting for a request's first byte
  Phase phase_ = Phase::kHeaders;
  std::chrono::steady_clock::time_point deadline_;
  size_t header_bytes_ = 0;
  bool close_after_ = false;
  bool wrote_ = false;  // some of a response was sent
  ReadFailure failure_ = ReadFailure::kNone;
  char buf_[16 << 10];
  size_t buf_off_ = 0, buf_len_ = 0;
};

// Transfer-Encoding: chunked (the only transfer coding a request may use here).
bool IsChunked(const httplib::Request& req);

// The connection whose request the calling thread is serving, or null outside a handler.
Connection* CurrentConnection();

class GuardedHttpServer : public httplib::Server {
 public:
  // The body of a response the layer makes itself (429, or 408 / 431 before a request line was
  // complete); it is also where such refusals are counted.
  using RefusalBody = std::function<std::string(int status, const std::string& message)>;
  GuardedHttpServer(ConnectionLimits limits, RefusalBody refusal_body);

  const ConnectionLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void Refuse(int sock, int status, const std::string& message);

  const ConnectionLimits limits_;
  const RefusalBody refusal_body_;
  ClientCounter clients_;
};

}  // namespace impress::serve
