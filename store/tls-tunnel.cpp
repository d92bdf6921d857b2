#include "store/tls-tunnel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace impress::store {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBufferCap = 1 << 20;  // bytes held per direction before the tunnel stops reading
constexpr int kWriteChunk = 1 << 16;    // one SSL_write (retried with the same length until done)

// The OpenSSL error queue as text (emptied), or `fallback`.
std::string SslErrors(const std::string& fallback) {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? fallback : out;
}

bool SetNonBlocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

int MillisLeft(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : int(std::min<long long>(ms, 1 << 30));
}

// A TCP connection to host:port within the deadline; -1 and *why on failure.
int ConnectTcp(const std::string& host, int port, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    *why = std::string("cannot resolve the host: ") + ::gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  *why = "no address";
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (!SetNonBlocking(fd) || (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS)) {
      *why = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, MillisLeft(deadline)) != 1) {
      *why = "connection timed out";
    } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      *why = std::strerror(err ? err : errno);
    } else {
      break;
    }
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

}  // namespace

struct TlsTunnel::State {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  int tcp = -1;
  int pump = -1;    // the tunnel's end of the pair
  int client = -1;  // the caller's end, until taken
  int stop = -1;    // eventfd: the destructor asks the thread to end
  ~State() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
    for (int fd : {tcp, pump, client, stop})
      if (fd >= 0) ::close(fd);
  }
};

Status CheckTlsFiles(const TlsFiles& f) {
  auto readable = [](const std::string& path, const char* what) -> Status {
    if (path.empty()) return Status::Ok();
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line))
      return Status::InvalidArgument(std::string("TLS: the ") + what + " file " + path + " cannot be read");
    return Status::Ok();
  };
  IMPRESS_RETURN_IF_ERROR(readable(f.ca_file, "CA certificate"));
  IMPRESS_RETURN_IF_ERROR(readable(f.cert_file, "client certificate"));
  IMPRESS_RETURN_IF_ERROR(readable(f.key_file, "client key"));
  if (f.cert_file.empty() != f.key_file.empty())
    return Status::InvalidArgument("TLS: a client certificate needs its key, and a key its certificate");
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return Status::ResourceExhausted("TLS: " + SslErrors("cannot create a context"));
  Status s = Status::Ok();
  if (!f.ca_file.empty() && SSL_CTX_load_verify_locations(ctx, f.ca_file.c_str(), nullptr) != 1)
    s = Status::InvalidArgument("TLS: the CA certificate file " + f.ca_file + " holds no usable certificate (" +
                                SslErrors("?") + ")");
  else if (!f.cert_file.empty() && SSL_CTX_use_certificate_chain_file(ctx, f.cert_file.c_str()) != 1)
    s = Status::InvalidArgument("TLS: the client certificate file " + f.cert_file + " holds no usable certificate (" +
                                SslErrors("?") + ")");
  else if (!f.key_file.empty() && (SSL_CTX_use_PrivateKey_file(ctx, f.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
                                   SSL_CTX_check_private_key(ctx) != 1))
    s = Status::InvalidArgument("TLS: the client key file " + f.key_file +
                                " holds no key for the client certificate (" + SslErrors("?") + ")");
  SSL_CTX_free(ctx);
  return s;
}

Result<std::unique_ptr<TlsTunnel>> TlsTunnel::Open(const std::string& host, int port, const TlsFiles& files,
                                                   std::chrono::milliseconds timeout) {
  IMPRESS_RETURN_IF_ERROR(CheckTlsFiles(files));
  const std::string ep = host + ":" + std::to_string(port);
  const Clock::time_point deadline = Clock::now() + timeout;
  auto s = std::make_unique<State>();
  s->ctx = SSL_CTX_new(TLS_client_method());
  if (!s->ctx) return Status::ResourceExhausted("TLS " + ep + ": " + SslErrors("cannot create a context"));
  SSL_CTX_set_min_proto_version(s->ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER, nullptr);
  if (files.ca_file.empty() ? SSL_CTX_set_default_verify_paths(s->ctx) != 1
                            : SSL_CTX_load_verify_locations(s->ctx, files.ca_file.c_str(), nullptr) != 1)
    return Status::InvalidArgument("TLS " + ep + ": no CA certificates to verify the server with (" + SslErrors("?") +
                                   ")");
  if (!files.cert_file.empty() && (SSL_CTX_use_certificate_chain_file(s->ctx, files.cert_file.c_str()) != 1 ||
                                   SSL_CTX_use_PrivateKey_file(s->ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1))
    return Status::InvalidArgument("TLS " + ep + ": the client certificate or key: " + SslErrors("?"));
  std::string why;
  s->tcp = ConnectTcp(host, port, deadline, &why);
  if (s->tcp < 0) return Status::IOError("TLS " + ep + ": cannot connect: " + why);
  s->ssl = SSL_new(s->ctx);
  if (!s->ssl) return Status::ResourceExhausted("TLS " + ep + ": " + SslErrors("cannot create a connection"));
  SSL_set_mode(s->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_fd(s->ssl, s->tcp);
  if (IsIpAddress(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), host.c_str());
  } else {
    SSL_set1_host(s->ssl, host.c_str());
    SSL_set_tlsext_host_name(s->ssl, host.c_str());
  }
  for (;;) {
    const int r = SSL_connect(s->ssl);
    if (r == 1) break;
    const int e = SSL_get_error(s->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      pollfd p{s->tcp, short(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      if (::poll(&p, 1, MillisLeft(deadline)) == 1) continue;
      return Status::IOError("TLS " + ep + ": the handshake timed out");
    }
    const long verify = SSL_get_verify_result(s->ssl);
    if (verify != X509_V_OK)
      return Status::IOError("TLS " + ep +
                             ": the server's certificate does not verify: " + X509_verify_cert_error_string(verify));
    return Status::IOError("TLS " + ep + ": the handshake failed: " +
                           SslErrors(e == SSL_ERROR_SYSCALL ? "the server closed the connection (does it want a "
                                                              "client certificate?)"
                                                            : "unknown error"));
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return Status::IOError("TLS " + ep + ": socketpair: " + std::strerror(errno));
  s->pump = pair[0];
  s->client = pair[1];
  s->stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop < 0 || !SetNonBlocking(s->pump))
    return Status::IOError("TLS " + ep + ": cannot set up the tunnel: " + std::strerror(errno));
  auto t = std::unique_ptr<TlsTunnel>(new TlsTunnel(std::move(s)));
  t->thread_ = std::thread([p = t.get()] { p->Pump(); });
  return t;
}

TlsTunnel::TlsTunnel(std::unique_ptr<State> s) : s_(std::move(s)) {}

TlsTunnel::~TlsTunnel() {
  const uint64_t one = 1;
  if (s_->stop >= 0) (void)!::write(s_->stop, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

int TlsTunnel::TakeClientFd() {
  const int fd = s_->client;
  s_->client = -1;
  return fd;
}

// Moves bytes both ways until the client closes its end, the server closes or fails, or the
// owner stops it; then closes the tunnel's end, so the client reads end-of-file.
void TlsTunnel::Pump() {
  State& s = *s_;
  std::vector<char> up, down;  // to the server, to the client
  std::vector<char> buf(1 << 16);
  int write_len = 0;  // the SSL_write in progress (retried with the same bytes until it completes)
  bool ssl_wants_write = false;
  for (;;) {
    ssl_wants_write = false;
    bool closed = false;
    while (down.size() < kBufferCap) {  // server -> down
      const int n = SSL_read(s.ssl, buf.data(), int(buf.size()));
      if (n > 0) {
        down.insert(down.end(), buf.begin(), buf.begin() + n);
        continue;
      }
      const int e = SSL_get_error(s.ssl, n);
      if (e == SSL_ERROR_WANT_WRITE) ssl_wants_write = true;
      else if (e != SSL_ERROR_WANT_READ) closed = true;
      break;
    }
    while (!down.empty()) {  // down -> client
      const ssize_t w = ::write(s.pump, down.data(), down.size());
      if (w > 0) {
        down.erase(down.begin(), down.begin() + w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        if (w < 0 && errno != EAGAIN) closed = true;
        break;
      }
    }
    if (closed && down.empty()) break;
    while (up.size() < kBufferCap) {  // client -> up
      const ssize_t r = ::read(s.pump, buf.data(), buf.size());
      if (r > 0) {
        up.insert(up.end(), buf.begin(), buf.begin() + r);
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else {
        if (r == 0 || errno != EAGAIN) closed = true;
        break;
      }
    }
    while (!up.empty() && !closed) {  // up -> server
      if (write_len == 0) write_len = int(std::min<size_t>(up.size(), kWriteChunk));
      const int n = SSL_write(s.ssl, up.data(), write_len);
      if (n > 0) {
        up.erase(up.begin(), up.begin() + n);
        write_len = 0;
        continue;
      }
      const int e = SSL_get_error(s.ssl, n);
      if (e == SSL_ERROR_WANT_WRITE) ssl_wants_write = true;
      else if (e != SSL_ERROR_WANT_READ) closed = true;
      break;
    }
    if (closed) break;
    if (SSL_pending(s.ssl) > 0 && down.size() < kBufferCap) continue;
    pollfd fds[3] = {{s.pump, short((up.size() < kBufferCap ? POLLIN : 0) | (down.empty() ? 0 : POLLOUT)), 0},
                     {s.tcp, short((down.size() < kBufferCap ? POLLIN : 0) | (ssl_wants_write ? POLLOUT : 0)), 0},
                     {s.stop, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) break;
    if (fds[2].revents & POLLIN) break;
  }
  (void)SSL_shutdown(s.ssl);
  ::shutdown(s.pump, SHUT_RDWR);
}

}  // namespace impress::store
