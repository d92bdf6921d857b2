#include "app/serve/http-connection.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <strings.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

namespace impress::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPollSliceMs = 100;       // how often a wait looks at the server stopping
constexpr size_t kMaxChunkLine = 1024;  // a chunk's size line with its extensions
constexpr double kLingerS = 1.0;        // draining a refused request's unread body
constexpr size_t kLingerBytes = 256 << 10;

thread_local Connection* t_current = nullptr;

Clock::time_point After(double seconds) { return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6)); }

int MsUntil(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::clamp<int64_t>(ms, 0, kPollSliceMs));
}

// The address of the socket's peer (remote) or its own end, "" when unknown.
void SocketAddress(int sock, bool remote, std::string* ip, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = remote ? getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                        : getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  ip->clear();
  *port = 0;
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    *port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    *port = ntohs(a->sin6_port);
  }
  *ip = text;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    default: return "Error";
  }
}

bool SendAll(int sock, const std::string& data, double timeout_s) {
  const auto deadline = After(timeout_s);
  size_t sent = 0;
  while (sent < data.size()) {
    pollfd p{sock, POLLOUT, 0};
    if (poll(&p, 1, MsUntil(deadline)) <= 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    const ssize_t n = send(sock, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    sent += size_t(n);
  }
  return true;
}

// Sends FIN, then reads (and drops) what the client still sends for a bounded time, so that an
// answer given before the body was read reaches a client still sending it instead of a reset.
void LingeringClose(int sock) {
  shutdown(sock, SHUT_WR);
  const auto deadline = After(kLingerS);
  size_t drained = 0;
  char sink[4096];
  while (drained < kLingerBytes && Clock::now() < deadline) {
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, MsUntil(deadline)) <= 0) continue;
    const ssize_t n = recv(sock, sink, sizeof(sink), 0);
    if (n <= 0) break;
    drained += size_t(n);
  }
  close(sock);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool IsChunked(const httplib::Request& req) {
  return strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0;
}

bool ClientCounter::Acquire(const std::string& address) {
  MutexLock lock(&mu_);
  size_t& n = open_[address];
  if (n >= max_per_client_) {
    if (n == 0) open_.erase(address);
    return false;
  }
  ++n;
  return true;
}

void ClientCounter::Release(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = open_.find(address);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

size_t ClientCounter::open(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = open_.find(address);
  return it == open_.end() ? 0 : it->second;
}

// httplib reads the request line and headers through this; responses are written through it.
class Connection::Stream : public httplib::Stream {
 public:
  explicit Stream(Connection& c) : c_(c) {}
  bool is_readable() const override { return c_.buf_off_ < c_.buf_len_ || c_.WaitReadable(); }
  bool is_writable() const override {
    pollfd p{c_.sock_, POLLOUT, 0};
    return poll(&p, 1, int(c_.limits_.write_timeout_s * 1000)) > 0 && !c_.PeerClosed();
  }
  ssize_t read(char* ptr, size_t size) override { return c_.Read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override {
    c_.wrote_ = true;
    pollfd p{c_.sock_, POLLOUT, 0};
    if (poll(&p, 1, int(c_.limits_.write_timeout_s * 1000)) <= 0) return -1;
    return send(c_.sock_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { SocketAddress(c_.sock_, true, &ip, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { SocketAddress(c_.sock_, false, &ip, &port); }
  socket_t socket() const override { return c_.sock_; }

 private:
  Connection& c_;
};

Connection::Connection(int sock, const ConnectionLimits& limits, const std::atomic<socket_t>& listening) :
    sock_(sock), limits_(limits), listening_(listening) {}

void Connection::BeginBody() {
  phase_ = Phase::kBody;
  deadline_ = After(limits_.body_timeout_s);
}

void Connection::Fail(ReadFailure f) {
  if (failure_ == ReadFailure::kNone) failure_ = f;
  close_after_ = true;
}

bool Connection::WaitReadable() {
  while (true) {
    if (Clock::now() >= deadline_) {
      Fail(phase_ == Phase::kHeaders ? ReadFailure::kHeaderTimeout : ReadFailure::kBodyTimeout);
      return false;
    }
    if (idle_ && listening_ == INVALID_SOCKET) {  // stopping: no new request on this connection
      Fail(ReadFailure::kClosed);
      return false;
    }
    pollfd p{sock_, POLLIN, 0};
    const int rc = poll(&p, 1, MsUntil(deadline_));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) {
      Fail(ReadFailure::kClosed);
      return false;
    }
  }
}

ptrdiff_t Connection::Read(char* out, size_t n) {
  if (phase_ == Phase::kHeaders && header_bytes_ >= limits_.max_header_bytes) {
    Fail(ReadFailure::kHeadersTooLarge);
    return -1;
  }
  if (buf_off_ == buf_len_) {
    if (!WaitReadable()) return -1;
    const ssize_t got = recv(sock_, buf_, sizeof(buf_), 0);
    if (got <= 0) {
      if (got < 0) Fail(ReadFailure::kClosed);
      close_after_ = true;
      return got;
    }
    buf_off_ = 0;
    buf_len_ = size_t(got);
  }
  size_t take = std::min(n, buf_len_ - buf_off_);
  if (phase_ == Phase::kHeaders) {
    take = std::min(take, limits_.max_header_bytes - header_bytes_);
    header_bytes_ += take;
  }
  std::memcpy(out, buf_ + buf_off_, take);
  buf_off_ += take;
  return ptrdiff_t(take);
}

bool Connection::ReadExact(char* out, size_t n) {
  while (n > 0) {
    const ptrdiff_t got = Read(out, n);
    if (got <= 0) {
      Fail(ReadFailure::kClosed);
      return false;
    }
    out += got;
    n -= size_t(got);
  }
  return true;
}

bool Connection::ReadLine(std::string* line, size_t max_len) {
  line->clear();
  char c;
  while (true) {
    if (!ReadExact(&c, 1)) return false;
    if (c == '\n') break;
    if (line->size() > max_len) {
      Fail(ReadFailure::kMalformed);
      return false;
    }
    *line += c;
  }
  if (line->empty() || line->back() != '\r') {
    Fail(ReadFailure::kMalformed);
    return false;
  }
  line->pop_back();
  return true;
}

ReadFailure Connection::ReadBody(const httplib::Request& req, size_t max_bytes, std::string* body) {
  body->clear();
  if (failure_ != ReadFailure::kNone) return failure_;
  auto fail = [&](ReadFailure f) {
    Fail(f);
    return failure_;
  };
  if (IsChunked(req)) {
    std::string line;
    while (true) {
      if (!ReadLine(&line, kMaxChunkLine)) return failure_;
      const std::string size_text = line.substr(0, line.find(';'));
      size_t n = 0, used = 0;
      for (char c : size_text) {
        const int v = HexDigit(c);
        if (v < 0 || used >= 15) return fail(ReadFailure::kMalformed);  // 15 hex digits: no overflow
        n = n * 16 + size_t(v);
        ++used;
      }
      if (used == 0) return fail(ReadFailure::kMalformed);
      if (n == 0) break;
      if (n > max_bytes - body->size()) return fail(ReadFailure::kBodyTooLarge);
      const size_t at = body->size();
      body->resize(at + n);
      if (!ReadExact(body->data() + at, n)) return failure_;
      if (!ReadLine(&line, 0) || !line.empty()) return fail(ReadFailure::kMalformed);
    }
    // Trailer fields, then the empty line; they count against the header budget.
    size_t trailer_bytes = 0;
    while (true) {
      if (!ReadLine(&line, limits_.max_header_bytes)) return failure_;
      if (line.empty()) break;
      trailer_bytes += line.size() + 2;
      if (trailer_bytes > limits_.max_header_bytes) return fail(ReadFailure::kHeadersTooLarge);
    }
    return ReadFailure::kNone;
  }
  const std::string length = req.get_header_value("Content-Length");
  if (length.empty()) return ReadFailure::kNone;  // the pre-routing checks refused a body without a length
  uint64_t n = 0;
  for (char c : length) {
    if (c < '0' || c > '9' || n > (uint64_t(1) << 50)) return fail(ReadFailure::kMalformed);
    n = n * 10 + uint64_t(c - '0');
  }
  if (n > max_bytes) return fail(ReadFailure::kBodyTooLarge);
  body->resize(size_t(n));
  if (!ReadExact(body->data(), size_t(n))) return failure_;
  return ReadFailure::kNone;
}

bool Connection::PeerClosed() const {
  pollfd p{sock_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char c;
  return recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

Connection* CurrentConnection() { return t_current; }

GuardedHttpServer::GuardedHttpServer(ConnectionLimits limits, RefusalBody refusal_body) :
    limits_(limits), refusal_body_(std::move(refusal_body)), clients_(limits.max_connections_per_client) {}

void GuardedHttpServer::Refuse(int sock, int status, const std::string& message) {
  const std::string body = refusal_body_(status, message);
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n", status,
      ReasonPhrase(status), body.size(), status == 429 ? "Retry-After: 1\r\n" : "");
  (void)SendAll(sock, head + body, limits_.write_timeout_s);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  std::string client;
  int client_port = 0;
  SocketAddress(sock, true, &client, &client_port);
  if (!clients_.Acquire(client)) {
    spdlog::warn("refused a connection from {}: it has {} open", client, limits_.max_connections_per_client);
    Refuse(sock, 429,
           fmt::format("too many connections from {} (at most {})", client, limits_.max_connections_per_client));
    LingeringClose(sock);
    return false;
  }
  Connection conn(sock, limits_, svr_sock_);
  Connection::Stream stream(conn);
  bool ok = true;
  for (size_t n = 0; n < limits_.max_requests_per_connection && svr_sock_ != INVALID_SOCKET; ++n) {
    // Idle until the next request's first byte; a connection that sends nothing just closes.
    conn.phase_ = Connection::Phase::kHeaders;
    conn.deadline_ = After(n == 0 ? limits_.header_timeout_s : limits_.idle_timeout_s);
    conn.idle_ = true;
    const bool request = conn.buf_off_ < conn.buf_len_ || conn.WaitReadable();
    conn.idle_ = false;
    if (!request) break;
    conn.deadline_ = After(limits_.header_timeout_s);
    conn.header_bytes_ = 0;
    conn.wrote_ = false;
    conn.failure_ = ReadFailure::kNone;
    bool connection_closed = false;
    t_current = &conn;
    ok = process_request(stream, n + 1 == limits_.max_requests_per_connection, connection_closed, nullptr);
    t_current = nullptr;
    if (!conn.wrote_ &&
        (conn.failure_ == ReadFailure::kHeaderTimeout || conn.failure_ == ReadFailure::kHeadersTooLarge)) {
      // The request line itself was not complete: httplib answers nothing then.
      const bool timeout = conn.failure_ == ReadFailure::kHeaderTimeout;
      Refuse(sock, timeout ? 408 : 431,
             timeout ? fmt::format("the request's headers did not arrive within {} s", limits_.header_timeout_s)
                     : fmt::format("the request's headers are larger than {} bytes", limits_.max_header_bytes));
    }
    if (!ok || connection_closed || conn.close_after_) break;
  }
  clients_.Release(client);
  LingeringClose(sock);
  return ok;
}

}  // namespace impress::serve
