// Numbers the documents and radix-tree panels draw, computed from the snapshot without ImGui so
// tests can check them (tests/gui/cache-view-test.cpp).
//
// Thread contract: pure functions.
#pragma once

#include <string>
#include <vector>

#include "gui/app-snapshot.h"

namespace impress::gui {

// A document's tokens by where their KV is: device, host (not device), SSD only, not cached.
// Fractions of the document's span, each in [0, 1], summing to 1 (all zero when unknown).
struct ResidencyShares {
  double device = 0, host = 0, ssd = 0, uncached = 0;
  bool known = false;
};
ResidencyShares DocumentResidency(const DocumentEntry& d);

// Children of each row of a tree view (and of the root, last): indices in row order. Rows whose
// parent index is invalid hang under the root.
std::vector<std::vector<int>> TreeChildren(const TreeView& t);

// Totals over a tree view: tokens, KV bytes, hits, and tokens whose nodes are pinned.
struct TreeTotals {
  uint64_t n_tokens = 0, kv_bytes = 0, hits = 0, pinned_tokens = 0;
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0;
};
TreeTotals SumTree(const TreeView& t);

// "3 h ago" style age of a unix time against `now` (both seconds).
std::string FormatAge(int64_t then, int64_t now);

}  // namespace impress::gui
