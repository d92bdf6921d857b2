// A raw loopback HTTP client for the server tests: it sends exactly the bytes a test gives (a
// partial request, a slow one, a body that never ends), which an HTTP library would not, and
// reads what the server answers. Every wait has a generous limit: a loaded machine is slow, not
// wrong; a limit reached is a test failure, never a pass.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>

namespace impress::serve::test {

class RawHttp {
 public:
  explicit RawHttp(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawHttp() { Close(); }
  RawHttp(const RawHttp&) = delete;
  RawHttp& operator=(const RawHttp&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // False once the server closed or reset the connection.
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(size_t(n));
    }
    return true;
  }
  // Waits up to wait_ms for bytes; appends them to received(). False when the server closed
  // (or reset) the connection.
  bool Poll(int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return true;
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    received_.append(buf, size_t(n));
    return true;
  }
  // Reads until the server closes the connection, or limit_s passed.
  const std::string& ReadToClose(double limit_s = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(limit_s * 1000));
    while (std::chrono::steady_clock::now() < end && Poll(100)) {
    }
    return received_;
  }
  // Reads until one whole response (headers and a Content-Length body) is in, or limit_s passed.
  const std::string& ReadResponse(double limit_s = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(limit_s * 1000));
    while (std::chrono::steady_clock::now() < end && !Complete() && Poll(100)) {
    }
    return received_;
  }
  const std::string& received() const { return received_; }
  void clear() { received_.clear(); }

  // The status of the first response received, 0 when none.
  int status() const {
    if (received_.rfind("HTTP/1.1 ", 0) != 0 || received_.size() < 12) return 0;
    return std::stoi(received_.substr(9, 3));
  }
  // The body of the first response (after its headers).
  std::string body() const {
    const size_t at = received_.find("\r\n\r\n");
    return at == std::string::npos ? std::string() : received_.substr(at + 4);
  }
  bool HasHeader(std::string_view line) const {
    const size_t end = received_.find("\r\n\r\n");
    return end != std::string::npos &&
           received_.substr(0, end + 2).find(std::string(line) + "\r\n") != std::string::npos;
  }

 private:
  bool Complete() const {
    const size_t at = received_.find("\r\n\r\n");
    if (at == std::string::npos) return false;
    const size_t cl = received_.find("Content-Length: ");
    if (cl == std::string::npos || cl > at) return true;
    return received_.size() >= at + 4 + std::stoul(received_.substr(cl + 16));
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

}  // namespace impress::serve::test
