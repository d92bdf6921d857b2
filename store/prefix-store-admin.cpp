// PrefixStore::Impl: administration and inspection. Statistics and their persistence, budgets and
// policy, the tree snapshot and prefix residency the GUI shows, pins, drops, consistency checks.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "store/prefix-store-impl.h"

namespace impress::store {

// ==================================================================== statistics, budgets

StoreStats PrefixStore::Impl::Stats() {
  WaitForAdmissions();  // counters and tier contents as of every read waited so far
  TeamTierInfo team_info = TeamInfo();
  MutexLock lk(&mu);
  StoreStats s = st;
  s.team = std::move(team_info);
  s.tiers = tiers.stats();
  s.n_nodes = tree.n_nodes();
  s.n_tokens = tree.n_tokens();
  s.n_segments = segs.size();
  s.ssd_disk_bytes = files->disk_bytes();
  s.ssd_free_inside_bytes = files->free_bytes_inside();
  s.catalog_bytes = catalog->FileBytes();
  s.ssd_cap_bytes = ssd_budget;
  return s;
}

Status PrefixStore::Impl::Flush() {
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock lk(&mu);
  return FlushLocked();
}

// Persists the statistics that change on every request (importance sums, chunk statistics, node
// hits and last access) in one transaction.
Status PrefixStore::Impl::FlushLocked() {
  CatalogBatch b;
  for (uint64_t id : dirty_segs) {
    auto it = segs.find(id);
    if (it == segs.end()) continue;
    SegmentRow r;
    r.id = id;
    r.n_tokens = it->second.n_tokens;
    r.generation = it->second.layout->generation;
    r.mapping = it->second.layout->Flat(it->second.n_tokens);
    r.imp_sum = it->second.imp_sum;
    r.imp_count = it->second.imp_count;
    b.upsert_segments.push_back(std::move(r));
  }
  for (auto& [cid, cs] : tiers.AllStats()) {
    ChunkKey k = ChunkKey::Unpack(cid);
    ChunkRow r;
    r.segment = k.segment;
    r.layer = k.layer;
    r.index = k.index;
    r.freq = double(cs.frequency);
    r.imp_ratio = cs.important_ratio;
    r.n_reports = cs.n_importance_reports;
    b.chunk_stats.push_back(r);
  }
  for (NodeId id : dirty_nodes) {
    auto info = tree.Get(id);
    if (!info) continue;
    NodeRecord r;
    r.id = id;
    r.last_access = info->last_access;
    r.hits = info->hits;
    b.node_stats.push_back(std::move(r));
  }
  IMPRESS_RETURN_IF_ERROR(catalog->Apply(b));
  dirty_segs.clear();
  dirty_nodes.clear();
  return Status::Ok();
}

Result<uint64_t> PrefixStore::Impl::EvictNodes(uint64_t n) {
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock lk(&mu);
  return EvictLocked(0, n);
}

std::vector<TierMove> PrefixStore::Impl::SetTierBudget(Tier tier, uint64_t bytes) {
  WaitForAdmissions();  // tier contents as of every read waited so far
  MutexLock lk(&mu);
  auto moves = tiers.SetBudget(tier, bytes);
  ApplyMovesLocked(moves);
  return moves;
}

Status PrefixStore::Impl::SetSsdBudget(uint64_t bytes) {
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock lk(&mu);
  ssd_budget = bytes;
  const uint64_t cap = UpdateDataCapLocked();
  while (files->disk_bytes() > cap) {
    if (EvictLocked(files->disk_bytes() - cap, 0) == 0)
      return Status::ResourceExhausted("store: " + std::to_string(files->disk_bytes()) +
                                       " bytes on disk are pinned, locked or in use; cannot shrink to " +
                                       std::to_string(bytes) + " (" + NoRoomReasonLocked() + ")");
  }
  return Status::Ok();
}

void PrefixStore::Impl::SetPolicy(PolicyKind kind) {
  MutexLock lk(&mu);
  tiers.SetPolicy(MakeCachePolicy(kind));
}

// ==================================================================== tree snapshot

// Per segment, computed once per snapshot: the tier each chunk would be served from now and each
// chunk's SSD bytes per slot (its extent length spread over its slots).
struct PrefixStore::Impl::SegView {
  std::vector<std::vector<Tier>> tier;        // [layer][chunk]
  std::vector<std::vector<double>> per_slot;  // [layer][chunk]
  double probe_per_token = 0;                 // summed over layers
};

TreeSnapshot PrefixStore::Impl::SnapshotTree(size_t max_nodes) {
  WaitForAdmissions();  // tier residency as of every read waited so far
  MutexLock lk(&mu);
  TreeSnapshot out;
  std::vector<NodeInfo> all = tree.PreOrder(ns);
  out.n_nodes_total = all.size();
  for (const auto& n : all) out.n_tokens_total += n.length;
  out.truncated = all.size() > max_nodes;
  if (out.truncated) all.resize(max_nodes);
  std::unordered_map<uint64_t, SegView> views;
  std::unordered_map<NodeId, int> index;
  out.nodes.reserve(all.size());
  for (const NodeInfo& n : all) {
    TreeNodeInfo t;
    t.id = n.id;
    auto pit = index.find(n.parent);
    t.parent = pit == index.end() ? -1 : pit->second;
    t.start = n.depth;
    t.n_tokens = n.length;
    t.hits = n.hits;
    t.last_access = n.last_access;
    t.n_children = n.n_children;
    t.pinned = n.pinned;
    t.locked = n.lock_ref > 0;
    auto toks = tree.Tokens(n.id);
    t.head.assign(toks.begin(), toks.begin() + long(std::min(toks.size(), TreeNodeInfo::kHeadTokens)));
    auto sit = segs.find(n.segment);
    if (sit != segs.end()) DescribeNodeLocked(n, SegViewLocked(n.segment, sit->second, views), sit->second, &t);
    index[n.id] = int(out.nodes.size());
    out.nodes.push_back(std::move(t));
  }
  return out;
}

const PrefixStore::Impl::SegView& PrefixStore::Impl::SegViewLocked(uint64_t seg, const SegState& ss,
                                                                   std::unordered_map<uint64_t, SegView>& views) {
  auto [it, fresh] = views.try_emplace(seg);
  if (!fresh) return it->second;
  const SegLayout& l = *ss.layout;
  SegView& v = it->second;
  v.tier.resize(l.chunks.size());
  v.per_slot.resize(l.chunks.size());
  for (uint32_t il = 0; il < l.chunks.size(); ++il) {
    v.tier[il].assign(l.chunks[il].size(), Tier::kSsd);
    v.per_slot[il].assign(l.chunks[il].size(), 0.0);
    for (uint32_t i = 0; i < l.chunks[il].size(); ++i) {
      if (!l.chunks[il][i]) continue;
      v.tier[il][i] = ServedFromLocked(Cid(seg, il, i), l.generation);
      v.per_slot[il][i] =
          double(l.chunks[il][i]->ext.length) / double(std::max<uint32_t>(1, l.chunks[il][i]->ext.n_slots));
    }
    if (il < l.probes.size() && l.probes[il])
      v.probe_per_token += double(l.probes[il]->ext.length) / double(std::max<uint32_t>(1, ss.n_tokens));
  }
  return v;
}

// A node's SSD bytes, chunks by tier, mean policy score and mean importance (all layers).
void PrefixStore::Impl::DescribeNodeLocked(const NodeInfo& n, const SegView& v, const SegState& ss, TreeNodeInfo* t) {
  const SegLayout& l = *ss.layout;
  const CachePolicy& policy = tiers.policy();
  const uint64_t end = std::min<uint64_t>(n.seg_begin + n.length, ss.n_tokens);
  double bytes = 0, imp_sum = 0, score_sum = 0;
  uint64_t imp_n = 0, score_n = 0;
  for (uint32_t il = 0; il < l.chunks.size(); ++il) {
    std::vector<bool> seen(l.chunks[il].size(), false);
    for (uint64_t o = n.seg_begin; o < end; ++o) {
      const uint32_t c = l.Slot(il, o) / C;
      bytes += v.per_slot[il][c];
      const size_t at = size_t(il) * ss.n_tokens + o;
      if (ss.imp_count[at]) {
        imp_sum += double(ss.imp_sum[at]) / ss.imp_count[at];
        ++imp_n;
      }
      if (seen[c] || !l.chunks[il][c]) continue;
      seen[c] = true;
      switch (v.tier[il][c]) {
        case Tier::kDevice: ++t->chunks_device; break;
        case Tier::kHost: ++t->chunks_host; break;
        case Tier::kSsd: ++t->chunks_ssd_only; break;
      }
      if (auto cs = tiers.Stats(Cid(n.segment, il, c))) {
        score_sum += policy.Rank(*cs).primary;
        ++score_n;
      }
    }
  }
  bytes += v.probe_per_token * double(end > n.seg_begin ? end - n.seg_begin : 0);
  t->kv_bytes = uint64_t(bytes + 0.5);
  t->score = score_n ? score_sum / double(score_n) : 0.0;
  t->importance = imp_n ? imp_sum / double(imp_n) : -1.0;
}

// ==================================================================== residency

PrefixResidency PrefixStore::Impl::Residency(std::span<const Token> tokens) {
  WaitForAdmissions();  // tier contents as of every read waited so far
  MutexLock lk(&mu);
  PrefixResidency r;
  const MatchResult m = tree.Match(ns, tokens, /*touch=*/false);
  r.n_matched = m.n_matched;
  r.pinned = !m.path.empty();
  std::set<ChunkId> seen;
  for (const PathSpan& sp : m.path) {
    auto info = tree.Get(sp.node);
    r.pinned = r.pinned && info && info->pinned;
    auto sit = segs.find(sp.segment);
    if (sit == segs.end()) {  // cannot happen: the tree names only live segments
      r.tokens_ssd_only += sp.length;
      continue;
    }
    SpanResidencyLocked(sp, *sit->second.layout, seen, &r);
  }
  return r;
}

// Counts one path span's tokens by the worst tier any layer serves them from, and its chunks
// (not already in `seen`) by tier.
void PrefixStore::Impl::SpanResidencyLocked(const PathSpan& sp, const SegLayout& l, std::set<ChunkId>& seen,
                                            PrefixResidency* r) {
  std::vector<std::vector<Tier>> tier(l.chunks.size());  // only this span's chunks are looked up
  for (uint32_t il = 0; il < l.chunks.size(); ++il) tier[il].assign(l.chunks[il].size(), Tier::kSsd);
  std::vector<std::vector<bool>> known(l.chunks.size());
  for (uint32_t il = 0; il < l.chunks.size(); ++il) known[il].assign(l.chunks[il].size(), false);
  for (uint64_t o = sp.seg_begin; o < sp.seg_begin + sp.length; ++o) {
    Tier worst = Tier::kDevice;
    for (uint32_t il = 0; il < l.chunks.size(); ++il) {
      const uint32_t c = l.Slot(il, o) / C;
      if (!known[il][c]) {
        known[il][c] = true;
        const ChunkId cid = Cid(sp.segment, il, c);
        tier[il][c] = ServedFromLocked(cid, l.generation);
        if (seen.insert(cid).second) {
          switch (tier[il][c]) {
            case Tier::kDevice: ++r->chunks_device; break;
            case Tier::kHost: ++r->chunks_host; break;
            case Tier::kSsd: ++r->chunks_ssd_only; break;
          }
        }
      }
      worst = std::min(worst, tier[il][c]);  // kSsd < kHost < kDevice
    }
    switch (worst) {
      case Tier::kDevice: ++r->tokens_device; break;
      case Tier::kHost: ++r->tokens_host; break;
      case Tier::kSsd: ++r->tokens_ssd_only; break;
    }
  }
}

// ==================================================================== pins

// Pin (or unpin) the cached path of `tokens`, in the tree and the catalog.
Status PrefixStore::Impl::SetPinned(std::span<const Token> tokens, bool pin) {
  const std::string what = pin ? "store pin" : "store unpin";
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock lk(&mu);
  const MatchResult m = tree.Match(ns, tokens, /*touch=*/false);
  if (m.n_matched == 0)
    return Status::NotFound(what + ": nothing of these " + std::to_string(tokens.size()) + " tokens is cached");
  IMPRESS_ASSIGN_OR_RETURN(std::vector<NodeId> changed, pin ? tree.Pin(m.last_node) : tree.Unpin(m.last_node));
  if (changed.empty()) return Status::Ok();
  CatalogBatch b;
  std::set<uint64_t> seg_ids;
  for (NodeId id : changed) {
    b.upsert_nodes.push_back(RecordOf(id));
    seg_ids.insert(b.upsert_nodes.back().segment);
  }
  Status s = CommitLocked(b);
  if (!s.ok()) {
    // Undo exactly what changed: pinning touched only nodes that were unpinned, and unpinning
    // stopped where another pinned path still needs a node.
    (void)(pin ? tree.Unpin(m.last_node) : tree.Pin(m.last_node));
    return s.WithContext(what + ": catalog commit");
  }
  RefreshPinsLocked(seg_ids);
  return Status::Ok();
}

// Tells the tier manager which chunks of `seg_ids` (empty: every segment) hold a token of a
// pinned node. Pins are closed upwards and a segment's nodes form a path, so each segment's
// pinned tokens are one range.
void PrefixStore::Impl::RefreshPinsLocked(const std::set<uint64_t>& seg_ids) {
  const bool all = seg_ids.empty();
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> pinned;  // segment -> [a, b)
  for (const NodeInfo& n : tree.PreOrder(ns)) {
    if (!n.pinned || (!all && !seg_ids.count(n.segment))) continue;
    auto [it, fresh] = pinned.try_emplace(n.segment, n.seg_begin, n.seg_begin + n.length);
    if (!fresh) {
      it->second.first = std::min(it->second.first, n.seg_begin);
      it->second.second = std::max(it->second.second, n.seg_begin + n.length);
    }
  }
  auto range_of = [&pinned](uint64_t seg) {
    auto pit = pinned.find(seg);
    return pit == pinned.end() ? nullptr : &pit->second;
  };
  if (all) {
    for (auto& [id, ss] : segs) RefreshSegmentPinsLocked(id, ss, range_of(id));
  } else {
    for (uint64_t id : seg_ids)
      if (auto it = segs.find(id); it != segs.end()) RefreshSegmentPinsLocked(id, it->second, range_of(id));
  }
}

// `pinned`: the segment's pinned original offsets [first, second), or null when none.
void PrefixStore::Impl::RefreshSegmentPinsLocked(uint64_t seg, const SegState& ss,
                                                 const std::pair<uint64_t, uint64_t>* pinned) {
  const SegLayout& l = *ss.layout;
  for (uint32_t il = 0; il < l.chunks.size(); ++il) {
    std::vector<bool> want(l.chunks[il].size(), false);
    if (pinned)
      for (uint64_t o = pinned->first; o < pinned->second && o < ss.n_tokens; ++o) want[l.Slot(il, o) / C] = true;
    for (uint32_t i = 0; i < want.size(); ++i) tiers.SetPinned(Cid(seg, il, i), want[i] && l.chunks[il][i]);
  }
}

// ==================================================================== drops

Result<uint64_t> PrefixStore::Impl::DropFrom(std::span<const Token> tokens, uint64_t begin) {
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock lk(&mu);
  const MatchResult m = tree.Match(ns, tokens, /*touch=*/false);
  if (begin >= m.n_matched) return uint64_t(0);  // position `begin` is not cached: nothing to drop
  const PathSpan* at = nullptr;
  for (const PathSpan& sp : m.path)
    if (begin >= sp.depth && begin < sp.depth + sp.length) at = &sp;
  if (!at) return Status::Internal("store drop: position " + std::to_string(begin) + " matched but lies in no node");
  const uint64_t keep = begin - at->depth;
  const std::vector<NodeInfo> sub = tree.PreOrder(ns, at->node);
  if (sub.empty()) return Status::Internal("store drop: node " + std::to_string(at->node) + " vanished");
  const std::string where = "the cached prefix from position " + std::to_string(begin);
  if (sub.front().lock_ref > 0)  // counts every lock below it too
    return Status::ResourceExhausted("store drop: refused, " + where +
                                     " is in use by a request in flight (locked); nothing dropped");
  uint64_t dropped = 0;
  for (const NodeInfo& n : sub) {
    if (n.pinned)
      return Status::InvalidArgument("store drop: refused, " + where + " is pinned (node " + std::to_string(n.id) +
                                     ", positions [" + std::to_string(n.depth) + ", " +
                                     std::to_string(n.depth + n.length) + ")); unpin it first; nothing dropped");
    dropped += n.length;
  }
  dropped -= keep;
  IMPRESS_ASSIGN_OR_RETURN(std::vector<Eviction> evs, tree.Truncate(at->node, keep));
  CatalogBatch b;
  ApplyEvictionsLocked(evs, b);
  IMPRESS_RETURN_IF_ERROR(CommitLocked(b).WithContext("store drop: catalog commit"));
  return dropped;
}

// ==================================================================== consistency (tests)

Status PrefixStore::Impl::CheckConsistency() {
  WaitForAdmissions();  // tier contents as of every read waited so far
  std::vector<ReadSource> srcs;
  {
    MutexLock lk(&mu);
    IMPRESS_RETURN_IF_ERROR(CheckIndexLocked(&srcs));
  }
  for (auto& s : srcs) {
    s.img = AlignedBuffer(s.ext->ext.length);
    IMPRESS_RETURN_IF_ERROR(io->Wait(
        io->Submit({ReadOp{files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()}})));
    IMPRESS_RETURN_IF_ERROR(VerifySource(s, s.index == UINT32_MAX));
  }
  return Status::Ok();
}

// Tree, tiers and segments agree; every extent the index names is queued to be read back.
Status PrefixStore::Impl::CheckIndexLocked(std::vector<ReadSource>* to_verify) {
  IMPRESS_RETURN_IF_ERROR(tree.Validate());
  IMPRESS_RETURN_IF_ERROR(tiers.Validate());
  for (const auto& r : tree.Export(ns)) {
    auto it = segs.find(r.segment);
    if (it == segs.end())
      return Status::Corruption("node " + std::to_string(r.id) + " names missing segment " + std::to_string(r.segment));
    const SegLayout& l = *it->second.layout;
    if (r.seg_begin + r.tokens.size() > it->second.n_tokens)
      return Status::Corruption("node " + std::to_string(r.id) + " runs past its segment");
    for (uint64_t o = r.seg_begin; o < r.seg_begin + r.tokens.size(); ++o)
      for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il)
        if (!l.chunks[il][l.Slot(il, o) / C])
          return Status::Corruption("live offset " + std::to_string(o) + " of segment " + std::to_string(r.segment) +
                                    " has no chunk");
  }
  for (auto& [id, s] : segs) {
    const SegLayout& l = *s.layout;
    for (uint32_t il = 0; il < l.chunks.size(); ++il) {
      for (uint32_t i = 0; i < l.chunks[il].size(); ++i)
        if (l.chunks[il][i]) to_verify->push_back(WholeExtent(id, il, i, l.generation, l.chunks[il][i]));
      if (!l.probes[il]) return Status::Corruption("segment " + std::to_string(id) + " lacks probe keys");
      to_verify->push_back(WholeExtent(id, il, UINT32_MAX, 0, l.probes[il]));
    }
  }
  return Status::Ok();
}

}  // namespace impress::store
