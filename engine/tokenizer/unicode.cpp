#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace impress {
namespace {

std::array<uint8_t, 128> MakeAsciiFlags() {
  std::array<uint8_t, 128> t{};
  for (uint32_t c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = kCpLetter;
    if (c >= '0' && c <= '9') t[c] = kCpNumber;
    if ((c >= 0x09 && c <= 0x0D) || c == ' ') t[c] = kCpSpace;
  }
  return t;
}
const std::array<uint8_t, 128> kAsciiFlags = MakeAsciiFlags();

}  // namespace

size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[i];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  uint32_t c, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    *cp = kInvalidCodepoint;
    return 1;
  }
  if (i + len > n) {
    *cp = kInvalidCodepoint;
    return 1;
  }
  for (size_t k = 1; k < len; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) {
      *cp = kInvalidCodepoint;
      return 1;
    }
    c = (c << 6) | (p[i + k] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    *cp = kInvalidCodepoint;
    return 1;
  }
  *cp = c;
  return len;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

uint8_t CodepointFlags(uint32_t cp) {
  if (cp < 128) return kAsciiFlags[cp];
  using unicode_detail::kNumRanges;
  using unicode_detail::kRanges;
  // First range whose last >= cp.
  const auto* end = kRanges + kNumRanges;
  const auto* it = std::lower_bound(kRanges, end, cp,
                                    [](const unicode_detail::CodepointRange& r, uint32_t v) { return r.last < v; });
  if (it == end || it->first > cp) return 0;
  return it->flags;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is not yet complete.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = uint8_t(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (need > back) return n - back;  // lead byte waiting for more continuation bytes
    return n;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += DecodeUtf8(s, i, &cp);
    if (cp == kInvalidCodepoint) return false;
  }
  return true;
}

const char* UnicodeTablesVersion() { return unicode_detail::kUnicodeVersion; }

}  // namespace impress
