// PrefixStore::Impl: the write path. Insert (chunks written and synced outside the lock, then
// published in the tree and the catalog under it), catalog commits, and what removes KV:
// eviction, truncation after corruption, chunks and segments nobody names any more.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "store/prefix-store-impl.h"

namespace impress::store {

// One Insert between its steps.
struct PrefixStore::Impl::InsertJob {
  InsertSummary sum;
  bool all_cached = false;  // nothing to write
  uint64_t seg_start = 0;   // sequence position of the new segment's first token
  uint64_t seg = 0;         // the new segment's id
  uint32_t n = 0;           // its tokens
  NodeId locked = kNoNode;  // the matched prefix, locked while the chunks are written
  WrittenChunks written;
  std::vector<ProbeRow> probes;                // [layer]
  std::vector<std::vector<uint32_t>> mapping;  // [layer] slot -> original offset; empty = identity
  uint32_t order_split = 0;                    // offsets before it are ordered apart (ImportanceOrder)
};

namespace {

// Offsets [0, n) by descending importance (ties: original order); empty when that is the identity.
// Offsets before `split` come first, each part in its own order.
std::vector<uint32_t> ImportanceOrder(const float* imp, uint32_t n, uint32_t split) {
  std::vector<uint32_t> m(n);
  std::iota(m.begin(), m.end(), 0u);
  split = std::min(split, n);
  const auto by_importance = [&](uint32_t a, uint32_t b) { return imp[a] > imp[b]; };
  std::stable_sort(m.begin(), m.begin() + split, by_importance);
  std::stable_sort(m.begin() + split, m.end(), by_importance);
  for (uint32_t i = 0; i < n; ++i)
    if (m[i] != i) return m;
  return {};
}

}  // namespace

Result<InsertSummary> PrefixStore::Impl::Insert(std::span<const Token> tokens, uint64_t start,
                                                std::span<const LayerKV> layers, uint64_t shared_prefix) {
  if (layers.size() != size_t(opt.n_layer))
    return Status::InvalidArgument("store insert: " + std::to_string(layers.size()) +
                                   " layers of KV given, the model has " + std::to_string(opt.n_layer));
  if (start > tokens.size()) return Status::InvalidArgument("store insert: start past the end of the tokens");
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  for (const auto& l : layers)
    if (!l.k || !l.v) return Status::InvalidArgument("store insert: null K or V");
  InsertJob job;
  IMPRESS_RETURN_IF_ERROR(BeginInsert(tokens, start, &job));
  if (job.all_cached) return job.sum;
  // The shared prefix's whole spans, as segment offsets (see InsertOptions::shared_prefix).
  const uint64_t split = shared_prefix / C * C;
  job.order_split = split > job.seg_start ? uint32_t(std::min<uint64_t>(split - job.seg_start, job.n)) : 0;
  Status s = WriteInsert(layers, start, &job);
  if (s.ok()) s = SyncFiles(job.written.files_touched);
  if (!s.ok()) {
    RetireAll(job.written.owned);
    MutexLock lk(&mu);
    (void)tree.Unlock(job.locked);
    ++st.insert_failures;
    return s;
  }
  MutexLock lk(&mu);
  (void)tree.Unlock(job.locked);
  Result<InsertSummary> sum = PublishInsertLocked(tokens, &job);
  if (sum.ok() && sum->n_written > 0 && opt.admit_on_insert) AdmitInsertedLocked(job, layers, start);
  return sum;
}

// Matches what is cached already, names the new segment and locks the prefix it extends.
Status PrefixStore::Impl::BeginInsert(std::span<const Token> tokens, uint64_t start, InsertJob* job) {
  MutexLock lk(&mu);
  MatchResult m = tree.Match(ns, tokens, false);
  job->sum.n_cached_before = m.n_matched;
  if (m.n_matched < start) {
    ++st.insert_failures;
    return Status::NotFound("store insert: only " + std::to_string(m.n_matched) + " of the " + std::to_string(start) +
                            " prefix tokens are still cached; re-match and recompute");
  }
  if (m.n_matched >= tokens.size()) {
    job->all_cached = true;
    return Status::Ok();
  }
  if (tokens.size() - m.n_matched > UINT32_MAX / 2) return Status::InvalidArgument("store insert: too many tokens");
  job->seg_start = m.n_matched;
  job->n = uint32_t(tokens.size() - m.n_matched);
  job->seg = tree.NewSegmentId();
  job->locked = m.last_node;
  IMPRESS_RETURN_IF_ERROR(tree.Lock(job->locked));
  UpdateDataCapLocked();
  return Status::Ok();
}

// Every layer's chunks and probe keys of the new segment, in original order (generation 0).
Status PrefixStore::Impl::WriteInsert(std::span<const LayerKV> layers, uint64_t start, InsertJob* job) {
  const uint32_t n = job->n;
  const uint64_t skip = job->seg_start - start;  // KV rows given for tokens now already cached
  const size_t row_elems = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  job->probes.resize(size_t(opt.n_layer));
  job->mapping.assign(size_t(opt.n_layer), {});
  // Each layer's records in their at-rest encoding, original order; chunks take them by slot.
  std::vector<uint8_t> probe_recs(size_t(n) * probe_rec_bytes);
  std::vector<uint8_t> krecs(size_t(n) * k_bytes), vrecs(size_t(n) * k_bytes);
  const std::vector<bool> all(NChunks(n), true);
  for (int il = 0; il < opt.n_layer; ++il) {
    const f16_t* k = layers[size_t(il)].k + skip * row_elems;
    const f16_t* v = layers[size_t(il)].v + skip * row_elems;
    if (const float* imp = layers[size_t(il)].importance) {
      job->mapping[size_t(il)] = ImportanceOrder(imp + skip, n, job->order_split);
    }
    EncodeRecords(opt.kv_encoding, k, row_elems, n, opt.n_head_kv, opt.head_dim, nullptr, krecs.data());
    EncodeRecords(opt.kv_encoding, v, row_elems, n, opt.n_head_kv, opt.head_dim, nullptr, vrecs.data());
    EncodeRecords(probe_enc, k, row_elems, n, int(opt.probe_kv_heads.size()), opt.head_dim, opt.probe_kv_heads.data(),
                  probe_recs.data());
    IMPRESS_RETURN_IF_ERROR(WriteLayer(
        job->seg, 0, uint32_t(il), n, job->mapping[size_t(il)], all,
        [&](uint32_t o) { return krecs.data() + size_t(o) * k_bytes; },
        [&](uint32_t o) { return vrecs.data() + size_t(o) * k_bytes; }, probe_recs.data(), &job->probes[size_t(il)],
        &job->written));
  }
  return Status::Ok();
}

// Adds the new segment to the tree, commits its rows and installs its layout. The written
// chunks are retired when the tree or the catalog turns them down.
Result<InsertSummary> PrefixStore::Impl::PublishInsertLocked(std::span<const Token> tokens, InsertJob* job) {
  const uint64_t seg = job->seg;
  const uint32_t n = job->n;
  std::vector<ExtentPtr>& owned = job->written.owned;
  auto ir = tree.Insert(ns, tokens, seg, job->seg_start);
  if (!ir.ok() || ir->n_inserted == 0) {
    RetireAll(owned);
    if (!ir.ok()) {
      ++st.insert_failures;
      return ir.status();
    }
    return job->sum;
  }
  CatalogBatch b;
  for (const auto& sp : ir->splits) {
    b.upsert_nodes.push_back(RecordOf(sp.upper));
    b.upsert_nodes.push_back(RecordOf(sp.lower));
  }
  b.upsert_nodes.push_back(RecordOf(ir->new_node));
  auto l = std::make_shared<SegLayout>();
  l->mapping = job->mapping;
  l->slot_of.assign(size_t(opt.n_layer), {});
  for (size_t il = 0; il < l->mapping.size(); ++il) {
    if (l->mapping[il].empty()) continue;
    l->slot_of[il].resize(n);
    for (uint32_t sl = 0; sl < n; ++sl) l->slot_of[il][l->mapping[il][sl]] = sl;
  }
  SegState ss;
  ss.n_tokens = n;
  ss.imp_sum.assign(size_t(opt.n_layer) * n, 0.0f);
  ss.imp_count.assign(size_t(opt.n_layer) * n, 0);
  SegmentRow row;
  row.id = seg;
  row.n_tokens = n;
  row.mapping = l->Flat(n);
  b.upsert_segments.push_back(std::move(row));
  b.upsert_chunks = job->written.rows;
  b.upsert_probes = job->probes;
  Status s = CommitLocked(b);
  if (!s.ok()) {
    auto evs = tree.Truncate(ir->new_node, 0);
    (void)evs;
    RetireAll(owned);
    ++st.insert_failures;
    return s.WithContext("store insert: catalog commit");
  }
  l->chunks.assign(size_t(opt.n_layer), std::vector<ExtentPtr>(NChunks(n)));
  l->probes.assign(size_t(opt.n_layer), nullptr);
  size_t oi = 0;  // WriteLayer appended each layer's chunks, then its probe keys
  for (int il = 0; il < opt.n_layer; ++il) {
    for (uint32_t i = 0; i < NChunks(n); ++i) l->chunks[size_t(il)][i] = owned[oi++];
    l->probes[size_t(il)] = owned[oi++];
  }
  ss.layout = l;
  segs[seg] = std::move(ss);
  CatalogBatch b2;
  FreeDeadChunksLocked(seg, b2);  // another insert may have covered the front meanwhile
  if (!b2.empty()) (void)CommitLocked(b2);
  job->sum.n_written = ir->n_inserted;
  ++st.inserts;
  return job->sum;
}

// Keeps the KV just written in the memory tiers while they have room (TierManager::AdmitFresh),
// copied from the caller's K/V in each layer's slot order: a follow-up question then finds it
// there instead of reading back from the SSD what was computed a moment ago.
void PrefixStore::Impl::AdmitInsertedLocked(const InsertJob& job, std::span<const LayerKV> layers, uint64_t start) {
  auto sit = segs.find(job.seg);
  if (sit == segs.end()) return;
  const LayoutPtr l = sit->second.layout;
  const uint64_t skip = job.seg_start - start;  // rows of `layers` before the segment's first token
  const size_t row_elems = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  const int n_probe = int(opt.probe_kv_heads.size());
  // Probe keys first: every IMPRESS request reads all of them, and they are small.
  for (uint32_t il = 0; il < l->probes.size(); ++il) {
    if (!l->probes[il]) continue;
    const f16_t* k = layers[il].k + skip * row_elems;
    AdmitFreshLocked(ProbeCid(job.seg, il), l->generation, uint64_t(job.n) * probe_rec_bytes, [&](uint8_t* out) {
      EncodeRecords(probe_enc, k, row_elems, job.n, n_probe, opt.head_dim, opt.probe_kv_heads.data(), out);
    });
  }
  for (uint32_t il = 0; il < l->chunks.size(); ++il) {
    const f16_t* k = layers[il].k + skip * row_elems;
    const f16_t* v = layers[il].v + skip * row_elems;
    for (uint32_t i = 0; i < l->chunks[il].size(); ++i) {
      const ExtentPtr& e = l->chunks[il][i];
      if (!e) continue;
      // The tier image: K records then V records (at-rest encoding), in slot order (the layer's
      // mapping list).
      AdmitFreshLocked(Cid(job.seg, il, i), l->generation, ChunkMemBytes(e), [&](uint8_t* out) {
        const size_t region = size_t(e->ext.n_slots) * k_bytes;
        for (uint32_t s = 0; s < e->ext.n_slots; ++s) {
          const uint32_t o = l->Orig(il, i * C + s);
          EncodeRecords(opt.kv_encoding, k + size_t(o) * row_elems, row_elems, 1, opt.n_head_kv, opt.head_dim, nullptr,
                        out + size_t(s) * k_bytes);
          EncodeRecords(opt.kv_encoding, v + size_t(o) * row_elems, row_elems, 1, opt.n_head_kv, opt.head_dim, nullptr,
                        out + region + size_t(s) * k_bytes);
        }
      });
    }
  }
}

// One chunk (or probe set) just written: if the tier manager admits it, its tier image (`bytes`,
// made by `fill`) is installed in that tier.
void PrefixStore::Impl::AdmitFreshLocked(ChunkId cid, uint64_t generation, uint64_t bytes,
                                         const std::function<void(uint8_t*)>& fill) {
  const Tier t = tiers.AdmitFresh(cid, bytes);
  if (t == Tier::kSsd || blocks[size_t(t)].count(cid)) return;
  auto& mem = t == Tier::kDevice ? device_mem : host_mem;
  auto b = std::make_shared<TierBlock>();
  b->mem = mem;
  b->n = size_t(bytes);
  b->generation = generation;
  b->p = mem->Alloc(b->n);
  if (!b->p) {
    (void)tiers.Remove(cid, /*keep_stats=*/true);  // out of memory: the chunk is simply not cached
    return;
  }
  std::vector<uint8_t> img(b->n);
  fill(img.data());
  mem->CopyIn(b->p, img.data(), b->n);
  blocks[size_t(t)][cid] = std::move(b);
}

// ==================================================================== chunk writing

// Space for a write, evicting LRU leaves while the SSD budget is exhausted.
Result<Extent> PrefixStore::Impl::AllocateEvicting(uint64_t bytes, uint32_t il) {
  Result<Extent> ext = files->Allocate(bytes);
  for (int attempt = 0; !ext.ok() && ext.status().code() == Status::Code::kResourceExhausted && attempt < 64;
       ++attempt) {
    uint64_t evicted;
    {
      MutexLock lk(&mu);
      evicted = EvictLocked(bytes, 0);
    }
    if (evicted == 0) break;
    ext = files->Allocate(bytes);
  }
  if (ext.ok()) return ext;
  if (ext.status().code() == Status::Code::kResourceExhausted) {
    MutexLock lk(&mu);
    return Status::ResourceExhausted("store insert, layer " + std::to_string(il) + ": " + ext.status().message() +
                                     "; " + NoRoomReasonLocked());
  }
  return ext.status().WithContext("store insert, layer " + std::to_string(il));
}

// Encodes and writes the wanted chunks of one layer with the given slot order (this layer's
// mapping list), and its probe keys when `probe_records` is given, as one extent. `k_at(orig_off)`
// / `v_at(orig_off)` return the K / V bytes (k_bytes) of an original offset. On success the rows
// and extents are appended to `out` (rows to commit; extents owned until then).
Status PrefixStore::Impl::WriteLayer(uint64_t seg, uint64_t gen, uint32_t il, uint32_t n_tokens,
                                     const std::vector<uint32_t>& mapping, const std::vector<bool>& chunk_wanted,
                                     const RecordAt& k_at, const RecordAt& v_at, const uint8_t* probe_records,
                                     ProbeRow* probe_row, WrittenChunks* out) {
  const uint32_t n_chunks = NChunks(n_tokens);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n_chunks; ++i)
    if (chunk_wanted[i]) total += KVLayout(std::min(C, n_tokens - i * C)).length;
  const uint32_t probe_len = probe_records ? ProbeChunkLayout(n_tokens, probe_rec_bytes).length : 0;
  total += probe_len;
  if (total == 0) return Status::Ok();
  IMPRESS_ASSIGN_OR_RETURN(const Extent whole, AllocateEvicting(total, il));
  AlignedBuffer buf(total);
  if (!buf.data()) {
    files->Free(whole);
    return Status::ResourceExhausted("store: out of memory for a " + std::to_string(total) + "-byte write buffer");
  }
  std::vector<uint8_t> krecs(size_t(C) * k_bytes), vrecs(size_t(C) * k_bytes);
  uint64_t pos = 0;
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
    mine.push_back(Own(row.ext));
    out->rows.push_back(std::move(row));
  }
  if (probe_records) {
    probe_row->segment = seg;
    probe_row->layer = il;
    EncodeChunk(HeaderFor(ChunkKind::kProbe, seg, 0, il, 0, 0, n_tokens, false), probe_records, nullptr,
                buf.data() + pos, &probe_row->ext);
    probe_row->ext.file = whole.file;
    probe_row->ext.offset = whole.offset + pos;
    mine.push_back(Own(probe_row->ext));
  }
  Status s = files->Write(whole, buf.data());
  if (!s.ok()) {
    files->Free(whole);  // the sub-extents were never published
    return s.WithContext("store insert, layer " + std::to_string(il));
  }
  out->files_touched.insert(whole.file);
  out->bytes += total;
  out->owned.insert(out->owned.end(), mine.begin(), mine.end());
  return Status::Ok();
}

void PrefixStore::Impl::RetireAll(std::vector<ExtentPtr>& v) {
  for (auto& e : v) e->retired = true;
  v.clear();
}

Status PrefixStore::Impl::SyncFiles(const std::set<uint32_t>& ids) {
  for (uint32_t f : ids) IMPRESS_RETURN_IF_ERROR(files->Sync(f));
  return Status::Ok();
}

// ==================================================================== catalog commits

// Commits a batch; only then may the extents it stopped naming be freed (once no reader holds
// them). Freeing earlier would let a crash leave the catalog naming reused or truncated space.
Status PrefixStore::Impl::CommitLocked(const CatalogBatch& b) {
  IMPRESS_RETURN_IF_ERROR(WritableOrError());
  Status s = catalog->Apply(b);
  if (s.ok())
    for (auto& e : pending_retire) e->retired = true;
  pending_retire.clear();  // on failure the catalog still names them: never freed (until reopen)
  return s;
}

// The data files get the SSD budget minus the catalog and room for it to grow: the WAL is
// checkpointed every 512 KiB (catalog.cpp), so 1 MiB + a quarter of the database covers it.
uint64_t PrefixStore::Impl::UpdateDataCapLocked() {
  const uint64_t cat = catalog->FileBytes();
  const uint64_t reserve = cat + cat / 4 + (1ull << 20);
  const uint64_t cap = ssd_budget > reserve ? ssd_budget - reserve : 0;
  files->SetCap(cap);
  return cap;
}

NodeRecord PrefixStore::Impl::RecordOf(NodeId id) {
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

// ==================================================================== removal

// Evicts LRU leaves until about `bytes` of chunk data is freed. Returns the number evicted.
uint64_t PrefixStore::Impl::EvictLocked(uint64_t bytes, uint64_t max_nodes) {
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
  if (evs.empty()) return max_nodes ? 0 : EvictForeignLocked(bytes);  // then other models' space
  CatalogBatch b;
  ApplyEvictionsLocked(evs, b);
  Status s = CommitLocked(b);
  if (!s.ok()) spdlog::error("store: eviction not recorded in the catalog: {}", s.ToString());
  return evs.size();
}

// Mirrors evictions / truncations in the catalog batch and frees what nobody names.
void PrefixStore::Impl::ApplyEvictionsLocked(const std::vector<Eviction>& evs, CatalogBatch& batch) {
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

// Chunks of segment `seg` no live original offset maps into: retired, rows deleted.
void PrefixStore::Impl::FreeDeadChunksLocked(uint64_t seg, CatalogBatch& batch) {
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

void PrefixStore::Impl::KillSegmentLocked(uint64_t seg, CatalogBatch& batch) {
  auto it = segs.find(seg);
  if (it == segs.end()) return;
  const SegLayout& l = *it->second.layout;
  for (uint32_t il = 0; il < l.chunks.size(); ++il)
    for (uint32_t i = 0; i < l.chunks[il].size(); ++i) {
      if (l.chunks[il][i]) pending_retire.push_back(l.chunks[il][i]);
      DropChunkLocked(Cid(seg, il, i));
    }
  for (uint32_t il = 0; il < l.probes.size(); ++il) {
    if (l.probes[il]) pending_retire.push_back(l.probes[il]);
    DropChunkLocked(ProbeCid(seg, il));
  }
  segs.erase(it);
  dirty_segs.erase(seg);
  batch.delete_segments.push_back(seg);
}

// The node naming original offset `off` of segment `seg`, from the tree.
std::optional<std::pair<NodeId, uint64_t>> PrefixStore::Impl::NodeAtLocked(uint64_t seg, uint64_t off) {
  for (const auto& r : tree.Export(ns))
    if (r.segment == seg && off >= r.seg_begin && off < r.seg_begin + r.tokens.size())
      return std::make_pair(r.id, off - r.seg_begin);
  return std::nullopt;
}

// Truncates the tree where a corrupt chunk starts (if nothing there is locked now).
void PrefixStore::Impl::TryPendingTruncationsLocked() {
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
    spdlog::warn("store: segment {} truncated at offset {} after a corrupt chunk ({} node(s) changed)", seg, o,
                 evs->size());
    it = pending_truncations.erase(it);
  }
}

// Why the SSD budget cannot be met by eviction (for error messages).
std::string PrefixStore::Impl::NoRoomReasonLocked() {
  uint64_t pinned = 0, locked = 0, other = 0;
  for (const NodeInfo& n : tree.PreOrder(ns)) {
    if (n.pinned) pinned += n.length;
    else if (n.lock_ref) locked += n.length;
    else other += n.length;
  }
  return "nothing left to evict: " + std::to_string(pinned) + " cached tokens are pinned, " + std::to_string(locked) +
         " locked by requests in flight, " + std::to_string(other) + " held up by those";
}

}  // namespace impress::store
