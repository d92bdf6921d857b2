#include "app/serve/request-checks.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace impress::serve {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The host name of a Host header or an address, lower case, without port, brackets or a
// trailing dot: "[::1]:8080" -> "::1", "LocalHost.:80" -> "localhost".
std::string HostName(std::string_view h) {
  h = Trim(h);
  if (!h.empty() && h.front() == '[') {
    const size_t end = h.find(']');
    h = end == std::string_view::npos ? h.substr(1) : h.substr(1, end - 1);
  } else if (std::count(h.begin(), h.end(), ':') == 1) {
    h = h.substr(0, h.find(':'));
  }
  if (!h.empty() && h.back() == '.') h.remove_suffix(1);
  return Lower(h);
}

bool IsAddressLiteral(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool IsLoopback(const std::string& name) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, name.c_str(), buf) == 1) return buf[0] == 127;
  return name == "::1" || name == "localhost";
}

ApiError Forbidden(std::string message, std::string code) {
  return ApiError{403, std::move(message), "invalid_request_error", "", std::move(code)};
}

}  // namespace

std::optional<ApiError> CheckHost(std::string_view host_header, std::string_view bound_host,
                                  const std::vector<std::string>& allowed_hosts) {
  const std::string name = HostName(host_header);
  if (name.empty()) return ApiError{400, "the request has no Host header", "invalid_request_error", "", "missing_host"};
  const std::string bound = HostName(bound_host);
  if (name == bound) return std::nullopt;
  for (const std::string& a : allowed_hosts) {
    if (name == HostName(a)) return std::nullopt;
  }
  if (IsLoopback(bound) && IsLoopback(name)) return std::nullopt;
  const bool every_interface = bound.empty() || bound == "0.0.0.0" || bound == "::";
  if (every_interface && (IsAddressLiteral(name) || name == "localhost")) return std::nullopt;
  return Forbidden(fmt::format("the Host header '{}' names neither this server ({}) nor an --allowed-host",
                               std::string(Trim(host_header)), std::string(bound_host)),
                   "host_not_allowed");
}

std::optional<ApiError> CheckOrigin(std::string_view origin, const std::vector<std::string>& allowed_origins) {
  origin = Trim(origin);
  if (origin.empty()) return std::nullopt;
  std::string o = Lower(origin);
  if (!o.empty() && o.back() == '/') o.pop_back();
  for (const std::string& a : allowed_origins) {
    std::string x = Lower(Trim(a));
    if (!x.empty() && x.back() == '/') x.pop_back();
    if (x == "*" || x == o) return std::nullopt;
  }
  return Forbidden(fmt::format("requests from the web page at '{}' are not allowed (--allowed-origin)", origin),
                   "origin_not_allowed");
}

std::optional<ApiError> CheckBodyHeaders(std::string_view content_type, std::string_view content_length,
                                         std::string_view transfer_encoding, std::string_view content_encoding,
                                         size_t max_body_bytes) {
  content_length = Trim(content_length);
  transfer_encoding = Trim(transfer_encoding);
  content_encoding = Trim(content_encoding);
  if (!content_length.empty() && !transfer_encoding.empty()) {
    return ApiError{400, "a request may not have both Content-Length and Transfer-Encoding", "invalid_request_error",
                    "", "invalid_framing"};
  }
  if (!transfer_encoding.empty() && Lower(transfer_encoding) != "chunked") {
    return ApiError{501, fmt::format("the transfer coding '{}' is not supported (only chunked)", transfer_encoding),
                    "invalid_request_error", "", "unsupported_transfer_encoding"};
  }
  if (!content_encoding.empty() && Lower(content_encoding) != "identity") {
    return ApiError{415, fmt::format("compressed bodies (Content-Encoding: {}) are not accepted", content_encoding),
                    "invalid_request_error", "", "unsupported_media_type"};
  }
  const std::string_view type = Trim(content_type.substr(0, content_type.find(';')));
  if (Lower(type) != "application/json") {
    return ApiError{415,
                    type.empty()
                        ? std::string("the request body must be JSON (Content-Type: application/json)")
                        : fmt::format("the request body must be JSON (Content-Type: application/json), not '{}'", type),
                    "invalid_request_error", "", "unsupported_media_type"};
  }
  if (transfer_encoding.empty()) {
    if (content_length.empty()) {
      return ApiError{411, "a request body needs a Content-Length or Transfer-Encoding: chunked",
                      "invalid_request_error", "", "length_required"};
    }
    uint64_t n = 0;
    for (char c : content_length) {
      if (c < '0' || c > '9' || n > (uint64_t(1) << 50)) {
        return ApiError{400, fmt::format("the Content-Length '{}' is not a byte count", content_length),
                        "invalid_request_error", "", "invalid_framing"};
      }
      n = n * 10 + uint64_t(c - '0');
    }
    if (n > max_body_bytes) {
      return ApiError{413, fmt::format("the request body is larger than {} bytes", max_body_bytes),
                      "invalid_request_error", "", "request_too_large"};
    }
  }
  return std::nullopt;
}

}  // namespace impress::serve
