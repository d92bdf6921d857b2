#include "gui/text-format.h"

#include <fmt/format.h>

#include <cmath>

namespace impress::gui {

namespace {

// Two decimals at most, trailing zeros (and the point) dropped.
std::string Trimmed(double v) {
  std::string s = fmt::format("{:.2f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The largest UTF-8 boundary <= n in s.
size_t BoundaryAtOrBefore(std::string_view s, size_t n) {
  while (n > 0 && n < s.size() && IsContinuation(s[n])) --n;
  return n;
}
// The smallest UTF-8 boundary >= n in s.
size_t BoundaryAtOrAfter(std::string_view s, size_t n) {
  while (n < s.size() && IsContinuation(s[n])) ++n;
  return n;
}

}  // namespace

std::string FormatMib(double mib) {
  if (!(mib > 0) || !std::isfinite(mib)) return "0 MiB";
  if (mib < 1024) return Trimmed(mib) + " MiB";
  if (mib < 1024.0 * 1024) return Trimmed(mib / 1024) + " GiB";
  return Trimmed(mib / (1024.0 * 1024)) + " TiB";
}

std::string ElideMiddle(std::string_view text, float max_width, const TextWidthFn& width) {
  if (width(text) <= max_width) return std::string(text);
  // Three dots, not U+2026: the UI font is loaded with the Latin ranges only.
  static constexpr std::string_view kEllipsis = "...";
  // Keep `keep` bytes: a third from the start, two thirds from the end; shrink until it fits.
  size_t lo = 0, hi = text.size();  // the most bytes kept that fit is in [lo, hi)
  std::string best(kEllipsis);
  while (lo < hi) {
    const size_t keep = (lo + hi + 1) / 2;
    const size_t head = BoundaryAtOrBefore(text, keep / 3);
    const size_t tail_start = BoundaryAtOrAfter(text, text.size() - (keep - keep / 3));
    std::string candidate = std::string(text.substr(0, head)) + std::string(kEllipsis) +
                            std::string(text.substr(std::max(tail_start, head)));
    if (width(candidate) <= max_width) {
      best = std::move(candidate);
      lo = keep;
    } else {
      hi = keep - 1;
    }
  }
  return best;
}

}  // namespace impress::gui
