// The checks `impress serve` makes on a request's headers before it reads any body: the Host
// header names this server (DNS rebinding), a browser's Origin is one the user allowed
// (cross-site requests), and a body is JSON of an acceptable size, framed as we read it. Each
// returns the error to answer (status, OpenAI error object) or nothing.
//
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/serve/openai-api.h"

namespace impress::serve {

// 403 unless the Host header's name (its port ignored) is the address the server is bound to,
// one of `allowed_hosts`, "localhost" or a loopback address when bound to loopback, or any
// address literal when bound to every interface (0.0.0.0, ::). A name an attacker controls can
// point at this server (DNS rebinding); an address literal cannot. 400 when there is no Host.
std::optional<ApiError> CheckHost(std::string_view host_header, std::string_view bound_host,
                                  const std::vector<std::string>& allowed_hosts);

// 403 when an Origin header is present and not in `allowed_origins` ("*" allows any). A browser
// sends Origin with cross-site requests; other clients send none.
std::optional<ApiError> CheckOrigin(std::string_view origin, const std::vector<std::string>& allowed_origins);

// The framing and type of a request body, before it is read: 400 for both a length and a
// transfer coding or a malformed length, 501 for a transfer coding other than chunked, 415 for
// a content coding or a type other than application/json, 411 with neither a length nor
// chunked, 413 for a length above max_body_bytes.
std::optional<ApiError> CheckBodyHeaders(std::string_view content_type, std::string_view content_length,
                                         std::string_view transfer_encoding, std::string_view content_encoding,
                                         size_t max_body_bytes);

}  // namespace impress::serve
