#include "store/prefix-store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "store/catalog.h"
#include "store/chunk-format.h"
#include "store/extent-files.h"
#include "store/uring-io.h"

namespace impress::store {

namespace {

// One chunk or probe set on disk. Freed when retired (no catalog row names it any more) and the
// last layout snapshot that could read it is gone.
struct OwnedExtent {
  ChunkExtent ext;
  std::shared_ptr<ExtentFiles> files;
  std::atomic<bool> retired{false};
  ~OwnedExtent() {
    if (retired.load()) files->Free(Extent{ext.file, ext.offset, ext.length});
  }
};
using ExtentPtr = std::shared_ptr<OwnedExtent>;

// The immutable physical layout of one KV segment; readers hold snapshots. Each layer has its own
// token order (the paper's per-layer mapping list): which tokens matter differs between layers.
struct SegLayout {
  uint64_t generation = 0;
  std::vector<std::vector<uint32_t>> mapping;  // [layer] slot -> original offset; empty = identity
  std::vector<std::vector<uint32_t>> slot_of;  // [layer] original offset -> slot; empty = identity
  std::vector<std::vector<ExtentPtr>> chunks;  // [layer][index]; null = freed (outside the live range)
  std::vector<ExtentPtr> probes;               // [layer]
  uint32_t Slot(uint32_t il, uint64_t off) const { return slot_of[il].empty() ? uint32_t(off) : slot_of[il][off]; }
  uint32_t Orig(uint32_t il, uint32_t slot) const { return mapping[il].empty() ? slot : mapping[il][slot]; }
  // All layers' mapping lists, layer-major (n_layer * n), or empty when every layer is identity.
  std::vector<uint32_t> Flat(uint32_t n) const {
    bool any = false;
    for (const auto& m : mapping) any = any || !m.empty();
    std::vector<uint32_t> out;
    if (!any) return out;
    out.reserve(mapping.size() * n);
    for (uint32_t il = 0; il < mapping.size(); ++il)
      for (uint32_t sl = 0; sl < n; ++sl) out.push_back(Orig(il, sl));
    return out;
  }
};
using LayoutPtr = std::shared_ptr<const SegLayout>;

struct SegState {
  uint32_t n_tokens = 0;
  LayoutPtr layout;
  std::vector<float> imp_sum;       // [layer * n_tokens + original offset]: summed importance reports
  std::vector<uint32_t> imp_count;  // same index: number of reports
};

struct TierBlock {
  std::shared_ptr<MemorySpace> mem;
  void* p = nullptr;
  size_t n = 0;
  uint64_t generation = 0;
  ~TierBlock() {
    if (p) mem->Free(p);
  }
};
using BlockPtr = std::shared_ptr<TierBlock>;

struct SpanView {
  PathSpan span;
  LayoutPtr layout;
};

struct HandleState {
  NodeId last_node = kNoNode;
  uint64_t n_matched = 0;
  std::vector<SpanView> spans;
};

// One chunk (or probe set) a read touches.
struct Source {
  ChunkId cid = 0;
  uint64_t segment = 0;
  uint32_t layer = 0, index = 0;
  uint64_t generation = 0;
  ExtentPtr ext;                 // disk source
  BlockPtr block;                // memory source: K region then V region (n_slots records each), no header
  AlignedBuffer img;             // the chunk image (only the read blocks are valid)
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // (first block, n blocks) read from disk
  bool whole = false;            // whole chunk read (to install in a tier)
  Tier install = Tier::kSsd;
  std::vector<std::pair<uint32_t, uint32_t>> rows;  // (output row, record index inside the chunk)
};

struct PendingRead {
  bool probe = false;
  bool want_k = false, want_v = false;
  uint64_t n_rows = 0;
  ReadEngine::Ticket ticket = 0;
  std::vector<Source> sources;
  ReadStats stats;
};

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

struct PrefixStore::Impl {
  // Constant after Open.
  PrefixStoreOptions opt;
  Env* env = nullptr;
  std::string ns;                // radix namespace = model fingerprint
  uint64_t fp_hash = 0;
  uint32_t C = 64;
  uint32_t rec_bytes = 0;        // K + V of one token: 2 * k_bytes (memory tiers hold n_slots * rec_bytes)
  uint32_t k_bytes = 0;          // K (or V) of one token: (n_head_kv, head_dim) fp16
  uint32_t probe_rec_bytes = 0;  // (n_probe, head_dim) fp16
  std::unique_ptr<Catalog> catalog;
  std::shared_ptr<ExtentFiles> files;
  std::unique_ptr<ReadEngine> io;
  std::shared_ptr<MemorySpace> device_mem, host_mem;
  bool direct = false;

  std::mutex mu;
  RadixTree tree;                                   // GUARDED_BY(mu)
  std::unique_ptr<TierManager> tiers;               // GUARDED_BY(mu)
  std::unordered_map<uint64_t, SegState> segs;      // GUARDED_BY(mu)
  std::unordered_map<ChunkId, BlockPtr> blocks[3];  // GUARDED_BY(mu), by Tier
  std::unordered_map<uint64_t, HandleState> handles;  // GUARDED_BY(mu)
  std::unordered_map<ReadTicket, std::unique_ptr<PendingRead>> reads;  // GUARDED_BY(mu)
  std::set<std::tuple<uint64_t, uint64_t, uint32_t, uint32_t>> bad_chunks;  // (seg, gen, layer, index)
  std::set<std::pair<uint64_t, uint64_t>> pending_truncations;  // (segment, first bad original offset)
  uint64_t next_handle = 1, next_ticket = 1;
  StoreStats st;                                    // GUARDED_BY(mu) (counters only)
  std::unordered_set<uint64_t> dirty_segs;          // GUARDED_BY(mu): importance stats to persist
  std::unordered_set<NodeId> dirty_nodes;           // GUARDED_BY(mu): hits / last access to persist
  std::vector<ExtentPtr> pending_retire;            // GUARDED_BY(mu): freed after the next commit
  std::mutex pool_mu;
  std::multimap<size_t, AlignedBuffer> pool;        // GUARDED_BY(pool_mu): read buffers for reuse
  size_t pool_bytes = 0;                            // GUARDED_BY(pool_mu)

  // Read buffers are reused: fresh pages would cost a page fault per 4 KiB on every read.
  AlignedBuffer GetBuffer(size_t n) {
    {
      std::lock_guard<std::mutex> lk(pool_mu);
      auto it = pool.find(n);
      if (it != pool.end()) {
        AlignedBuffer b = std::move(it->second);
        pool.erase(it);
        pool_bytes -= n;
        return b;
      }
    }
    return AlignedBuffer(n, /*zero=*/false);
  }
  void PutBuffer(AlignedBuffer b) {
    if (!b.data()) return;
    std::lock_guard<std::mutex> lk(pool_mu);
    if (pool_bytes + b.size() > (64ull << 20)) return;
    pool_bytes += b.size();
    const size_t n = b.size();
    pool.emplace(n, std::move(b));
  }

  std::mutex reorder_mu;  // one reorder pass at a time
  std::thread worker;
  std::mutex worker_mu;
  std::condition_variable worker_cv;
  bool stop = false;  // GUARDED_BY(worker_mu)
  std::chrono::milliseconds reorder_interval{0};  // GUARDED_BY(worker_mu); 0: on demand only
  uint64_t reorder_interval_gen = 0;              // GUARDED_BY(worker_mu); bumped by SetReorderInterval

  // ------------------------------------------------------------------ helpers
  std::string Geometry() const {
    std::string g = "L" + std::to_string(opt.n_layer) + ".H" + std::to_string(opt.n_head_kv) + ".D" +
                    std::to_string(opt.head_dim) + ".C" + std::to_string(opt.chunk_tokens) + ".P";
    for (int h : opt.probe_kv_heads) g += std::to_string(h) + ",";
    return g;
  }
  uint32_t NChunks(uint32_t n_tokens) const { return (n_tokens + C - 1) / C; }
  ChunkId Cid(uint64_t seg, uint32_t layer, uint32_t index) const { return ChunkKey{seg, layer, index}.Pack(); }
  uint64_t ChunkMemBytes(const ExtentPtr& e) const { return uint64_t(e->ext.n_slots) * rec_bytes; }
  ChunkLayout KVLayout(uint32_t n_slots) const { return KVChunkLayout(n_slots, k_bytes); }

  ChunkHeader HeaderFor(ChunkKind kind, uint64_t seg, uint64_t gen, uint32_t layer, uint32_t index, uint32_t slot_begin,
                        uint32_t n_slots, bool reordered) const {
    ChunkHeader h{};
    h.kind = uint16_t(kind);
    h.fingerprint_hash = fp_hash;
    h.node_id = seg;
    h.generation = gen;
    h.layer = layer;
    h.index = index;
    h.slot_begin = slot_begin;
    h.n_slots = n_slots;
    h.n_heads = kind == ChunkKind::kKV ? uint32_t(opt.n_head_kv) : uint32_t(opt.probe_kv_heads.size());
    h.head_dim = uint32_t(opt.head_dim);
    h.record_bytes = kind == ChunkKind::kKV ? k_bytes : probe_rec_bytes;
    h.reordered = reordered ? 1 : 0;
    return h;
  }

  void ApplyMoveLocked(const TierMove& m) {
    auto& from = blocks[size_t(m.from)];
    auto it = from.find(m.chunk);
    if (m.to == Tier::kSsd) {
      if (it != from.end()) from.erase(it);
      return;
    }
    if (m.from == Tier::kSsd || it == from.end()) return;  // staged copies are installed after their read
    BlockPtr src = it->second;
    from.erase(it);
    auto& mem = m.to == Tier::kDevice ? device_mem : host_mem;
    auto b = std::make_shared<TierBlock>();
    b->mem = mem;
    b->n = src->n;
    b->generation = src->generation;
    b->p = mem->Alloc(src->n);
    if (!b->p) return;  // out of memory: the chunk is simply not cached
    std::vector<uint8_t> tmp(src->n);
    src->mem->CopyOut(tmp.data(), src->p, src->n);
    mem->CopyIn(b->p, tmp.data(), src->n);
    blocks[size_t(m.to)][m.chunk] = std::move(b);
  }
  void ApplyMovesLocked(const std::vector<TierMove>& moves) {
    for (const auto& m : moves) ApplyMoveLocked(m);
  }
  void DropChunkLocked(ChunkId cid) {
    if (auto m = tiers->Remove(cid)) ApplyMoveLocked(*m);
    blocks[size_t(Tier::kHost)].erase(cid);
    blocks[size_t(Tier::kDevice)].erase(cid);
  }

  // Chunks of segment `seg` no live original offset maps into: retired, rows deleted.
  void FreeDeadChunksLocked(uint64_t seg, CatalogBatch& batch) {
    auto it = segs.find(seg);
    if (it == segs.end()) return;
    auto range = tree.SegmentLiveRange(seg);
    if (!range) return;
    const SegLayout& old = *it->second.layout;
    const uint32_t n = it->second.n_tokens;
    std::vector<std::vector<bool>> live(old.chunks.size(), std::vector<bool>(NChunks(n), false));
    for (uint32_t il = 0; il < old.chunks.size(); ++il)
      for (uint64_t o = range->first; o < range->second && o < n; ++o) live[il][old.Slot(il, o) / C] = true;
    bool changed = false;
    for (uint32_t il = 0; il < old.chunks.size(); ++il)
      for (size_t i = 0; i < old.chunks[il].size(); ++i)
        if (old.chunks[il][i] && !live[il][i]) changed = true;
    if (!changed) return;
    auto nl = std::make_shared<SegLayout>(old);
    for (uint32_t il = 0; il < nl->chunks.size(); ++il)
      for (uint32_t i = 0; i < nl->chunks[il].size(); ++i)
        if (nl->chunks[il][i] && !live[il][i]) {
          pending_retire.push_back(std::move(nl->chunks[il][i]));
          nl->chunks[il][i].reset();
          batch.delete_chunks.emplace_back(seg, il, i);
          DropChunkLocked(Cid(seg, il, i));
        }
    it->second.layout = std::move(nl);
  }

  void KillSegmentLocked(uint64_t seg, CatalogBatch& batch) {
    auto it = segs.find(seg);
    if (it == segs.end()) return;
    const SegLayout& l = *it->second.layout;
    for (uint32_t il = 0; il < l.chunks.size(); ++il)
      for (uint32_t i = 0; i < l.chunks[il].size(); ++i) {
        if (l.chunks[il][i]) pending_retire.push_back(l.chunks[il][i]);
        DropChunkLocked(Cid(seg, il, i));
      }
    for (auto& p : l.probes)
      if (p) pending_retire.push_back(p);
    segs.erase(it);
    dirty_segs.erase(seg);
    batch.delete_segments.push_back(seg);
  }

  NodeRecord RecordOf(NodeId id) {
    NodeRecord r;
    auto info = tree.Get(id);
    if (!info) return r;
    r.id = id;
    r.parent = info->parent;
    r.segment = info->segment;
    r.seg_begin = info->seg_begin;
    auto t = tree.Tokens(id);
    r.tokens.assign(t.begin(), t.end());
    r.last_access = info->last_access;
    r.user_data = info->user_data;
    r.pinned = info->pinned;
    r.hits = info->hits;
    return r;
  }

  // Mirrors evictions / truncations in the catalog batch and frees what nobody names.
  void ApplyEvictionsLocked(const std::vector<Eviction>& evs, CatalogBatch& batch) {
    std::set<uint64_t> touched;
    bool any_pinned = false;
    for (const auto& e : evs) {
      any_pinned = any_pinned || e.node.pinned;
      dirty_nodes.erase(e.node.id);
      if (tree.Get(e.node.id)) batch.upsert_nodes.push_back(RecordOf(e.node.id));  // truncated, still there
      else {
        batch.delete_nodes.push_back(e.node.id);
        ++st.nodes_evicted;
      }
      touched.insert(e.node.segment);
    }
    for (uint64_t seg : touched) {
      if (!tree.SegmentLiveRange(seg)) KillSegmentLocked(seg, batch);
      else FreeDeadChunksLocked(seg, batch);
    }
    if (any_pinned) RefreshPinsLocked(touched);  // only the corruption path removes pinned nodes
  }

  // Tells the tier manager which chunks of `seg_ids` (empty: every segment) hold a token of a
  // pinned node. Pins are closed upwards and a segment's nodes form a path, so each segment's
  // pinned tokens are one range.
  void RefreshPinsLocked(const std::set<uint64_t>& seg_ids) {
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
    auto refresh = [&](uint64_t seg, const SegState& ss) {
      const SegLayout& l = *ss.layout;
      auto pit = pinned.find(seg);
      for (uint32_t il = 0; il < l.chunks.size(); ++il) {
        std::vector<bool> want(l.chunks[il].size(), false);
        if (pit != pinned.end())
          for (uint64_t o = pit->second.first; o < pit->second.second && o < ss.n_tokens; ++o) want[l.Slot(il, o) / C] = true;
        for (uint32_t i = 0; i < want.size(); ++i) tiers->SetPinned(Cid(seg, il, i), want[i] && l.chunks[il][i]);
      }
    };
    if (all) {
      for (auto& [id, ss] : segs) refresh(id, ss);
    } else {
      for (uint64_t id : seg_ids)
        if (auto it = segs.find(id); it != segs.end()) refresh(id, it->second);
    }
  }

  // The tier a read of this chunk would be served from now (what the memory tiers really hold).
  Tier ServedFromLocked(ChunkId cid, uint64_t generation) const {
    for (Tier t : {Tier::kDevice, Tier::kHost}) {
      auto b = blocks[size_t(t)].find(cid);
      if (b != blocks[size_t(t)].end() && b->second->generation == generation) return t;
    }
    return Tier::kSsd;
  }

  // Why the SSD budget cannot be met by eviction (for error messages).
  std::string NoRoomReasonLocked() {
    uint64_t pinned = 0, locked = 0, other = 0;
    for (const NodeInfo& n : tree.PreOrder(ns)) {
      if (n.pinned) pinned += n.length;
      else if (n.lock_ref) locked += n.length;
      else other += n.length;
    }
    return "nothing left to evict: " + std::to_string(pinned) + " cached tokens are pinned, " + std::to_string(locked) +
           " locked by requests in flight, " + std::to_string(other) + " held up by those";
  }

  // Commits a batch; only then may the extents it stopped naming be freed (once no reader holds
  // them). Freeing earlier would let a crash leave the catalog naming reused or truncated space.
  // Pin (or unpin) the cached path of `tokens`, in the tree and the catalog.
  Status SetPinned(std::span<const Token> tokens, bool pin);

  Status CommitLocked(const CatalogBatch& b) {
    Status s = catalog->Apply(b);
    if (s.ok())
      for (auto& e : pending_retire) e->retired = true;
    pending_retire.clear();  // on failure the catalog still names them: never freed (until reopen)
    return s;
  }

  // The data files get the SSD budget minus the catalog and room for it to grow: the WAL is
  // checkpointed every 512 KiB (catalog.cpp), so 1 MiB + a quarter of the database covers it.
  uint64_t UpdateDataCapLocked() {
    const uint64_t cat = catalog->FileBytes();
    const uint64_t reserve = cat + cat / 4 + (1ull << 20);
    const uint64_t cap = opt.ssd_bytes > reserve ? opt.ssd_bytes - reserve : 0;
    files->SetCap(cap);
    return cap;
  }

  // Evicts LRU leaves until about `bytes` of chunk data is freed. Returns the number evicted.
  uint64_t EvictLocked(uint64_t bytes, uint64_t max_nodes) {
    EvictOptions eo;
    eo.name_space = ns;
    const uint64_t per_token = uint64_t(rec_bytes) * uint64_t(opt.n_layer);
    if (max_nodes) {
      eo.target = max_nodes;
    } else {
      eo.target = std::max<uint64_t>(bytes, 1);
      eo.units = [per_token](const NodeInfo& n) { return n.length * per_token; };
    }
    auto evs = tree.EvictLeaves(eo);
    if (evs.empty()) return 0;
    CatalogBatch b;
    ApplyEvictionsLocked(evs, b);
    Status s = CommitLocked(b);
    if (!s.ok()) spdlog::error("store: eviction not recorded in the catalog: {}", s.ToString());
    return evs.size();
  }

  // The node naming original offset `off` of segment `seg`, from the tree.
  std::optional<std::pair<NodeId, uint64_t>> NodeAtLocked(uint64_t seg, uint64_t off) {
    for (const auto& r : tree.Export(ns))
      if (r.segment == seg && off >= r.seg_begin && off < r.seg_begin + r.tokens.size()) return std::make_pair(r.id, off - r.seg_begin);
    return std::nullopt;
  }

  // Truncates the tree where a corrupt chunk starts (if nothing there is locked now).
  void TryPendingTruncationsLocked() {
    for (auto it = pending_truncations.begin(); it != pending_truncations.end();) {
      auto [seg, off] = *it;
      auto range = tree.SegmentLiveRange(seg);
      if (!range || off >= range->second) {
        it = pending_truncations.erase(it);
        continue;
      }
      uint64_t o = std::max(off, range->first);
      auto at = NodeAtLocked(seg, o);
      if (!at) {
        it = pending_truncations.erase(it);
        continue;
      }
      auto evs = tree.Truncate(at->first, at->second);
      if (!evs.ok()) {
        ++it;  // locked: retried on the next Release
        continue;
      }
      CatalogBatch b;
      ApplyEvictionsLocked(*evs, b);
      Status s = CommitLocked(b);
      if (!s.ok()) spdlog::error("store: truncation not recorded in the catalog: {}", s.ToString());
      spdlog::warn("store: segment {} truncated at offset {} after a corrupt chunk ({} node(s) changed)", seg, o, evs->size());
      it = pending_truncations.erase(it);
    }
  }

  void MarkCorruptLocked(const Source& s, const Status& why) {
    bad_chunks.insert({s.segment, s.generation, s.layer, s.index});
    ++st.chunks_dropped_corrupt;
    uint64_t first = UINT64_MAX;
    auto it = segs.find(s.segment);
    if (it != segs.end() && it->second.layout->generation == s.generation) {
      const SegLayout& l = *it->second.layout;
      if (s.ext && s.ext == (s.layer < l.probes.size() ? l.probes[s.layer] : nullptr)) first = 0;
      else if (s.ext)
        for (uint32_t k = 0; k < s.ext->ext.n_slots; ++k) first = std::min<uint64_t>(first, l.Orig(s.layer, s.ext->ext.slot_begin + k));
    }
    if (first == UINT64_MAX) first = 0;
    spdlog::error("store: {} -- chunk dropped, prefix truncated at segment {} offset {}", why.ToString(), s.segment, first);
    pending_truncations.insert({s.segment, first});
    DropChunkLocked(s.cid);
    TryPendingTruncationsLocked();
  }

  // ------------------------------------------------------------------ writes
  // Encodes and writes the wanted chunks of one layer with the given slot order (this layer's
  // mapping list). `k_at(orig_off)` / `v_at(orig_off)` return the K / V bytes (k_bytes) of an
  // original offset. Returns rows to commit.
  Status WriteLayer(uint64_t seg, uint64_t gen, uint32_t il, uint32_t n_tokens, const std::vector<uint32_t>& mapping,
                    const std::vector<bool>& chunk_wanted, const std::function<const uint8_t*(uint32_t)>& k_at,
                    const std::function<const uint8_t*(uint32_t)>& v_at, const uint8_t* probe_records,
                    std::vector<ChunkRow>* rows, ProbeRow* probe_row, std::vector<ExtentPtr>* owned,
                    std::set<uint32_t>* files_touched, uint64_t* bytes) {
    const uint32_t n_chunks = NChunks(n_tokens);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_chunks; ++i)
      if (chunk_wanted[i]) total += KVLayout(std::min(C, n_tokens - i * C)).length;
    const uint32_t probe_len = probe_records ? ProbeChunkLayout(n_tokens, probe_rec_bytes).length : 0;
    total += probe_len;
    if (total == 0) return Status::Ok();
    Result<Extent> ext = files->Allocate(total);
    for (int attempt = 0; !ext.ok() && ext.status().code() == Status::Code::kResourceExhausted && attempt < 64; ++attempt) {
      uint64_t evicted;
      {
        std::lock_guard<std::mutex> lk(mu);
        evicted = EvictLocked(total, 0);
      }
      if (evicted == 0) break;
      ext = files->Allocate(total);
    }
    if (!ext.ok()) {
      if (ext.status().code() == Status::Code::kResourceExhausted) {
        std::lock_guard<std::mutex> lk(mu);
        return Status::ResourceExhausted("store insert, layer " + std::to_string(il) + ": " + ext.status().message() +
                                         "; " + NoRoomReasonLocked());
      }
      return ext.status().WithContext("store insert, layer " + std::to_string(il));
    }
    AlignedBuffer buf(total);
    if (!buf.data()) {
      files->Free(*ext);
      return Status::ResourceExhausted("store: out of memory for a " + std::to_string(total) + "-byte write buffer");
    }
    std::vector<uint8_t> krecs(size_t(C) * k_bytes), vrecs(size_t(C) * k_bytes);
    uint64_t pos = 0;
    const Extent whole = *ext;
    std::vector<ExtentPtr> mine;
    for (uint32_t i = 0; i < n_chunks; ++i) {
      if (!chunk_wanted[i]) continue;
      const uint32_t n = std::min(C, n_tokens - i * C);
      for (uint32_t s = 0; s < n; ++s) {
        const uint32_t slot = i * C + s, o = mapping.empty() ? slot : mapping[slot];
        std::memcpy(krecs.data() + size_t(s) * k_bytes, k_at(o), k_bytes);
        std::memcpy(vrecs.data() + size_t(s) * k_bytes, v_at(o), k_bytes);
      }
      ChunkRow row;
      row.segment = seg;
      row.layer = il;
      row.index = i;
      row.generation = gen;
      EncodeChunk(HeaderFor(ChunkKind::kKV, seg, gen, il, i, i * C, n, !mapping.empty()), krecs.data(), vrecs.data(),
                  buf.data() + pos, &row.ext);
      row.ext.file = whole.file;
      row.ext.offset = whole.offset + pos;
      pos += row.ext.length;
      auto oe = std::make_shared<OwnedExtent>();
      oe->ext = row.ext;
      oe->files = files;
      mine.push_back(oe);
      rows->push_back(std::move(row));
    }
    if (probe_records) {
      probe_row->segment = seg;
      probe_row->layer = il;
      EncodeChunk(HeaderFor(ChunkKind::kProbe, seg, 0, il, 0, 0, n_tokens, false), probe_records, nullptr, buf.data() + pos,
                  &probe_row->ext);
      probe_row->ext.file = whole.file;
      probe_row->ext.offset = whole.offset + pos;
      auto oe = std::make_shared<OwnedExtent>();
      oe->ext = probe_row->ext;
      oe->files = files;
      mine.push_back(oe);
    }
    Status s = files->Write(whole, buf.data());
    if (!s.ok()) {
      files->Free(whole);  // the sub-extents were never published
      return s.WithContext("store insert, layer " + std::to_string(il));
    }
    files_touched->insert(whole.file);
    *bytes += total;
    owned->insert(owned->end(), mine.begin(), mine.end());
    return Status::Ok();
  }

  static void RetireAll(std::vector<ExtentPtr>& v) {
    for (auto& e : v) e->retired = true;
    v.clear();
  }

  Status SyncFiles(const std::set<uint32_t>& ids) {
    for (uint32_t f : ids) IMPRESS_RETURN_IF_ERROR(files->Sync(f));
    return Status::Ok();
  }

  // ------------------------------------------------------------------ reads
  Result<ReadTicket> SubmitLocked(std::unique_ptr<PendingRead> pr) {
    std::vector<ReadOp> ops;
    for (auto& s : pr->sources) {
      if (s.block) continue;
      File* f = files->file(s.ext->ext.file);
      if (!f) return Status::Internal("store: data file " + std::to_string(s.ext->ext.file) + " is not open");
      s.img = GetBuffer(s.ext->ext.length);
      if (!s.img.data()) return Status::ResourceExhausted("store: out of memory for a read buffer");
      for (auto [b, n] : s.runs) {
        ops.push_back(ReadOp{f, s.ext->ext.offset + uint64_t(b) * kBlockBytes, n * kBlockBytes, s.img.data() + size_t(b) * kBlockBytes});
        pr->stats.ssd_bytes += uint64_t(n) * kBlockBytes;
      }
    }
    pr->stats.n_ios = uint32_t(ops.size());
    st.ssd_bytes_read += pr->stats.ssd_bytes;
    st.chunk_reads += pr->stats.chunks_ssd;
    ++st.n_reads;
    pr->ticket = io->Submit(std::move(ops));
    ReadTicket t = next_ticket++;
    reads[t] = std::move(pr);
    return t;
  }

  // Block runs covering the byte ranges [a, b) (chunk-relative) of the given records.
  static std::vector<std::pair<uint32_t, uint32_t>> RunsFor(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
    std::vector<uint32_t> blocks;
    for (auto [a, b] : ranges)
      for (uint64_t x = a / kBlockBytes; x <= (b - 1) / kBlockBytes; ++x) blocks.push_back(uint32_t(x));
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    std::vector<std::pair<uint32_t, uint32_t>> runs;
    for (uint32_t x : blocks) {
      if (!runs.empty() && runs.back().first + runs.back().second == x) ++runs.back().second;
      else runs.push_back({x, 1});
    }
    return runs;
  }

  Status VerifySource(const Source& s, bool probe) {
    const std::string what = std::string(probe ? "probe keys" : "chunk") + " of segment " + std::to_string(s.segment) +
                             " layer " + std::to_string(s.layer) + " index " + std::to_string(s.index);
    if (s.whole) {
      ChunkHeader h = probe ? HeaderFor(ChunkKind::kProbe, s.segment, 0, s.layer, 0, 0, s.ext->ext.n_slots, false)
                            : HeaderFor(ChunkKind::kKV, s.segment, s.generation, s.layer, s.index, s.ext->ext.slot_begin,
                                        s.ext->ext.n_slots, false);
      return VerifyChunk(s.img.data(), s.ext->ext, h, what);
    }
    for (auto [b, n] : s.runs) IMPRESS_RETURN_IF_ERROR(VerifyBlocks(s.img.data() + size_t(b) * kBlockBytes, s.ext->ext, b, n, what));
    return Status::Ok();
  }

  // ------------------------------------------------------------------ recovery
  Status Recover();
  Result<ReorderReport> Reorder();
  Status FlushLocked();
  Status ReorderSegment(uint64_t seg, ReorderReport* rep);
  void WorkerLoop();
};

// ==================================================================== open / recovery

Status PrefixStore::Impl::Recover() {
  IMPRESS_ASSIGN_OR_RETURN(CatalogContents cc, catalog->Load());
  std::lock_guard<std::mutex> lk(mu);
  CatalogBatch fix;
  // Segments and their extents.
  std::map<uint64_t, SegmentRow> rows;
  for (auto& g : cc.segments) rows[g.id] = std::move(g);
  std::map<uint64_t, std::shared_ptr<SegLayout>> layouts;
  std::set<std::tuple<uint64_t, uint32_t, uint32_t>> present;
  for (auto& [id, g] : rows) {
    auto l = std::make_shared<SegLayout>();
    l->generation = g.generation;
    const size_t n_layer = size_t(opt.n_layer), n_flat = n_layer * g.n_tokens;
    l->mapping.assign(n_layer, {});
    l->slot_of.assign(n_layer, {});
    bool ok = g.n_tokens > 0 && (g.mapping.empty() || g.mapping.size() == n_flat) &&
              (g.imp_sum.empty() || g.imp_sum.size() == n_flat) && (g.imp_count.empty() || g.imp_count.size() == n_flat);
    for (size_t il = 0; ok && !g.mapping.empty() && il < n_layer; ++il) {
      const uint32_t* m = g.mapping.data() + il * g.n_tokens;
      bool identity = true;
      for (uint32_t s = 0; s < g.n_tokens; ++s) identity = identity && m[s] == s;
      if (identity) continue;
      l->mapping[il].assign(m, m + g.n_tokens);
      l->slot_of[il].assign(g.n_tokens, UINT32_MAX);
      for (uint32_t s = 0; s < g.n_tokens; ++s) {
        if (m[s] >= g.n_tokens || l->slot_of[il][m[s]] != UINT32_MAX) { ok = false; break; }
        l->slot_of[il][m[s]] = s;
      }
    }
    if (!ok) {
      spdlog::warn("store: segment {} has an invalid token count, mapping list or importance statistics; dropped", id);
      fix.delete_segments.push_back(id);
      continue;
    }
    l->chunks.assign(size_t(opt.n_layer), std::vector<ExtentPtr>(NChunks(g.n_tokens)));
    l->probes.assign(size_t(opt.n_layer), nullptr);
    layouts[id] = l;
  }
  auto make = [&](const ChunkExtent& e) {
    auto oe = std::make_shared<OwnedExtent>();
    oe->ext = e;
    oe->files = files;
    return oe;
  };
  // first bad original offset per segment
  std::map<uint64_t, uint64_t> bad_from;
  auto note_bad = [&](uint64_t seg, uint64_t off, const std::string& why) {
    spdlog::warn("store: {}; the cached prefix is cut there", why);
    ++st.chunks_dropped_corrupt;
    auto it = bad_from.find(seg);
    if (it == bad_from.end() || it->second > off) bad_from[seg] = off;
  };
  for (auto& c : cc.chunks) {
    auto it = layouts.find(c.segment);
    if (it == layouts.end()) {
      fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;
    }
    auto& l = *it->second;
    if (c.layer >= l.chunks.size() || c.index >= l.chunks[c.layer].size() || c.generation != l.generation ||
        c.ext.slot_begin != c.index * C || c.ext.n_slots != std::min(C, rows[c.segment].n_tokens - c.index * C) ||
        c.ext.length != KVLayout(c.ext.n_slots).length) {
      fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;
    }
    Status s = files->MarkUsed(Extent{c.ext.file, c.ext.offset, c.ext.length});
    if (!s.ok()) {
      fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;  // reported as missing below
    }
    l.chunks[c.layer][c.index] = make(c.ext);
    ChunkStats cs;
    cs.frequency = uint64_t(c.freq);
    cs.important_ratio = c.imp_ratio;
    cs.n_importance_reports = c.n_reports;
    cs.bytes = uint64_t(c.ext.n_slots) * rec_bytes;
    tiers->RestoreStats(Cid(c.segment, c.layer, c.index), cs);
  }
  for (auto& p : cc.probes) {
    auto it = layouts.find(p.segment);
    if (it == layouts.end() || p.layer >= it->second->probes.size() || p.ext.n_slots != rows[p.segment].n_tokens ||
        p.ext.length != ProbeChunkLayout(p.ext.n_slots, probe_rec_bytes).length ||
        !files->MarkUsed(Extent{p.ext.file, p.ext.offset, p.ext.length}).ok())
      continue;
    it->second->probes[p.layer] = make(p.ext);
  }
  // Tree.
  IMPRESS_ASSIGN_OR_RETURN(RebuildReport rep, tree.Rebuild(ns, cc.nodes));
  for (auto& [id, why] : rep.dropped) {
    spdlog::warn("store: catalog node {} dropped: {}", id, why);
    fix.delete_nodes.push_back(id);
  }
  for (auto& [id, l] : layouts) {
    SegState s;
    s.n_tokens = rows[id].n_tokens;
    s.imp_sum = rows[id].imp_sum;
    s.imp_count = rows[id].imp_count;
    s.imp_sum.resize(size_t(opt.n_layer) * s.n_tokens, 0.0f);
    s.imp_count.resize(size_t(opt.n_layer) * s.n_tokens, 0);
    s.layout = l;
    segs[id] = std::move(s);
  }
  // Every node's segment must exist; every live chunk must exist (and verify, if asked).
  for (const auto& r : tree.Export(ns))
    if (!segs.count(r.segment)) note_bad(r.segment, 0, "segment " + std::to_string(r.segment) + " named by node " + std::to_string(r.id) + " is missing");
  std::vector<std::pair<uint64_t, Source>> verify;
  for (auto& [id, s] : segs) {
    auto range = tree.SegmentLiveRange(id);
    if (!range) continue;
    const SegLayout& l = *s.layout;
    for (uint64_t o = range->first; o < range->second && o < s.n_tokens; ++o) {
      for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il) {
        const uint32_t slot = l.Slot(il, o);
        if (!l.chunks[il][slot / C]) {
          note_bad(id, o, "chunk " + std::to_string(slot / C) + " of segment " + std::to_string(id) + " layer " + std::to_string(il) + " is missing");
          break;
        }
      }
      if (bad_from.count(id) && bad_from[id] <= o) break;
    }
    for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il)
      if (!l.probes[il]) { note_bad(id, 0, "probe keys of segment " + std::to_string(id) + " layer " + std::to_string(il) + " are missing"); break; }
    if (range->second > s.n_tokens) note_bad(id, s.n_tokens, "segment " + std::to_string(id) + " is shorter than its nodes");
    if (opt.verify_on_open) {
      for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il) {
        for (uint32_t i = 0; i < l.chunks[il].size(); ++i)
          if (l.chunks[il][i]) {
            Source src;
            src.segment = id; src.layer = il; src.index = i; src.generation = l.generation;
            src.ext = l.chunks[il][i]; src.whole = true;
            verify.push_back({0, std::move(src)});
          }
        if (l.probes[il]) {
          Source src;
          src.segment = id; src.layer = il; src.ext = l.probes[il]; src.whole = true;
          verify.push_back({1, std::move(src)});
        }
      }
    }
  }
  if (!verify.empty()) {
    for (size_t b0 = 0; b0 < verify.size(); b0 += 256) {
      size_t b1 = std::min(verify.size(), b0 + 256);
      std::vector<ReadOp> ops;
      for (size_t i = b0; i < b1; ++i) {
        auto& s = verify[i].second;
        s.img = AlignedBuffer(s.ext->ext.length);
        ops.push_back(ReadOp{files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()});
      }
      Status io_st = io->Wait(io->Submit(std::move(ops)));
      for (size_t i = b0; i < b1; ++i) {
        auto& s = verify[i].second;
        Status v = io_st.ok() ? VerifySource(s, verify[i].first == 1) : io_st;
        if (v.ok()) continue;
        const SegLayout& l = *segs[s.segment].layout;
        uint64_t first = UINT64_MAX;
        if (verify[i].first == 1) first = 0;
        else for (uint32_t k = 0; k < s.ext->ext.n_slots; ++k) first = std::min<uint64_t>(first, l.Orig(s.layer, s.ext->ext.slot_begin + k));
        note_bad(s.segment, first, v.ToString());
      }
    }
  }
  // Cut the tree at the first bad offset of each segment.
  for (auto [seg, off] : bad_from) {
    auto range = tree.SegmentLiveRange(seg);
    if (!range || off >= range->second) continue;
    auto at = NodeAtLocked(seg, std::max(off, range->first));
    if (!at) continue;
    auto evs = tree.Truncate(at->first, at->second);
    if (!evs.ok()) return evs.status().WithContext("store recovery");
    for (const auto& e : *evs) {
      if (tree.Get(e.node.id)) fix.upsert_nodes.push_back(RecordOf(e.node.id));
      else fix.delete_nodes.push_back(e.node.id);
    }
  }
  // Segments nobody names; chunks outside live ranges.
  std::vector<uint64_t> dead;
  for (auto& [id, s] : segs)
    if (!tree.SegmentLiveRange(id)) dead.push_back(id);
  for (uint64_t id : dead) {
    const SegLayout& l = *segs[id].layout;
    for (auto& layer : l.chunks)
      for (auto& c : layer)
        if (c) files->ForgetUsed(Extent{c->ext.file, c->ext.offset, c->ext.length});
    for (auto& p : l.probes)
      if (p) files->ForgetUsed(Extent{p->ext.file, p->ext.offset, p->ext.length});
    for (uint32_t il = 0; il < l.chunks.size(); ++il)
      for (uint32_t i = 0; i < l.chunks[il].size(); ++i) tiers->Remove(Cid(id, il, i));
    segs.erase(id);
    fix.delete_segments.push_back(id);
  }
  for (auto& [id, s] : segs) {
    // Chunks outside the live range: the allocator is still recovering, so they are forgotten
    // (FinishRecovery frees whatever is not marked used) rather than freed.
    LayoutPtr before = s.layout;
    CatalogBatch tmp;
    FreeDeadChunksLocked(id, tmp);
    for (auto [g, il, i] : tmp.delete_chunks) {
      const ExtentPtr& e = before->chunks[il][i];
      files->ForgetUsed(Extent{e->ext.file, e->ext.offset, e->ext.length});
      fix.delete_chunks.emplace_back(g, il, i);
    }
  }
  pending_retire.clear();  // recovery forgets these instead (FinishRecovery frees all unmarked space)
  RefreshPinsLocked({});
  IMPRESS_RETURN_IF_ERROR(catalog->Apply(fix));
  IMPRESS_RETURN_IF_ERROR(files->FinishRecovery());
  if (!fix.empty())
    spdlog::info("store: recovery dropped {} node(s), {} segment(s), {} chunk row(s)", fix.delete_nodes.size(),
                 fix.delete_segments.size(), fix.delete_chunks.size());
  return Status::Ok();
}

// ==================================================================== public API

PrefixStore::PrefixStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PrefixStore>> PrefixStore::Open(PrefixStoreOptions o) {
  if (o.dir.empty()) return Status::InvalidArgument("store: no directory given");
  if (o.model_fingerprint.empty()) return Status::InvalidArgument("store: empty model fingerprint");
  if (o.n_layer <= 0 || o.n_layer > 1023 || o.n_head_kv <= 0 || o.head_dim <= 0 || o.n_head_kv * o.head_dim > 65536)
    return Status::InvalidArgument("store: bad KV geometry n_layer=" + std::to_string(o.n_layer) + " n_head_kv=" +
                                   std::to_string(o.n_head_kv) + " head_dim=" + std::to_string(o.head_dim));
  if (o.chunk_tokens <= 0 || o.chunk_tokens > 4096) return Status::InvalidArgument("store: chunk_tokens must be in [1, 4096]");
  if (o.probe_kv_heads.empty()) return Status::InvalidArgument("store: at least one probe KV head is needed");
  for (int h : o.probe_kv_heads)
    if (h < 0 || h >= o.n_head_kv) return Status::InvalidArgument("store: probe KV head " + std::to_string(h) + " out of range");
  auto im = std::make_unique<Impl>();
  im->opt = o;
  im->env = o.env ? o.env : Env::Default();
  im->ns = o.model_fingerprint;
  im->fp_hash = FingerprintHash(o.model_fingerprint);
  im->C = uint32_t(o.chunk_tokens);
  im->k_bytes = uint32_t(o.n_head_kv * o.head_dim * 2);
  im->rec_bytes = 2 * im->k_bytes;
  im->probe_rec_bytes = uint32_t(o.probe_kv_heads.size() * size_t(o.head_dim) * 2);
  im->device_mem = o.device_memory ? o.device_memory : std::make_shared<HostMemorySpace>("device (host stand-in)");
  im->host_mem = o.host_memory ? o.host_memory : std::make_shared<HostMemorySpace>("host");
  IMPRESS_RETURN_IF_ERROR(im->env->CreateDir(o.dir));
  bool fresh = false;
  std::string why;
  IMPRESS_ASSIGN_OR_RETURN(im->catalog, Catalog::Open(o.dir + "/catalog.db", o.model_fingerprint, im->Geometry(), &fresh, &why));
  if (!why.empty()) spdlog::warn("store {}: {}; starting a fresh namespace", o.dir, why);
  IMPRESS_ASSIGN_OR_RETURN(auto files, ExtentFiles::Open(im->env, o.dir, AlignUp(o.data_file_bytes), o.ssd_bytes));
  im->files = std::move(files);
  // Does this filesystem take O_DIRECT? (tmpfs on older kernels, some FUSE: no)
  {
    IMPRESS_ASSIGN_OR_RETURN(auto probe, im->env->OpenFile(o.dir + "/.direct-probe", OpenOptions{}));
    im->direct = probe->direct();
    probe.reset();
    (void)im->env->RemoveFile(o.dir + "/.direct-probe");
  }
  std::string note;
  bool force = o.force_pread || !im->direct;
  im->io = ReadEngine::Create(o.queue_depth, force, &note);
  if (!im->direct) note = "O_DIRECT refused by the filesystem of " + o.dir + "; reading with buffered pread";
  if (!note.empty()) {
    static std::once_flag once;
    std::call_once(once, [&] { spdlog::warn("store: {}", note); });
  }
  im->tiers = std::make_unique<TierManager>(MakeCachePolicy(o.policy), o.device_bytes, o.host_bytes);
  IMPRESS_RETURN_IF_ERROR(im->Recover());
  {
    std::lock_guard<std::mutex> lk(im->mu);
    im->UpdateDataCapLocked();
  }
  im->st.io_engine = im->io->name();
  im->st.direct_io = im->direct;
  im->reorder_interval = o.reorder_interval;
  im->worker = std::thread([p = im.get()] { p->WorkerLoop(); });  // idle while the interval is 0
  return std::unique_ptr<PrefixStore>(new PrefixStore(std::move(im)));
}

PrefixStore::~PrefixStore() {
  {
    std::lock_guard<std::mutex> lk(impl_->worker_mu);
    impl_->stop = true;
  }
  impl_->worker_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
  std::vector<ReadTicket> left;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    for (auto& [t, r] : impl_->reads) left.push_back(t);
  }
  for (ReadTicket t : left) (void)Wait(t);  // buffers must outlive the kernel's writes
  std::lock_guard<std::mutex> lk(impl_->mu);
  Status s = impl_->FlushLocked();
  if (!s.ok()) spdlog::warn("store: statistics not saved: {}", s.ToString());
}

const PrefixStoreOptions& PrefixStore::options() const { return impl_->opt; }

MatchHandle PrefixStore::Match(std::span<const Token> tokens) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  MatchResult m = im.tree.Match(im.ns, tokens, true);
  MatchHandle h;
  for (const auto& sp : m.path) im.dirty_nodes.insert(sp.node);
  if (m.n_matched == 0) return h;
  if (!im.tree.Lock(m.last_node).ok()) return h;
  HandleState hs;
  hs.last_node = m.last_node;
  hs.n_matched = m.n_matched;
  for (const auto& sp : m.path) {
    auto it = im.segs.find(sp.segment);
    if (it == im.segs.end()) break;  // cannot happen: the tree names only live segments
    hs.spans.push_back({sp, it->second.layout});
  }
  h.id = im.next_handle++;
  h.n_matched = m.n_matched;
  im.handles[h.id] = std::move(hs);
  return h;
}

Status PrefixStore::Release(MatchHandle& h) {
  if (h.id == 0) return Status::Ok();
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  auto it = im.handles.find(h.id);
  if (it == im.handles.end()) return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown or released");
  Status s = im.tree.Unlock(it->second.last_node);
  im.handles.erase(it);
  h.id = 0;
  im.TryPendingTruncationsLocked();
  return s;
}

Result<ReadTicket> PrefixStore::SubmitProbeKeys(const MatchHandle& h, int il) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  auto hit = im.handles.find(h.id);
  if (hit == im.handles.end()) return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown");
  if (il < 0 || il >= im.opt.n_layer) return Status::InvalidArgument("store: layer " + std::to_string(il) + " out of range");
  auto pr = std::make_unique<PendingRead>();
  pr->probe = true;
  pr->n_rows = hit->second.n_matched;
  for (const auto& sv : hit->second.spans) {
    const ExtentPtr& e = sv.layout->probes[size_t(il)];
    if (!e) return Status::Internal("store: probe keys of segment " + std::to_string(sv.span.segment) + " missing");
    if (im.bad_chunks.count({sv.span.segment, 0, uint32_t(il), UINT32_MAX}))
      return Status::Corruption("store: probe keys of segment " + std::to_string(sv.span.segment) + " layer " + std::to_string(il) + " are corrupt");
    Source s;
    s.segment = sv.span.segment;
    s.layer = uint32_t(il);
    s.index = UINT32_MAX;
    s.ext = e;
    const uint64_t a = kChunkHeaderBytes + sv.span.seg_begin * im.probe_rec_bytes;
    const uint64_t b = a + sv.span.length * im.probe_rec_bytes;
    s.runs = Impl::RunsFor({{a, b}});
    for (uint64_t r = 0; r < sv.span.length; ++r) s.rows.push_back({uint32_t(sv.span.depth + r), uint32_t(sv.span.seg_begin + r)});
    pr->stats.useful_bytes += sv.span.length * im.probe_rec_bytes;
    ++pr->stats.chunks_ssd;
    pr->sources.push_back(std::move(s));
  }
  return im.SubmitLocked(std::move(pr));
}

Result<ReadTicket> PrefixStore::SubmitReadAllKeys(const MatchHandle& h, int il) {
  std::vector<uint32_t> pos(h.n_matched);
  std::iota(pos.begin(), pos.end(), 0u);
  return SubmitReadKV(h, il, pos, true, false);
}

Result<ReadTicket> PrefixStore::SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions,
                                             bool want_k, bool want_v) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  auto hit = im.handles.find(h.id);
  if (hit == im.handles.end()) return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown");
  if (il < 0 || il >= im.opt.n_layer) return Status::InvalidArgument("store: layer " + std::to_string(il) + " out of range");
  if (!want_k && !want_v) return Status::InvalidArgument("store: a KV read must want K, V or both");
  const HandleState& hs = hit->second;
  auto pr = std::make_unique<PendingRead>();
  pr->want_k = want_k;
  pr->want_v = want_v;
  pr->n_rows = positions.size();
  std::map<ChunkId, size_t> by_chunk;  // chunk -> index in sources
  size_t sp = 0;
  for (size_t r = 0; r < positions.size(); ++r) {
    const uint64_t p = positions[r];
    if (p >= hs.n_matched || (r > 0 && p <= positions[r - 1]))
      return Status::InvalidArgument("store: position " + std::to_string(p) + " is out of range (" + std::to_string(hs.n_matched) +
                                     " matched) or not ascending");
    while (sp < hs.spans.size() && p >= hs.spans[sp].span.depth + hs.spans[sp].span.length) ++sp;
    const SpanView& sv = hs.spans[sp];
    const uint64_t off = sv.span.seg_begin + (p - sv.span.depth);
    const uint32_t slot = sv.layout->Slot(uint32_t(il), off);
    const uint32_t idx = slot / im.C;
    const ChunkId cid = im.Cid(sv.span.segment, uint32_t(il), idx);
    auto [it, fresh] = by_chunk.try_emplace(cid, pr->sources.size());
    if (fresh) {
      Source s;
      s.cid = cid;
      s.segment = sv.span.segment;
      s.layer = uint32_t(il);
      s.index = idx;
      s.generation = sv.layout->generation;
      s.ext = sv.layout->chunks[size_t(il)][idx];
      if (!s.ext) return Status::Internal("store: chunk " + std::to_string(idx) + " of segment " + std::to_string(s.segment) + " was freed while locked");
      if (im.bad_chunks.count({s.segment, s.generation, s.layer, idx}))
        return Status::Corruption("store: chunk " + std::to_string(idx) + " of segment " + std::to_string(s.segment) + " layer " +
                                  std::to_string(il) + " failed its checksum and is not served");
      pr->sources.push_back(std::move(s));
    }
    pr->sources[it->second].rows.push_back({uint32_t(r), slot - idx * im.C});
  }
  const uint64_t want_bytes = (want_k ? im.k_bytes : 0) + (want_v ? im.k_bytes : 0);
  pr->stats.useful_bytes = positions.size() * want_bytes;
  for (auto& s : pr->sources) {
    // The important ratio comes from ReportImportance (a fallback read of all keys says nothing).
    AccessResult ar = im.tiers->Access(s.cid, im.ChunkMemBytes(s.ext));
    for (const auto& m : ar.moves) {
      if (m.chunk == s.cid && m.from == Tier::kSsd && m.to != Tier::kSsd) s.install = m.to;
      else im.ApplyMoveLocked(m);
    }
    for (Tier t : {Tier::kDevice, Tier::kHost}) {
      auto b = im.blocks[size_t(t)].find(s.cid);
      if (b != im.blocks[size_t(t)].end() && b->second->generation == s.generation) {
        s.block = b->second;
        (t == Tier::kDevice ? pr->stats.chunks_device : pr->stats.chunks_host)++;
        break;
      }
    }
    if (s.block) continue;
    ++pr->stats.chunks_ssd;
    if (s.install != Tier::kSsd) {
      s.whole = true;
      s.runs = {{0, s.ext->ext.length / kBlockBytes}};
    } else {
      // Only the blocks of the wanted regions: a key-only read never touches a V block.
      const ChunkLayout lay = im.KVLayout(s.ext->ext.n_slots);
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      for (auto [row, w] : s.rows) {
        const uint64_t at = uint64_t(w) * im.k_bytes;
        if (want_k) ranges.push_back({lay.k_offset + at, lay.k_offset + at + im.k_bytes});
        if (want_v) ranges.push_back({lay.v_offset + at, lay.v_offset + at + im.k_bytes});
      }
      s.runs = Impl::RunsFor(ranges);
    }
  }
  return im.SubmitLocked(std::move(pr));
}

Result<ReadResult> PrefixStore::Wait(ReadTicket t) {
  Impl& im = *impl_;
  size_t n_k = 0, n_v = 0;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    auto it = im.reads.find(t);
    if (it == im.reads.end()) return Status::InvalidArgument("store: read ticket " + std::to_string(t) + " unknown or already waited");
    const PendingRead& pr = *it->second;
    const size_t row = pr.probe ? im.probe_rec_bytes / 2 : size_t(im.opt.n_head_kv) * size_t(im.opt.head_dim);
    n_k = pr.probe || pr.want_k ? pr.n_rows * row : 0;
    n_v = !pr.probe && pr.want_v ? pr.n_rows * row : 0;
  }
  ReadResult out;
  out.k.resize(n_k);
  out.v.resize(n_v);
  IMPRESS_ASSIGN_OR_RETURN(out.stats, WaitInto(t, out.k.data(), out.v.data()));
  return out;
}

Result<ReadStats> PrefixStore::WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out) {
  Impl& im = *impl_;
  std::unique_ptr<PendingRead> pr;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    auto it = im.reads.find(t);
    if (it == im.reads.end()) return Status::InvalidArgument("store: read ticket " + std::to_string(t) + " unknown or already waited");
    pr = std::move(it->second);
    im.reads.erase(it);
  }
  Status io_st = im.io->Wait(pr->ticket);
  struct Recycle {
    Impl& im;
    PendingRead& pr;
    ~Recycle() {
      for (auto& s : pr.sources) im.PutBuffer(std::move(s.img));
    }
  } recycle{im, *pr};
  const ReadStats stats = pr->stats;
  if (!io_st.ok()) return io_st.WithContext("store read");
  // Verify everything read from disk before serving a byte of it.
  size_t n_verified = 0;
  for (auto& s : pr->sources) {
    if (s.block) continue;
    if ((++n_verified & 7) == 0) im.io->Poll();
    Status v = im.VerifySource(s, pr->probe);
    if (!v.ok()) {
      std::lock_guard<std::mutex> lk(im.mu);
      if (pr->probe) {
        im.bad_chunks.insert({s.segment, 0, s.layer, UINT32_MAX});
        ++im.st.chunks_dropped_corrupt;
        spdlog::error("store: {} -- prefix truncated at segment {}", v.ToString(), s.segment);
        im.pending_truncations.insert({s.segment, 0});
        im.TryPendingTruncationsLocked();
      } else {
        im.MarkCorruptLocked(s, v);
      }
      return v;
    }
  }
  const size_t row_elems = size_t(im.opt.n_head_kv) * size_t(im.opt.head_dim);
  if (pr->probe) {
    const size_t pe = im.probe_rec_bytes / 2;
    for (auto& s : pr->sources)
      for (auto [row, rec] : s.rows)
        std::memcpy(k_out + size_t(row) * pe, s.img.data() + kChunkHeaderBytes + size_t(rec) * im.probe_rec_bytes, im.probe_rec_bytes);
    return stats;
  }
  std::vector<uint8_t> tmp;
  size_t n_done = 0;
  for (auto& s : pr->sources) {
    if ((++n_done & 7) == 0) im.io->Poll();  // keep the queue full for the next batch meanwhile
    const uint8_t *kb, *vb;  // the K and V regions
    if (s.block) {
      tmp.resize(s.block->n);
      s.block->mem->CopyOut(tmp.data(), s.block->p, s.block->n);
      kb = tmp.data();
      vb = tmp.data() + size_t(s.ext->ext.n_slots) * im.k_bytes;
    } else {
      const ChunkLayout lay = im.KVLayout(s.ext->ext.n_slots);
      kb = s.img.data() + lay.k_offset;
      vb = s.img.data() + lay.v_offset;
    }
    for (auto [row, w] : s.rows) {
      if (pr->want_k) std::memcpy(k_out + size_t(row) * row_elems, kb + size_t(w) * im.k_bytes, im.k_bytes);
      if (pr->want_v) std::memcpy(v_out + size_t(row) * row_elems, vb + size_t(w) * im.k_bytes, im.k_bytes);
    }
  }
  // Keep the chunks the tier manager admitted (if still current).
  std::lock_guard<std::mutex> lk(im.mu);
  for (auto& s : pr->sources) {
    if (!s.whole || s.install == Tier::kSsd || im.tiers->Where(s.cid) != s.install) continue;
    auto sit = im.segs.find(s.segment);
    if (sit == im.segs.end() || sit->second.layout->generation != s.generation) continue;
    if (im.blocks[size_t(s.install)].count(s.cid)) continue;
    auto& mem = s.install == Tier::kDevice ? im.device_mem : im.host_mem;
    auto b = std::make_shared<TierBlock>();
    b->mem = mem;
    b->n = size_t(s.ext->ext.n_slots) * im.rec_bytes;
    b->generation = s.generation;
    b->p = mem->Alloc(b->n);
    if (!b->p) continue;
    const ChunkLayout lay = im.KVLayout(s.ext->ext.n_slots);
    const size_t region = size_t(s.ext->ext.n_slots) * im.k_bytes;
    mem->CopyIn(b->p, s.img.data() + lay.k_offset, region);
    mem->CopyIn(static_cast<uint8_t*>(b->p) + region, s.img.data() + lay.v_offset, region);
    im.blocks[size_t(s.install)][s.cid] = std::move(b);
  }
  return stats;
}

Result<InsertSummary> PrefixStore::Insert(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers) {
  Impl& im = *impl_;
  if (layers.size() != size_t(im.opt.n_layer))
    return Status::InvalidArgument("store insert: " + std::to_string(layers.size()) + " layers of KV given, the model has " +
                                   std::to_string(im.opt.n_layer));
  if (start > tokens.size()) return Status::InvalidArgument("store insert: start past the end of the tokens");
  for (const auto& l : layers)
    if (!l.k || !l.v) return Status::InvalidArgument("store insert: null K or V");
  InsertSummary sum;
  uint64_t seg_start, seg;
  NodeId locked;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    MatchResult m = im.tree.Match(im.ns, tokens, false);
    sum.n_cached_before = m.n_matched;
    if (m.n_matched < start) {
      ++im.st.insert_failures;
      return Status::NotFound("store insert: only " + std::to_string(m.n_matched) + " of the " + std::to_string(start) +
                              " prefix tokens are still cached; re-match and recompute");
    }
    if (m.n_matched >= tokens.size()) return sum;
    if (tokens.size() - m.n_matched > UINT32_MAX / 2) return Status::InvalidArgument("store insert: too many tokens");
    seg_start = m.n_matched;
    seg = im.tree.NewSegmentId();
    locked = m.last_node;
    IMPRESS_RETURN_IF_ERROR(im.tree.Lock(locked));
    im.UpdateDataCapLocked();
  }
  auto unlock = [&] {
    std::lock_guard<std::mutex> lk(im.mu);
    (void)im.tree.Unlock(locked);
  };
  const uint32_t n = uint32_t(tokens.size() - seg_start);
  const uint64_t skip = seg_start - start;  // KV rows given for tokens now already cached
  const size_t row_elems = size_t(im.opt.n_head_kv) * size_t(im.opt.head_dim);
  std::vector<ChunkRow> rows;
  std::vector<ProbeRow> probes(size_t(im.opt.n_layer));
  std::vector<ExtentPtr> owned;
  std::set<uint32_t> touched;
  std::vector<uint8_t> probe_recs(size_t(n) * im.probe_rec_bytes);
  Status s;
  std::vector<bool> all(im.NChunks(n), true);
  for (int il = 0; il < im.opt.n_layer && s.ok(); ++il) {
    const f16_t* k = layers[size_t(il)].k + skip * row_elems;
    const f16_t* v = layers[size_t(il)].v + skip * row_elems;
    for (uint32_t t = 0; t < n; ++t) {
      for (size_t p = 0; p < im.opt.probe_kv_heads.size(); ++p)
        std::memcpy(probe_recs.data() + size_t(t) * im.probe_rec_bytes + p * size_t(im.opt.head_dim) * 2,
                    k + t * row_elems + size_t(im.opt.probe_kv_heads[p]) * size_t(im.opt.head_dim), size_t(im.opt.head_dim) * 2);
    }
    s = im.WriteLayer(
        seg, 0, uint32_t(il), n, {}, all, [&](uint32_t o) { return reinterpret_cast<const uint8_t*>(k + size_t(o) * row_elems); },
        [&](uint32_t o) { return reinterpret_cast<const uint8_t*>(v + size_t(o) * row_elems); }, probe_recs.data(), &rows,
        &probes[size_t(il)], &owned, &touched, &sum.bytes_written);
  }
  if (s.ok()) s = im.SyncFiles(touched);
  if (!s.ok()) {
    Impl::RetireAll(owned);
    unlock();
    std::lock_guard<std::mutex> lk(im.mu);
    ++im.st.insert_failures;
    return s;
  }
  std::lock_guard<std::mutex> lk(im.mu);
  (void)im.tree.Unlock(locked);
  auto ir = im.tree.Insert(im.ns, tokens, seg, seg_start);
  if (!ir.ok() || ir->n_inserted == 0) {
    Impl::RetireAll(owned);
    if (!ir.ok()) {
      ++im.st.insert_failures;
      return ir.status();
    }
    return sum;
  }
  CatalogBatch b;
  for (const auto& sp : ir->splits) {
    b.upsert_nodes.push_back(im.RecordOf(sp.upper));
    b.upsert_nodes.push_back(im.RecordOf(sp.lower));
  }
  b.upsert_nodes.push_back(im.RecordOf(ir->new_node));
  SegmentRow row;
  row.id = seg;
  row.n_tokens = n;
  b.upsert_segments.push_back(row);
  b.upsert_chunks = rows;
  b.upsert_probes = probes;
  s = im.CommitLocked(b);
  if (!s.ok()) {
    auto evs = im.tree.Truncate(ir->new_node, 0);
    (void)evs;
    Impl::RetireAll(owned);
    ++im.st.insert_failures;
    return s.WithContext("store insert: catalog commit");
  }
  auto l = std::make_shared<SegLayout>();
  l->mapping.assign(size_t(im.opt.n_layer), {});
  l->slot_of.assign(size_t(im.opt.n_layer), {});
  l->chunks.assign(size_t(im.opt.n_layer), std::vector<ExtentPtr>(im.NChunks(n)));
  l->probes.assign(size_t(im.opt.n_layer), nullptr);
  size_t oi = 0;
  for (int il = 0; il < im.opt.n_layer; ++il) {
    for (uint32_t i = 0; i < im.NChunks(n); ++i) l->chunks[size_t(il)][i] = owned[oi++];
    l->probes[size_t(il)] = owned[oi++];
  }
  SegState ss;
  ss.n_tokens = n;
  ss.layout = l;
  ss.imp_sum.assign(size_t(im.opt.n_layer) * n, 0.0f);
  ss.imp_count.assign(size_t(im.opt.n_layer) * n, 0);
  im.segs[seg] = std::move(ss);
  CatalogBatch b2;
  im.FreeDeadChunksLocked(seg, b2);  // another insert may have covered the front meanwhile
  if (!b2.empty()) (void)im.CommitLocked(b2);
  sum.n_written = ir->n_inserted;
  ++im.st.inserts;
  return sum;
}

Status PrefixStore::ReportImportance(const MatchHandle& h, int il, std::span<const uint32_t> selected,
                                     std::span<const float> scores) {
  Impl& im = *impl_;
  if (!scores.empty() && scores.size() != selected.size())
    return Status::InvalidArgument("store: importance scores and selected positions differ in length");
  std::lock_guard<std::mutex> lk(im.mu);
  auto hit = im.handles.find(h.id);
  if (hit == im.handles.end()) return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown");
  if (il < 0 || il >= im.opt.n_layer) return Status::InvalidArgument("store: layer " + std::to_string(il) + " out of range");
  const HandleState& hs = hit->second;
  std::vector<float> w(hs.n_matched, 0.0f);
  for (size_t i = 0; i < selected.size(); ++i) {
    if (selected[i] >= hs.n_matched) return Status::InvalidArgument("store: selected position " + std::to_string(selected[i]) + " out of range");
    w[selected[i]] = scores.empty() ? 1.0f : scores[i];
  }
  std::map<ChunkId, std::pair<uint32_t, uint32_t>> per_chunk;  // (selected, matched)
  for (const auto& sv : hs.spans) {
    auto sit = im.segs.find(sv.span.segment);
    if (sit == im.segs.end()) continue;
    SegState& ss = sit->second;
    const bool same_layout = ss.layout->generation == sv.layout->generation;
    const size_t at = size_t(il) * ss.n_tokens;  // this layer's statistics
    for (uint64_t r = 0; r < sv.span.length; ++r) {
      const uint64_t off = sv.span.seg_begin + r;
      const float x = w[sv.span.depth + r];
      ss.imp_sum[at + off] += x;
      ss.imp_count[at + off] += 1;
      if (!same_layout) continue;
      auto& pc = per_chunk[im.Cid(sv.span.segment, uint32_t(il), ss.layout->Slot(uint32_t(il), off) / im.C)];
      pc.first += x > 0 ? 1 : 0;
      pc.second += 1;
    }
    im.dirty_segs.insert(sv.span.segment);
  }
  for (auto& [cid, c] : per_chunk) (void)im.tiers->ReportImportance(cid, double(c.first) / double(c.second));
  return Status::Ok();
}

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
  for (auto& [cid, cs] : tiers->AllStats()) {
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

Status PrefixStore::Flush() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->FlushLocked();
}

// ==================================================================== reorder

// Each layer's tokens are sorted, inside each node, by that layer's average historical importance
// (the pipeline selects tokens per layer, and they differ between layers), so every layer gets its
// own mapping list. All layers are rewritten under one new generation when any layer's order
// changed; the catalog swap is one transaction.
Status PrefixStore::Impl::ReorderSegment(uint64_t seg, ReorderReport* rep) {
  LayoutPtr old;
  uint32_t n;
  const uint32_t n_layer = uint32_t(opt.n_layer);
  std::vector<std::vector<uint32_t>> mapping(n_layer);  // [layer] slot -> original; empty = identity
  std::pair<uint64_t, uint64_t> live;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = segs.find(seg);
    auto range = tree.SegmentLiveRange(seg);
    if (it == segs.end() || !range) return Status::Ok();
    old = it->second.layout;
    n = it->second.n_tokens;
    live = *range;
    live.second = std::min<uint64_t>(live.second, n);
    // Node boundaries inside the segment: tokens never move across nodes.
    std::vector<uint64_t> cuts = {0, n};
    for (const auto& r : tree.Export(ns))
      if (r.segment == seg) {
        cuts.push_back(r.seg_begin);
        cuts.push_back(std::min<uint64_t>(n, r.seg_begin + r.tokens.size()));
      }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    bool changed = false;
    std::vector<double> avg(n, 0.0);
    for (uint32_t il = 0; il < n_layer; ++il) {
      const float* sum = it->second.imp_sum.data() + size_t(il) * n;
      const uint32_t* cnt = it->second.imp_count.data() + size_t(il) * n;
      for (uint32_t o = 0; o < n; ++o) avg[o] = cnt[o] ? double(sum[o]) / cnt[o] : 0.0;
      std::vector<uint32_t>& m = mapping[il];
      m.resize(n);
      std::iota(m.begin(), m.end(), 0u);
      for (size_t c = 0; c + 1 < cuts.size(); ++c)
        std::stable_sort(m.begin() + long(cuts[c]), m.begin() + long(cuts[c + 1]),
                         [&](uint32_t a, uint32_t b) { return avg[a] > avg[b]; });
      for (uint32_t sl = 0; sl < n && !changed; ++sl) changed = m[sl] != old->Orig(il, sl);
      bool identity = true;
      for (uint32_t sl = 0; sl < n && identity; ++sl) identity = m[sl] == sl;
      if (identity) m.clear();
    }
    if (!changed) return Status::Ok();
  }
  ++rep->segments_seen;
  std::vector<std::vector<uint32_t>> slot_of(n_layer);
  std::vector<std::vector<bool>> wanted(n_layer);  // chunks of the new layout that hold a live offset
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (!mapping[il].empty()) {
      slot_of[il].resize(n);
      for (uint32_t sl = 0; sl < n; ++sl) slot_of[il][mapping[il][sl]] = sl;
    }
    wanted[il].assign(NChunks(n), false);
    for (uint64_t o = live.first; o < live.second; ++o)
      wanted[il][(slot_of[il].empty() ? uint32_t(o) : slot_of[il][o]) / C] = true;
  }
  const uint64_t gen = old->generation + 1;
  std::vector<ChunkRow> rows;
  std::vector<ExtentPtr> owned;
  std::set<uint32_t> touched;
  uint64_t bytes = 0;
  std::vector<uint8_t> krecs(size_t(n) * k_bytes), vrecs(size_t(n) * k_bytes);  // original order
  for (uint32_t il = 0; il < n_layer; ++il) {
    // Read every live chunk of the old layout into original order.
    std::vector<Source> srcs;
    std::vector<ReadOp> ops;
    for (uint32_t i = 0; i < old->chunks[il].size(); ++i) {
      if (!old->chunks[il][i]) continue;
      Source s;
      s.segment = seg; s.layer = il; s.index = i; s.generation = old->generation;
      s.ext = old->chunks[il][i]; s.whole = true;
      s.img = AlignedBuffer(s.ext->ext.length);
      srcs.push_back(std::move(s));
    }
    for (auto& s : srcs) ops.push_back(ReadOp{files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()});
    Status st_io = io->Wait(io->Submit(std::move(ops)));
    if (!st_io.ok()) { RetireAll(owned); return st_io.WithContext("reorder read"); }
    for (auto& s : srcs) {
      Status v = VerifySource(s, false);
      if (!v.ok()) {
        RetireAll(owned);
        std::lock_guard<std::mutex> lk(mu);
        if (segs.count(seg) && segs[seg].layout == old) MarkCorruptLocked(s, v);
        return v;
      }
      const ChunkLayout lay = KVLayout(s.ext->ext.n_slots);
      for (uint32_t w = 0; w < s.ext->ext.n_slots; ++w) {
        const size_t o = old->Orig(il, s.ext->ext.slot_begin + w);
        std::memcpy(krecs.data() + o * k_bytes, s.img.data() + lay.k_offset + size_t(w) * k_bytes, k_bytes);
        std::memcpy(vrecs.data() + o * k_bytes, s.img.data() + lay.v_offset + size_t(w) * k_bytes, k_bytes);
      }
    }
    ProbeRow unused;
    Status w = WriteLayer(seg, gen, il, n, mapping[il], wanted[il], [&](uint32_t o) { return krecs.data() + size_t(o) * k_bytes; },
                          [&](uint32_t o) { return vrecs.data() + size_t(o) * k_bytes; }, nullptr, &rows, &unused, &owned,
                          &touched, &bytes);
    if (!w.ok()) { RetireAll(owned); return w.WithContext("reorder write"); }
  }
  Status sy = SyncFiles(touched);
  if (!sy.ok()) { RetireAll(owned); return sy; }
  std::lock_guard<std::mutex> lk(mu);
  auto it = segs.find(seg);
  auto range = tree.SegmentLiveRange(seg);
  if (it == segs.end() || it->second.layout != old || !range || range->first != live.first ||
      std::min<uint64_t>(range->second, n) != live.second) {
    RetireAll(owned);  // evicted, truncated or changed meanwhile: try again next time
    return Status::Ok();
  }
  auto nl = std::make_shared<SegLayout>();
  nl->generation = gen;
  nl->mapping = mapping;
  nl->slot_of = std::move(slot_of);
  nl->chunks.assign(size_t(n_layer), std::vector<ExtentPtr>(NChunks(n)));
  nl->probes = old->probes;
  size_t oi = 0;
  for (uint32_t il = 0; il < n_layer; ++il)
    for (uint32_t i = 0; i < NChunks(n); ++i)
      if (wanted[il][i]) nl->chunks[il][i] = owned[oi++];
  CatalogBatch b;
  b.delete_segment_chunks.push_back(seg);
  b.upsert_chunks = rows;
  SegmentRow sr;
  sr.id = seg;
  sr.n_tokens = n;
  sr.generation = gen;
  sr.mapping = nl->Flat(n);
  sr.imp_sum = it->second.imp_sum;
  sr.imp_count = it->second.imp_count;
  b.upsert_segments.push_back(sr);
  Status cs = CommitLocked(b);
  if (!cs.ok()) { RetireAll(owned); return cs.WithContext("reorder commit"); }
  for (uint32_t il = 0; il < old->chunks.size(); ++il)
    for (uint32_t i = 0; i < old->chunks[il].size(); ++i) {
      if (old->chunks[il][i]) old->chunks[il][i]->retired = true;  // freed when the last reader lets go
      DropChunkLocked(Cid(seg, il, i));
    }
  it->second.layout = nl;
  RefreshPinsLocked({seg});  // same chunk ids, other tokens: pins follow the tokens
  dirty_segs.erase(seg);
  ++rep->segments_reordered;
  rep->bytes_written += bytes;
  ++st.segments_reordered;
  return Status::Ok();
}

Result<ReorderReport> PrefixStore::Impl::Reorder() {
  std::lock_guard<std::mutex> rl(reorder_mu);
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lk(mu);
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
  std::lock_guard<std::mutex> lk(mu);
  ++st.reorder_passes;
  if (!first.ok() && rep.segments_reordered == 0 && !ids.empty()) return first;
  return rep;
}

void PrefixStore::Impl::WorkerLoop() {
  std::unique_lock<std::mutex> lk(worker_mu);
  while (!stop) {
    const uint64_t gen = reorder_interval_gen;
    auto woken = [&] { return stop || reorder_interval_gen != gen; };
    if (reorder_interval.count() <= 0) {
      worker_cv.wait(lk, woken);
      continue;
    }
    if (worker_cv.wait_for(lk, reorder_interval, woken)) continue;  // stopping, or a new interval
    lk.unlock();
    auto r = Reorder();
    if (!r.ok()) spdlog::warn("store: periodic reorder: {}", r.status().ToString());
    else if (r->segments_reordered) spdlog::info("store: reorder rewrote {} segment(s), {} MiB", r->segments_reordered, r->bytes_written / kMiB);
    lk.lock();
  }
}

Result<ReorderReport> PrefixStore::ReorderNow() { return impl_->Reorder(); }

// ==================================================================== budgets, stats

Result<uint64_t> PrefixStore::EvictNodes(uint64_t n) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->EvictLocked(0, n);
}

std::vector<TierMove> PrefixStore::SetTierBudget(Tier tier, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto moves = impl_->tiers->SetBudget(tier, bytes);
  impl_->ApplyMovesLocked(moves);
  return moves;
}

Status PrefixStore::SetSsdBudget(uint64_t bytes) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  im.opt.ssd_bytes = bytes;
  const uint64_t cap = im.UpdateDataCapLocked();
  while (im.files->disk_bytes() > cap) {
    if (im.EvictLocked(im.files->disk_bytes() - cap, 0) == 0)
      return Status::ResourceExhausted("store: " + std::to_string(im.files->disk_bytes()) + " bytes on disk are pinned, locked or in use; cannot shrink to " + std::to_string(bytes) + " (" + im.NoRoomReasonLocked() + ")");
  }
  return Status::Ok();
}

void PrefixStore::SetReorderInterval(std::chrono::milliseconds interval) {
  {
    std::lock_guard<std::mutex> lk(impl_->worker_mu);
    impl_->reorder_interval = std::max(interval, std::chrono::milliseconds(0));
    impl_->reorder_interval_gen++;
  }
  impl_->worker_cv.notify_all();
}

void PrefixStore::SetPolicy(PolicyKind kind) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->tiers->SetPolicy(MakeCachePolicy(kind));
}

StoreStats PrefixStore::Stats() {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  StoreStats s = im.st;
  s.tiers = im.tiers->stats();
  s.n_nodes = im.tree.n_nodes();
  s.n_tokens = im.tree.n_tokens();
  s.n_segments = im.segs.size();
  s.ssd_disk_bytes = im.files->disk_bytes();
  s.ssd_free_inside_bytes = im.files->free_bytes_inside();
  s.catalog_bytes = im.catalog->FileBytes();
  s.ssd_cap_bytes = im.opt.ssd_bytes;
  return s;
}

// ==================================================================== inspection, pins, drops

namespace {

// Per segment, computed once per call: the tier each chunk would be served from now and each
// chunk's SSD bytes per slot (its extent length spread over its slots).
struct SegView {
  std::vector<std::vector<Tier>> tier;       // [layer][chunk]
  std::vector<std::vector<double>> per_slot;  // [layer][chunk]
  double probe_per_token = 0;                 // summed over layers
};

}  // namespace

TreeSnapshot PrefixStore::SnapshotTree(size_t max_nodes) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  TreeSnapshot out;
  std::vector<NodeInfo> all = im.tree.PreOrder(im.ns);
  out.n_nodes_total = all.size();
  for (const auto& n : all) out.n_tokens_total += n.length;
  out.truncated = all.size() > max_nodes;
  if (out.truncated) all.resize(max_nodes);
  std::unordered_map<uint64_t, SegView> views;
  auto view_of = [&](uint64_t seg, const SegState& ss) -> const SegView& {
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
        v.tier[il][i] = im.ServedFromLocked(im.Cid(seg, il, i), l.generation);
        v.per_slot[il][i] = double(l.chunks[il][i]->ext.length) / double(std::max<uint32_t>(1, l.chunks[il][i]->ext.n_slots));
      }
      if (il < l.probes.size() && l.probes[il]) v.probe_per_token += double(l.probes[il]->ext.length) / double(std::max<uint32_t>(1, ss.n_tokens));
    }
    return v;
  };
  std::unordered_map<NodeId, int> index;
  const CachePolicy& policy = im.tiers->policy();
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
    auto toks = im.tree.Tokens(n.id);
    t.head.assign(toks.begin(), toks.begin() + long(std::min(toks.size(), TreeNodeInfo::kHeadTokens)));
    auto sit = im.segs.find(n.segment);
    if (sit != im.segs.end()) {
      const SegState& ss = sit->second;
      const SegLayout& l = *ss.layout;
      const SegView& v = view_of(n.segment, ss);
      const uint64_t end = std::min<uint64_t>(n.seg_begin + n.length, ss.n_tokens);
      double bytes = 0, imp_sum = 0, score_sum = 0;
      uint64_t imp_n = 0, score_n = 0;
      for (uint32_t il = 0; il < l.chunks.size(); ++il) {
        std::vector<bool> seen(l.chunks[il].size(), false);
        for (uint64_t o = n.seg_begin; o < end; ++o) {
          const uint32_t c = l.Slot(il, o) / im.C;
          bytes += v.per_slot[il][c];
          const size_t at = size_t(il) * ss.n_tokens + o;
          if (ss.imp_count[at]) {
            imp_sum += double(ss.imp_sum[at]) / ss.imp_count[at];
            ++imp_n;
          }
          if (seen[c] || !l.chunks[il][c]) continue;
          seen[c] = true;
          switch (v.tier[il][c]) {
            case Tier::kDevice: ++t.chunks_device; break;
            case Tier::kHost: ++t.chunks_host; break;
            case Tier::kSsd: ++t.chunks_ssd_only; break;
          }
          if (auto cs = im.tiers->Stats(im.Cid(n.segment, il, c))) {
            score_sum += policy.Rank(*cs).primary;
            ++score_n;
          }
        }
      }
      bytes += v.probe_per_token * double(end > n.seg_begin ? end - n.seg_begin : 0);
      t.kv_bytes = uint64_t(bytes + 0.5);
      t.score = score_n ? score_sum / double(score_n) : 0.0;
      t.importance = imp_n ? imp_sum / double(imp_n) : -1.0;
    }
    index[n.id] = int(out.nodes.size());
    out.nodes.push_back(std::move(t));
  }
  return out;
}

PrefixResidency PrefixStore::Residency(std::span<const Token> tokens) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  PrefixResidency r;
  const MatchResult m = im.tree.Match(im.ns, tokens, /*touch=*/false);
  r.n_matched = m.n_matched;
  r.pinned = !m.path.empty();
  std::set<ChunkId> seen;
  for (const PathSpan& sp : m.path) {
    auto info = im.tree.Get(sp.node);
    r.pinned = r.pinned && info && info->pinned;
    auto sit = im.segs.find(sp.segment);
    if (sit == im.segs.end()) {  // cannot happen: the tree names only live segments
      r.tokens_ssd_only += sp.length;
      continue;
    }
    const SegLayout& l = *sit->second.layout;
    std::vector<std::vector<Tier>> tier(l.chunks.size());  // only this span's chunks are looked up
    for (uint32_t il = 0; il < l.chunks.size(); ++il) tier[il].assign(l.chunks[il].size(), Tier::kSsd);
    std::vector<std::vector<bool>> known(l.chunks.size());
    for (uint32_t il = 0; il < l.chunks.size(); ++il) known[il].assign(l.chunks[il].size(), false);
    for (uint64_t o = sp.seg_begin; o < sp.seg_begin + sp.length; ++o) {
      Tier worst = Tier::kDevice;
      for (uint32_t il = 0; il < l.chunks.size(); ++il) {
        const uint32_t c = l.Slot(il, o) / im.C;
        if (!known[il][c]) {
          known[il][c] = true;
          const ChunkId cid = im.Cid(sp.segment, il, c);
          tier[il][c] = im.ServedFromLocked(cid, l.generation);
          if (seen.insert(cid).second) {
            switch (tier[il][c]) {
              case Tier::kDevice: ++r.chunks_device; break;
              case Tier::kHost: ++r.chunks_host; break;
              case Tier::kSsd: ++r.chunks_ssd_only; break;
            }
          }
        }
        worst = std::min(worst, tier[il][c]);  // kSsd < kHost < kDevice
      }
      switch (worst) {
        case Tier::kDevice: ++r.tokens_device; break;
        case Tier::kHost: ++r.tokens_host; break;
        case Tier::kSsd: ++r.tokens_ssd_only; break;
      }
    }
  }
  return r;
}

Status PrefixStore::Pin(std::span<const Token> tokens) { return impl_->SetPinned(tokens, true); }
Status PrefixStore::Unpin(std::span<const Token> tokens) { return impl_->SetPinned(tokens, false); }

Status PrefixStore::Impl::SetPinned(std::span<const Token> tokens, bool pin) {
  const std::string what = pin ? "store pin" : "store unpin";
  std::lock_guard<std::mutex> lk(mu);
  const MatchResult m = tree.Match(ns, tokens, /*touch=*/false);
  if (m.n_matched == 0)
    return Status::NotFound(what + ": nothing of these " + std::to_string(tokens.size()) + " tokens is cached");
  auto apply = [&](bool p) { return p ? tree.Pin(m.last_node) : tree.Unpin(m.last_node); };
  IMPRESS_ASSIGN_OR_RETURN(std::vector<NodeId> changed, apply(pin));
  if (changed.empty()) return Status::Ok();
  CatalogBatch b;
  std::set<uint64_t> segs;
  for (NodeId id : changed) {
    b.upsert_nodes.push_back(RecordOf(id));
    segs.insert(b.upsert_nodes.back().segment);
  }
  Status s = CommitLocked(b);
  if (!s.ok()) {
    // Undo exactly what changed: pinning touched only nodes that were unpinned, and unpinning
    // stopped where another pinned path still needs a node.
    (void)apply(!pin);
    return s.WithContext(what + ": catalog commit");
  }
  RefreshPinsLocked(segs);
  return Status::Ok();
}

Result<uint64_t> PrefixStore::DropFrom(std::span<const Token> tokens, uint64_t begin) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lk(im.mu);
  const MatchResult m = im.tree.Match(im.ns, tokens, /*touch=*/false);
  if (begin >= m.n_matched) return uint64_t(0);  // position `begin` is not cached: nothing to drop
  const PathSpan* at = nullptr;
  for (const PathSpan& sp : m.path)
    if (begin >= sp.depth && begin < sp.depth + sp.length) at = &sp;
  if (!at) return Status::Internal("store drop: position " + std::to_string(begin) + " matched but lies in no node");
  const uint64_t keep = begin - at->depth;
  const std::vector<NodeInfo> sub = im.tree.PreOrder(im.ns, at->node);
  if (sub.empty()) return Status::Internal("store drop: node " + std::to_string(at->node) + " vanished");
  const std::string where = "the cached prefix from position " + std::to_string(begin);
  if (sub.front().lock_ref > 0)  // counts every lock below it too
    return Status::ResourceExhausted("store drop: refused, " + where + " is in use by a request in flight (locked); nothing dropped");
  uint64_t dropped = 0;
  for (const NodeInfo& n : sub) {
    if (n.pinned)
      return Status::InvalidArgument("store drop: refused, " + where + " is pinned (node " + std::to_string(n.id) + ", positions [" +
                                     std::to_string(n.depth) + ", " + std::to_string(n.depth + n.length) + ")); unpin it first; nothing dropped");
    dropped += n.length;
  }
  dropped -= keep;
  IMPRESS_ASSIGN_OR_RETURN(std::vector<Eviction> evs, im.tree.Truncate(at->node, keep));
  CatalogBatch b;
  im.ApplyEvictionsLocked(evs, b);
  IMPRESS_RETURN_IF_ERROR(im.CommitLocked(b).WithContext("store drop: catalog commit"));
  return dropped;
}

Status PrefixStore::CheckConsistency() {
  Impl& im = *impl_;
  std::vector<Source> srcs;
  {
    std::lock_guard<std::mutex> lk(im.mu);
    IMPRESS_RETURN_IF_ERROR(im.tree.Validate());
    IMPRESS_RETURN_IF_ERROR(im.tiers->Validate());
    for (const auto& r : im.tree.Export(im.ns)) {
      auto it = im.segs.find(r.segment);
      if (it == im.segs.end()) return Status::Corruption("node " + std::to_string(r.id) + " names missing segment " + std::to_string(r.segment));
      const SegLayout& l = *it->second.layout;
      if (r.seg_begin + r.tokens.size() > it->second.n_tokens) return Status::Corruption("node " + std::to_string(r.id) + " runs past its segment");
      for (uint64_t o = r.seg_begin; o < r.seg_begin + r.tokens.size(); ++o)
        for (uint32_t il = 0; il < uint32_t(im.opt.n_layer); ++il)
          if (!l.chunks[il][l.Slot(il, o) / im.C]) return Status::Corruption("live offset " + std::to_string(o) + " of segment " + std::to_string(r.segment) + " has no chunk");
    }
    for (auto& [id, s] : im.segs) {
      const SegLayout& l = *s.layout;
      for (uint32_t il = 0; il < l.chunks.size(); ++il) {
        for (uint32_t i = 0; i < l.chunks[il].size(); ++i)
          if (l.chunks[il][i]) {
            Source src;
            src.segment = id; src.layer = il; src.index = i; src.generation = l.generation; src.ext = l.chunks[il][i]; src.whole = true;
            srcs.push_back(std::move(src));
          }
        if (!l.probes[il]) return Status::Corruption("segment " + std::to_string(id) + " lacks probe keys");
        Source src;
        src.segment = id; src.layer = il; src.index = UINT32_MAX; src.ext = l.probes[il]; src.whole = true;
        srcs.push_back(std::move(src));
      }
    }
  }
  for (auto& s : srcs) {
    s.img = AlignedBuffer(s.ext->ext.length);
    IMPRESS_RETURN_IF_ERROR(im.io->Wait(im.io->Submit({ReadOp{im.files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()}})));
    IMPRESS_RETURN_IF_ERROR(im.VerifySource(s, s.index == UINT32_MAX));
  }
  return Status::Ok();
}

}  // namespace impress::store
