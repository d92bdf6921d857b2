// PrefixStore::Impl: the other models' data in a shared store directory. Their rows stay in the
// catalog and their extents stay marked used (this model never writes over them, never reads
// them: their KV is of another model); when this model needs space its own LRU leaves go first
// (EvictLocked), then the other models' leaves, the least recently opened model first and, inside
// a model, its least recently used leaves first. Pinned nodes are never evicted.
#include <spdlog/spdlog.h>

#include <set>
#include <tuple>

#include "store/prefix-store-impl.h"

namespace impress::store {

// Learns the other models' nodes and extents; an extent that does not fit the data files (or
// overlaps another) drops its whole segment from the catalog: that model's next open cuts the
// prefix there, as for any missing KV.
void PrefixStore::Impl::AdoptForeign(ForeignContents& fc) {
  std::map<std::string, int64_t> used(fc.models.begin(), fc.models.end());
  for (uint64_t seg : fc.segments) foreign.segments[seg];
  std::set<uint64_t> bad;
  for (const ForeignExtent& e : fc.extents) {
    auto it = foreign.segments.find(e.segment);
    if (it == foreign.segments.end() || bad.count(e.segment)) continue;
    const Extent x{e.file, e.offset, e.length};
    if (files->MarkUsed(x).ok()) {
      it->second.push_back(x);
      continue;
    }
    spdlog::warn("store: another model's segment {} names space outside the data files; dropped", e.segment);
    bad.insert(e.segment);
    for (const Extent& y : it->second) files->ForgetUsed(y);
    foreign.segments.erase(it);
  }
  recovery_stats.foreign_rows_dropped = bad.size();
  for (auto& [seg, exts] : foreign.segments)
    for (const Extent& x : exts) foreign.bytes += x.length;
  for (const ForeignNode& n : fc.nodes) {
    ForeignIndex::Node& f = foreign.nodes[n.id];
    f.parent = n.parent;
    f.segment = n.segment;
    f.last_access = n.last_access;
    f.pinned = n.pinned;
    auto u = used.find(n.model);
    f.model_used = u == used.end() ? 0 : u->second;
    ++foreign.seg_nodes[n.segment];
  }
  for (auto& [id, n] : foreign.nodes) {
    auto p = foreign.nodes.find(n.parent);
    if (p != foreign.nodes.end()) ++p->second.n_children;
  }
  if (bad.empty() || read_only) return;  // a read-only store leaves them named (and unused)
  CatalogBatch b;
  b.delete_segments.assign(bad.begin(), bad.end());
  Status s = catalog->Apply(b);
  if (!s.ok()) spdlog::warn("store: dropping another model's damaged segments: {}", s.ToString());
}

// Frees at least `bytes` of other models' space if it can: first segments no node names, then
// leaves in the order above. Returns the nodes and segments removed (0: nothing evictable).
uint64_t PrefixStore::Impl::EvictForeignLocked(uint64_t bytes) {
  if (read_only) return 0;
  using Key = std::tuple<int64_t, uint64_t, NodeId>;  // (model last opened, last access, id)
  std::set<Key> leaves;
  for (auto& [id, n] : foreign.nodes)
    if (n.n_children == 0 && !n.pinned) leaves.insert({n.model_used, n.last_access, id});
  CatalogBatch b;
  std::vector<Extent> to_free;
  uint64_t freed = 0, removed = 0;
  auto drop_segment = [&](uint64_t seg) REQUIRES(mu) {
    auto it = foreign.segments.find(seg);
    if (it != foreign.segments.end()) {
      for (const Extent& x : it->second) {
        to_free.push_back(x);
        freed += x.length;
      }
      foreign.segments.erase(it);
    }
    foreign.seg_nodes.erase(seg);
    b.delete_segments.push_back(seg);
    ++removed;
  };
  std::vector<uint64_t> unnamed;
  for (auto& [seg, exts] : foreign.segments)
    if (!foreign.seg_nodes.count(seg)) unnamed.push_back(seg);
  for (uint64_t seg : unnamed) drop_segment(seg);
  while (freed < bytes && !leaves.empty()) {
    const NodeId id = std::get<2>(*leaves.begin());
    leaves.erase(leaves.begin());
    const ForeignIndex::Node n = foreign.nodes[id];
    foreign.nodes.erase(id);
    b.delete_nodes.push_back(id);
    ++removed;
    auto p = foreign.nodes.find(n.parent);
    if (p != foreign.nodes.end() && --p->second.n_children == 0 && !p->second.pinned)
      leaves.insert({p->second.model_used, p->second.last_access, p->first});
    if (--foreign.seg_nodes[n.segment] == 0) drop_segment(n.segment);
  }
  if (b.empty()) return 0;
  // Freed only once the catalog no longer names them (a crash before keeps them named and used).
  Status s = catalog->Apply(b);
  if (!s.ok()) {
    spdlog::error("store: evicting another model's prefixes not recorded in the catalog: {}", s.ToString());
    return 0;
  }
  for (const Extent& x : to_free) {
    files->Free(x);
    foreign.bytes -= std::min(foreign.bytes, x.length);
  }
  st.nodes_evicted += b.delete_nodes.size();
  return removed;
}

}  // namespace impress::store
