// PrefixStore::Impl: the reorder pass (each layer's tokens sorted by their historical importance
// and rewritten under a new generation) and the background worker that runs it periodically.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "store/prefix-store-impl.h"

namespace impress::store {

// One segment's rewrite, planned under the lock and carried out without it.
struct PrefixStore::Impl::ReorderPlan {
  LayoutPtr old;                               // the layout being replaced
  uint32_t n = 0;                              // the segment's tokens
  std::pair<uint64_t, uint64_t> live;          // original offsets some node still names
  std::vector<std::vector<uint32_t>> mapping;  // [layer] slot -> original; empty = identity
  std::vector<std::vector<uint32_t>> slot_of;  // [layer] original -> slot; empty = identity
  std::vector<std::vector<bool>> wanted;       // [layer][chunk] of the new layout holding a live offset
  uint64_t gen = 0;                            // the new layout's generation
  std::vector<uint8_t> krecs, vrecs;           // one layer's K and V in original order (scratch)
  // Tier images (K records, then V records, in slot order) of the new chunks whose old copy a
  // memory tier held when their layer was rewritten: the swap puts them where the old ones were.
  std::unordered_map<ChunkId, std::vector<uint8_t>> images;
};

Result<ReorderReport> PrefixStore::Impl::ReorderNow() {
  WaitForAdmissions();  // tier contents as of every read waited so far
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  MutexLock rl(&reorder_mu);
  std::vector<uint64_t> ids;
  {
    MutexLock lk(&mu);
    IMPRESS_RETURN_IF_ERROR(FlushLocked());
    for (auto& [id, s] : segs) {
      bool any = false;
      for (uint32_t c : s.imp_count) any = any || c > 0;
      if (any) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ReorderReport rep;
  Status first;
  for (uint64_t id : ids) {
    Status s = ReorderSegment(id, &rep);
    if (s.code() == Status::Code::kResourceExhausted) {  // no room for the new copy now: later
      spdlog::info("store: reorder of segment {} postponed: {}", id, s.ToString());
      continue;
    }
    if (!s.ok()) {
      spdlog::warn("store: reorder of segment {} failed: {}", id, s.ToString());
      if (first.ok()) first = s;
    }
  }
  MutexLock lk(&mu);
  ++st.reorder_passes;
  if (!first.ok() && rep.segments_reordered == 0 && !ids.empty()) return first;
  return rep;
}

// Each layer's tokens are sorted, inside each node, by that layer's average historical importance
// (the pipeline selects tokens per layer, and they differ between layers), so every layer gets its
// own mapping list. All layers are rewritten under one new generation when any layer's order
// changed; the catalog swap is one transaction.
Status PrefixStore::Impl::ReorderSegment(uint64_t seg, ReorderReport* rep) {
  ReorderPlan plan;
  {
    MutexLock lk(&mu);
    if (!PlanReorderLocked(seg, &plan)) return Status::Ok();
  }
  ++rep->segments_seen;
  const uint32_t n_layer = uint32_t(opt.n_layer), n = plan.n;
  plan.slot_of.resize(n_layer);
  plan.wanted.resize(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (!plan.mapping[il].empty()) {
      plan.slot_of[il].resize(n);
      for (uint32_t sl = 0; sl < n; ++sl) plan.slot_of[il][plan.mapping[il][sl]] = sl;
    }
    plan.wanted[il].assign(NChunks(n), false);
    for (uint64_t o = plan.live.first; o < plan.live.second; ++o)
      plan.wanted[il][(plan.slot_of[il].empty() ? uint32_t(o) : plan.slot_of[il][o]) / C] = true;
  }
  plan.gen = plan.old->generation + 1;
  plan.krecs.resize(size_t(n) * k_bytes);
  plan.vrecs.resize(size_t(n) * k_bytes);
  WrittenChunks w;
  for (uint32_t il = 0; il < n_layer; ++il) {
    Status s = RewriteLayer(seg, plan, il, &w);
    if (!s.ok()) {
      RetireAll(w.owned);
      return s;
    }
  }
  Status sy = SyncFiles(w.files_touched);
  if (!sy.ok()) {
    RetireAll(w.owned);
    return sy;
  }
  MutexLock lk(&mu);
  return SwapLayoutLocked(seg, plan, w, rep);
}

// The new per-layer orders of segment `seg`; false when it is gone or no layer's order changes.
bool PrefixStore::Impl::PlanReorderLocked(uint64_t seg, ReorderPlan* plan) {
  auto it = segs.find(seg);
  auto range = tree.SegmentLiveRange(seg);
  if (it == segs.end() || !range) return false;
  const SegState& ss = it->second;
  const uint32_t n = ss.n_tokens, n_layer = uint32_t(opt.n_layer);
  plan->old = ss.layout;
  plan->n = n;
  plan->live = *range;
  plan->live.second = std::min<uint64_t>(plan->live.second, n);
  plan->mapping.assign(n_layer, {});
  const std::vector<uint64_t> cuts = NodeCutsLocked(seg, n);
  bool changed = false;
  std::vector<double> avg(n, 0.0);
  for (uint32_t il = 0; il < n_layer; ++il) {
    const float* sum = ss.imp_sum.data() + size_t(il) * n;
    const uint32_t* cnt = ss.imp_count.data() + size_t(il) * n;
    for (uint32_t o = 0; o < n; ++o) avg[o] = cnt[o] ? double(sum[o]) / cnt[o] : 0.0;
    std::vector<uint32_t>& m = plan->mapping[il];
    m.resize(n);
    std::iota(m.begin(), m.end(), 0u);
    for (size_t c = 0; c + 1 < cuts.size(); ++c)
      std::stable_sort(m.begin() + long(cuts[c]), m.begin() + long(cuts[c + 1]),
                       [&](uint32_t a, uint32_t b) { return avg[a] > avg[b]; });
    for (uint32_t sl = 0; sl < n && !changed; ++sl) changed = m[sl] != plan->old->Orig(il, sl);
    bool identity = true;
    for (uint32_t sl = 0; sl < n && identity; ++sl) identity = m[sl] == sl;
    if (identity) m.clear();
  }
  return changed;
}

// Node boundaries inside the segment, sorted: tokens never move across nodes.
std::vector<uint64_t> PrefixStore::Impl::NodeCutsLocked(uint64_t seg, uint32_t n) {
  std::vector<uint64_t> cuts = {0, n};
  for (const auto& r : tree.Export(ns))
    if (r.segment == seg) {
      cuts.push_back(r.seg_begin);
      cuts.push_back(std::min<uint64_t>(n, r.seg_begin + r.tokens.size()));
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// Reads every live chunk of layer il of the old layout (checked) into original order, and
// writes the wanted chunks of the new one.
Status PrefixStore::Impl::RewriteLayer(uint64_t seg, ReorderPlan& plan, uint32_t il, WrittenChunks* out) {
  const SegLayout& old = *plan.old;
  std::vector<ReadSource> srcs;
  std::vector<ReadOp> ops;
  for (uint32_t i = 0; i < old.chunks[il].size(); ++i) {
    if (!old.chunks[il][i]) continue;
    ReadSource s = WholeExtent(seg, il, i, old.generation, old.chunks[il][i]);
    s.img = AlignedBuffer(s.ext->ext.length);
    srcs.push_back(std::move(s));
  }
  for (auto& s : srcs)
    ops.push_back(ReadOp{files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()});
  Status st_io = io->Wait(io->Submit(std::move(ops)));
  if (!st_io.ok()) return st_io.WithContext("reorder read");
  for (auto& s : srcs) {
    Status v = VerifySource(s, false);
    if (!v.ok()) {
      MutexLock lk(&mu);
      if (segs.count(seg) && segs[seg].layout == plan.old) MarkCorruptLocked(s, v);
      return v;
    }
    const ChunkLayout lay = KVLayout(s.ext->ext.n_slots);
    for (uint32_t w = 0; w < s.ext->ext.n_slots; ++w) {
      const size_t o = old.Orig(il, s.ext->ext.slot_begin + w);
      std::memcpy(plan.krecs.data() + o * k_bytes, s.img.data() + lay.k_offset + size_t(w) * k_bytes, k_bytes);
      std::memcpy(plan.vrecs.data() + o * k_bytes, s.img.data() + lay.v_offset + size_t(w) * k_bytes, k_bytes);
    }
  }
  KeepTierImages(seg, plan, il);
  ProbeRow unused;
  Status w = WriteLayer(
      seg, plan.gen, il, plan.n, plan.mapping[il], plan.wanted[il],
      [&](uint32_t o) { return plan.krecs.data() + size_t(o) * k_bytes; },
      [&](uint32_t o) { return plan.vrecs.data() + size_t(o) * k_bytes; }, nullptr, &unused, out);
  if (!w.ok()) return w.WithContext("reorder write");
  return Status::Ok();
}

// The reordered segments are the popular ones, whose chunks the memory tiers hold: their new
// images are made from this layer's records while they are at hand, so the swap can keep them in
// those tiers instead of sending the next question back to the SSD.
void PrefixStore::Impl::KeepTierImages(uint64_t seg, ReorderPlan& plan, uint32_t il) {
  std::vector<uint32_t> resident;
  {
    MutexLock lk(&mu);
    for (uint32_t i = 0; i < plan.wanted[il].size(); ++i)
      if (plan.wanted[il][i] && ServedFromLocked(Cid(seg, il, i), plan.old->generation) != Tier::kSsd)
        resident.push_back(i);
  }
  const std::vector<uint32_t>& m = plan.mapping[il];
  for (uint32_t i : resident) {
    const uint32_t n_slots = std::min(C, plan.n - i * C);
    const size_t region = size_t(n_slots) * k_bytes;
    std::vector<uint8_t>& img = plan.images[Cid(seg, il, i)];
    img.resize(size_t(n_slots) * rec_bytes);
    for (uint32_t s = 0; s < n_slots; ++s) {
      const uint32_t slot = i * C + s, o = m.empty() ? slot : m[slot];
      std::memcpy(img.data() + size_t(s) * k_bytes, plan.krecs.data() + size_t(o) * k_bytes, k_bytes);
      std::memcpy(img.data() + region + size_t(s) * k_bytes, plan.vrecs.data() + size_t(o) * k_bytes, k_bytes);
    }
  }
}

// One chunk id across the swap: the new chunk takes the old one's place in its memory tier when
// its image is at hand, and its access statistics (the chunk id is the same; its slots now hold
// the layer's most important tokens first). Otherwise the stale copy leaves the tier, the
// statistics stay, and the next read admits the new chunk by them. A chunk no longer stored is
// forgotten.
void PrefixStore::Impl::CarryOverChunkLocked(ChunkId cid, const ReorderPlan& plan, const ExtentPtr& now) {
  if (!now) {
    DropChunkLocked(cid);
    return;
  }
  const Tier t = ServedFromLocked(cid, plan.old->generation);
  auto img = plan.images.find(cid);
  if (t != Tier::kSsd && tiers.Where(cid) == t && img != plan.images.end() &&
      img->second.size() == ChunkMemBytes(now)) {
    blocks[size_t(t)].erase(cid);  // a reader of the old layout keeps its own reference
    auto& mem = t == Tier::kDevice ? device_mem : host_mem;
    auto b = std::make_shared<TierBlock>();
    b->mem = mem;
    b->n = img->second.size();
    b->generation = plan.gen;
    b->p = mem->Alloc(b->n);
    if (b->p) {
      mem->CopyIn(b->p, img->second.data(), b->n);
      blocks[size_t(t)][cid] = std::move(b);
      return;
    }
  }
  if (auto mv = tiers.Remove(cid, /*keep_stats=*/true)) ApplyMoveLocked(*mv);
  blocks[size_t(Tier::kHost)].erase(cid);
  blocks[size_t(Tier::kDevice)].erase(cid);
}

// Publishes the rewritten layout in one catalog transaction, unless the segment was evicted,
// truncated or changed meanwhile (then the new chunks are dropped and the next pass tries again).
Status PrefixStore::Impl::SwapLayoutLocked(uint64_t seg, ReorderPlan& plan, WrittenChunks& w, ReorderReport* rep) {
  const uint32_t n_layer = uint32_t(opt.n_layer), n = plan.n;
  const LayoutPtr& old = plan.old;
  auto it = segs.find(seg);
  auto range = tree.SegmentLiveRange(seg);
  if (it == segs.end() || it->second.layout != old || !range || range->first != plan.live.first ||
      std::min<uint64_t>(range->second, n) != plan.live.second) {
    RetireAll(w.owned);
    return Status::Ok();
  }
  auto nl = std::make_shared<SegLayout>();
  nl->generation = plan.gen;
  nl->mapping = plan.mapping;
  nl->slot_of = std::move(plan.slot_of);
  nl->chunks.assign(size_t(n_layer), std::vector<ExtentPtr>(NChunks(n)));
  nl->probes = old->probes;
  size_t oi = 0;
  for (uint32_t il = 0; il < n_layer; ++il)
    for (uint32_t i = 0; i < NChunks(n); ++i)
      if (plan.wanted[il][i]) nl->chunks[il][i] = w.owned[oi++];
  CatalogBatch b;
  b.delete_segment_chunks.push_back(seg);
  b.upsert_chunks = w.rows;
  SegmentRow sr;
  sr.id = seg;
  sr.n_tokens = n;
  sr.generation = plan.gen;
  sr.mapping = nl->Flat(n);
  sr.imp_sum = it->second.imp_sum;
  sr.imp_count = it->second.imp_count;
  b.upsert_segments.push_back(sr);
  Status cs = CommitLocked(b);
  if (!cs.ok()) {
    RetireAll(w.owned);
    return cs.WithContext("reorder commit");
  }
  for (uint32_t il = 0; il < old->chunks.size(); ++il)
    for (uint32_t i = 0; i < old->chunks[il].size(); ++i) {
      if (old->chunks[il][i]) old->chunks[il][i]->retired = true;  // freed when the last reader lets go
      CarryOverChunkLocked(Cid(seg, il, i), plan, nl->chunks[il][i]);
    }
  it->second.layout = nl;
  RefreshPinsLocked({seg});  // same chunk ids, other tokens: pins follow the tokens
  dirty_segs.erase(seg);
  ++rep->segments_reordered;
  rep->bytes_written += w.bytes;
  ++st.segments_reordered;
  return Status::Ok();
}

// ==================================================================== background worker

void PrefixStore::Impl::SetReorderInterval(std::chrono::milliseconds interval) {
  {
    MutexLock lk(&worker_mu);
    // A read-only store never reorders (ReorderNow refuses): its worker stays idle.
    reorder_interval = read_only ? std::chrono::milliseconds(0) : std::max(interval, std::chrono::milliseconds(0));
    reorder_interval_gen++;
  }
  worker_cv.SignalAll();
}

// Sleeps one interval (or until stopped or given a new interval), then runs a pass without
// holding worker_mu.
void PrefixStore::Impl::WorkerLoop() {
  worker_mu.Lock();
  while (!stop) {
    const uint64_t gen = reorder_interval_gen;
    if (reorder_interval.count() <= 0) {
      while (!stop && reorder_interval_gen == gen) worker_cv.Wait(&worker_mu);
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + reorder_interval;
    while (!stop && reorder_interval_gen == gen && worker_cv.WaitUntil(&worker_mu, deadline)) {
    }
    if (stop || reorder_interval_gen != gen) continue;  // stopping, or a new interval
    worker_mu.Unlock();
    auto r = ReorderNow();
    if (!r.ok()) spdlog::warn("store: periodic reorder: {}", r.status().ToString());
    else if (r->segments_reordered)
      spdlog::info("store: reorder rewrote {} segment(s), {} MiB", r->segments_reordered, r->bytes_written / kMiB);
    worker_mu.Lock();
  }
  worker_mu.Unlock();
}

}  // namespace impress::store
