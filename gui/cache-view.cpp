#include "gui/cache-view.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

namespace impress::gui {

ResidencyShares DocumentResidency(const DocumentEntry& d) {
  ResidencyShares r;
  if (d.span_begin < 0 || d.span_end <= d.span_begin) return r;
  const double n = double(d.span_end - d.span_begin);
  const double cached = std::min(double(d.tokens_cached), n);
  const double device = std::min(double(d.tokens_device), cached);
  const double host = std::min(double(d.tokens_host), cached - device);
  r.device = device / n;
  r.host = host / n;
  r.ssd = (cached - device - host) / n;
  r.uncached = (n - cached) / n;
  r.known = true;
  return r;
}

std::vector<std::vector<int>> TreeChildren(const TreeView& t) {
  const int n = int(t.rows.size());
  std::vector<std::vector<int>> children(size_t(n) + 1);
  for (int i = 0; i < n; ++i) {
    const int p = t.rows[i].parent;
    children[p >= 0 && p < i ? size_t(p) : size_t(n)].push_back(i);  // a parent precedes its children
  }
  return children;
}

TreeTotals SumTree(const TreeView& t) {
  TreeTotals s;
  for (const TreeRow& r : t.rows) {
    s.n_tokens += r.n_tokens;
    s.kv_bytes += r.kv_bytes;
    s.hits += r.hits;
    if (r.pinned) s.pinned_tokens += r.n_tokens;
    s.chunks_device += r.chunks_device;
    s.chunks_host += r.chunks_host;
    s.chunks_ssd += r.chunks_ssd;
  }
  return s;
}

std::string FormatAge(int64_t then, int64_t now) {
  const int64_t d = std::max<int64_t>(0, now - then);
  if (d < 60) return "just now";
  if (d < 3600) return fmt::format("{} min ago", d / 60);
  if (d < 86400) return fmt::format("{} h ago", d / 3600);
  return fmt::format("{} d ago", d / 86400);
}

}  // namespace impress::gui
