// PrefixStore::Impl: opening a store, crash recovery (the catalog against the data files), Close.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "base/sqlite.h"
#include "store/prefix-store-impl.h"

namespace impress::store {

namespace {

Status ValidateOptions(const PrefixStoreOptions& o) {
  if (o.dir.empty()) return Status::InvalidArgument("store: no directory given");
  if (o.model_fingerprint.empty()) return Status::InvalidArgument("store: empty model fingerprint");
  if (o.n_layer <= 0 || o.n_layer > 1023 || o.n_head_kv <= 0 || o.head_dim <= 0 || o.n_head_kv * o.head_dim > 65536)
    return Status::InvalidArgument("store: bad KV geometry n_layer=" + std::to_string(o.n_layer) + " n_head_kv=" +
                                   std::to_string(o.n_head_kv) + " head_dim=" + std::to_string(o.head_dim));
  if (o.chunk_tokens <= 0 || o.chunk_tokens > 4096)
    return Status::InvalidArgument("store: chunk_tokens must be in [1, 4096]");
  if (o.kv_encoding != KVEncoding::kF16 && o.kv_encoding != KVEncoding::kInt8)
    return Status::InvalidArgument("store: unknown KV encoding " + std::to_string(int(o.kv_encoding)));
  if (o.probe_encoding && *o.probe_encoding != KVEncoding::kF16 && *o.probe_encoding != KVEncoding::kInt8 &&
      *o.probe_encoding != KVEncoding::kInt4)
    return Status::InvalidArgument("store: unknown probe key encoding " + std::to_string(int(*o.probe_encoding)));
  if (o.probe_kv_heads.empty()) return Status::InvalidArgument("store: at least one probe KV head is needed");
  for (int h : o.probe_kv_heads)
    if (h < 0 || h >= o.n_head_kv)
      return Status::InvalidArgument("store: probe KV head " + std::to_string(h) + " out of range");
  return Status::Ok();
}

// A mapping list of n_layer * n entries (layer-major) turned into per-layer mapping and inverse
// lists; identity layers stay empty. False when a layer's list is not a permutation of [0, n).
bool UnpackMapping(const std::vector<uint32_t>& flat, uint32_t n, SegLayout* l) {
  for (size_t il = 0; !flat.empty() && il < l->mapping.size(); ++il) {
    const uint32_t* m = flat.data() + il * n;
    bool identity = true;
    for (uint32_t s = 0; s < n; ++s) identity = identity && m[s] == s;
    if (identity) continue;
    l->mapping[il].assign(m, m + n);
    l->slot_of[il].assign(n, UINT32_MAX);
    for (uint32_t s = 0; s < n; ++s) {
      if (m[s] >= n || l->slot_of[il][m[s]] != UINT32_MAX) return false;
      l->slot_of[il][m[s]] = s;
    }
  }
  return true;
}

}  // namespace

// What recovery learns before it changes the index and the catalog.
struct PrefixStore::Impl::Recovery {
  CatalogContents cc;
  CatalogBatch fix;                                        // rows recovery drops or rewrites
  std::map<uint64_t, SegmentRow> rows;                     // segment rows by id
  std::map<uint64_t, std::shared_ptr<SegLayout>> layouts;  // valid segments' layouts by id
  std::map<uint64_t, uint64_t> bad_from;                   // first bad original offset per segment
  std::vector<std::pair<bool, ReadSource>> verify;         // (probe keys?, extent) read back on open
  std::set<uint64_t> orphan_probes;                        // segments of probe rows without a valid segment
};

PrefixStore::Impl::Impl(PrefixStoreOptions o) :
    opt(std::move(o)),
    env(opt.env ? opt.env : Env::Default()),
    ns(opt.model_fingerprint),
    fp_hash(FingerprintHash(opt.model_fingerprint)),
    C(uint32_t(opt.chunk_tokens)),
    k_bytes(RecordBytes(opt.kv_encoding, opt.n_head_kv, opt.head_dim)),
    rec_bytes(2 * k_bytes),
    probe_enc(ProbeEncoding(opt)),
    probe_rec_bytes(RecordBytes(probe_enc, int(opt.probe_kv_heads.size()), opt.head_dim)),
    device_mem(opt.device_memory ? opt.device_memory : std::make_shared<HostMemorySpace>("device (host stand-in)")),
    host_mem(opt.host_memory ? opt.host_memory : std::make_shared<HostMemorySpace>("host")),
    tiers(MakeCachePolicy(opt.policy), opt.device_bytes, opt.host_bytes),
    ssd_budget(opt.ssd_bytes) {}

std::string PrefixStore::Impl::Geometry() const {
  std::string g = "L" + std::to_string(opt.n_layer) + ".H" + std::to_string(opt.n_head_kv) + ".D" +
                  std::to_string(opt.head_dim) + ".C" + std::to_string(opt.chunk_tokens) + ".P";
  for (int h : opt.probe_kv_heads) g += std::to_string(h) + ",";
  return g;
}

ChunkHeader PrefixStore::Impl::HeaderFor(ChunkKind kind, uint64_t seg, uint64_t gen, uint32_t layer, uint32_t index,
                                         uint32_t slot_begin, uint32_t n_slots, bool reordered) const {
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
  h.encoding = uint16_t(kind == ChunkKind::kKV ? opt.kv_encoding : probe_enc);
  h.reordered = reordered ? 1 : 0;
  return h;
}

ExtentPtr PrefixStore::Impl::Own(const ChunkExtent& e) const {
  auto oe = std::make_shared<OwnedExtent>();
  oe->ext = e;
  oe->files = files;
  return oe;
}

Result<std::unique_ptr<PrefixStore::Impl>> PrefixStore::Impl::Open(PrefixStoreOptions o) {
  IMPRESS_RETURN_IF_ERROR(ValidateOptions(o));
  auto im = std::make_unique<Impl>(std::move(o));
  IMPRESS_RETURN_IF_ERROR(im->OpenFiles());
  IMPRESS_RETURN_IF_ERROR(im->Recover());
  IMPRESS_RETURN_IF_ERROR(im->OpenTeam());  // no connection yet: the first fill or publish makes it
  {
    MutexLock lk(&im->mu);
    im->UpdateDataCapLocked();
    im->st.io_engine = im->io->name();
    im->st.direct_io = im->direct;
  }
  {
    MutexLock lk(&im->worker_mu);
    im->reorder_interval = im->read_only ? std::chrono::milliseconds(0) : im->opt.reorder_interval;
  }
  im->worker = std::thread([p = im.get()] { p->WorkerLoop(); });  // idle while the interval is 0
  im->admitter = std::thread([p = im.get()] { p->AdmitLoop(); });
  return im;
}

std::string PrefixStore::Impl::ModelKey() const {
  // fp16 chunks keep the key of format version 2 (whose layout they share), so stores written
  // before compact encodings existed are still read; other encodings have keys of their own, so
  // KV is never read under an encoding it was not written with.
  // Probe keys in an encoding of their own add it to the key.
  const std::string probe = probe_enc == opt.kv_encoding ? "" : std::string(".p") + KVEncodingName(probe_enc);
  if (opt.kv_encoding == KVEncoding::kF16 && probe.empty()) return opt.model_fingerprint + "|" + Geometry() + "|f2";
  return opt.model_fingerprint + "|" + Geometry() + "|f" + std::to_string(kFormatVersion) + "." +
         KVEncodingName(opt.kv_encoding) + probe;
}

// The catalog, created private. One shown unusable (garbage, truncated, damaged pages, foreign
// tables) is renamed aside, kept for inspection, and the store starts empty; one of a newer
// schema is refused, unchanged. An error of the moment (locked by another program, I/O error,
// disk full, no permission) is retried a few times and then returned: it says nothing about the
// file, so the catalog is never moved aside for it.
Status PrefixStore::Impl::OpenCatalog() {
  const std::string path = opt.dir + "/catalog.db";
  if (!read_only) IMPRESS_RETURN_IF_ERROR(MakePrivateFile(path));
  auto opened = OpenCatalogRetrying(path);
  if (!opened.ok() && read_only)
    return opened.status().WithContext("store " + opt.dir + " is read-only (" + read_only_why +
                                       "); the catalog was left as it is");
  if (!opened.ok() && opened.status().code() == Status::Code::kCorruption) {
    IMPRESS_ASSIGN_OR_RETURN(recovery_stats.catalog_moved_to, MoveAside(path));
    spdlog::warn("store: {}; moved aside to {}, starting with an empty store", opened.status().ToString(),
                 recovery_stats.catalog_moved_to);
    IMPRESS_RETURN_IF_ERROR(MakePrivateFile(path));
    opened = OpenCatalogRetrying(path);
  }
  if (!opened.ok()) return opened.status();
  catalog = std::move(opened).value();
  return Status::Ok();
}

// Catalog::Open, tried again while it fails with an error of the moment; once the tries are
// spent, that error with a note that the catalog was left alone. kCorruption and kUnsupported
// are returned at once.
Result<std::unique_ptr<Catalog>> PrefixStore::Impl::OpenCatalogRetrying(const std::string& path) {
  CatalogOpenOptions co;
  co.busy_timeout = opt.catalog_busy_timeout;
  co.read_only = read_only;
  const int n_attempts = std::max(1, opt.catalog_open_attempts);
  auto pause = opt.catalog_retry_pause;
  for (int attempt = 1;; ++attempt) {
    auto opened = Catalog::Open(path, ModelKey(), co);
    if (opened.ok() || !sqlite::IsTransient(opened.status().code())) return opened;
    if (attempt >= n_attempts)
      return opened.status().WithContext("store: cannot open the catalog (" + std::to_string(n_attempts) +
                                         " tries; it was left as it is, not moved aside)");
    spdlog::warn("store: cannot open the catalog (try {} of {}): {}; trying again in {} ms", attempt, n_attempts,
                 opened.status().ToString(), pause.count());
    std::this_thread::sleep_for(pause);
    pause *= 2;
  }
}

// The directory and its lock, the catalog, the data files and the read engine.
Status PrefixStore::Impl::OpenFiles() {
  IMPRESS_RETURN_IF_ERROR(MakePrivateDir(opt.dir));
  IMPRESS_ASSIGN_OR_RETURN(lock, StoreLock::Acquire(opt.dir, opt.lock_wait));
  IMPRESS_RETURN_IF_ERROR(env->CreateDir(opt.dir));
  IMPRESS_ASSIGN_OR_RETURN(const bool can_write, env->CanWrite(opt.dir, &read_only_why));
  read_only = !can_write;
  if (read_only)
    spdlog::warn("store: {} is read-only ({}); serving the prefixes it holds, storing nothing new", opt.dir,
                 read_only_why);
  IMPRESS_RETURN_IF_ERROR(OpenCatalog());
  IMPRESS_ASSIGN_OR_RETURN(auto opened,
                           ExtentFiles::Open(env, opt.dir, AlignUp(opt.data_file_bytes), opt.ssd_bytes, read_only));
  files = std::move(opened);
  // Does this filesystem take O_DIRECT? (tmpfs on older kernels, some FUSE: no) A read-only
  // store cannot create the probe file: it reads with buffered pread.
  if (!read_only) {
    IMPRESS_ASSIGN_OR_RETURN(auto probe, env->OpenFile(opt.dir + "/.direct-probe", OpenOptions{}));
    direct = probe->direct();
    probe.reset();
    (void)env->RemoveFile(opt.dir + "/.direct-probe");
  }
  std::string note;
  const bool force = opt.force_pread || !direct;
  io = ReadEngine::Create(opt.queue_depth, force, &note);
  if (!direct && !read_only)
    note = "O_DIRECT refused by the filesystem of " + opt.dir + "; reading with buffered pread";
  if (!note.empty()) {
    static std::once_flag once;
    std::call_once(once, [&] { spdlog::warn("store: {}", note); });
  }
  return Status::Ok();
}

void PrefixStore::Impl::Close() {
  CloseTeam();  // waits (bounded) for KV still being published
  {
    MutexLock lk(&worker_mu);
    stop = true;
  }
  worker_cv.SignalAll();
  if (worker.joinable()) worker.join();
  // Reads never waited: their buffers must outlive the kernel's writes (and a read told where its
  // rows go still copies them there, into buffers its caller keeps until it is waited).
  std::vector<std::pair<ReadTicket, std::optional<ReadInto>>> left;
  {
    MutexLock lk(&mu);
    for (auto& [t, r] : reads) left.push_back({t, r->into});
  }
  for (auto& [t, into] : left) {
    if (into) (void)WaitInto(t, into->k, into->v, into->probe_records, into->rows);
    else (void)Wait(t);
  }
  {
    MutexLock lk(&admit_mu);  // what is still queued is not admitted: the tiers go with the store
    admit_stop = true;
  }
  admit_cv.SignalAll();
  if (admitter.joinable()) admitter.join();
  if (read_only) return;  // statistics live in memory only
  MutexLock lk(&mu);
  Status s = FlushLocked();
  if (!s.ok()) spdlog::warn("store: statistics not saved: {}", s.ToString());
}

// ==================================================================== recovery

// Nothing on disk is trusted: every catalog row is checked against the geometry and the data
// files, the tree is cut where KV is missing or (with verify_on_open) fails its checksum, and
// everything nobody names any more is dropped from the catalog and forgotten by the allocator.
Status PrefixStore::Impl::Recover() {
  Recovery r;
  IMPRESS_ASSIGN_OR_RETURN(r.cc, catalog->Load());
  recovery_stats.catalog_rows_invalid = r.cc.n_invalid_rows;
  MutexLock lk(&mu);
  AdoptForeign(r.cc.foreign);  // first: this model's rows may not claim another model's space
  RecoverLayouts(r);
  RecoverExtents(r);
  IMPRESS_RETURN_IF_ERROR(RecoverTree(r));
  tree.ReserveIds(r.cc.foreign.max_id + 1);
  FindMissing(r);
  VerifyOnOpen(r);
  IMPRESS_RETURN_IF_ERROR(CutAtDamage(r));
  ForgetUnnamed(r);
  pending_retire.clear();  // recovery forgets these instead (FinishRecovery frees all unmarked space)
  RefreshPinsLocked({});
  recovery_stats.segments_dropped = r.fix.delete_segments.size();
  recovery_stats.chunk_rows_dropped = r.fix.delete_chunks.size();
  for (uint64_t seg : r.orphan_probes)
    if (std::find(r.fix.delete_segments.begin(), r.fix.delete_segments.end(), seg) == r.fix.delete_segments.end())
      r.fix.delete_segments.push_back(seg);
  if (!read_only) IMPRESS_RETURN_IF_ERROR(catalog->Apply(r.fix));
  else if (!r.fix.empty()) spdlog::warn("store: read-only: the repairs below are kept in memory only");
  IMPRESS_RETURN_IF_ERROR(files->FinishRecovery());
  if (!r.fix.empty())
    spdlog::warn("store: recovery dropped {} node(s), {} segment(s), {} chunk row(s), {} probe row(s)",
                 r.fix.delete_nodes.size(), recovery_stats.segments_dropped, r.fix.delete_chunks.size(),
                 recovery_stats.probe_rows_dropped);
  return Status::Ok();
}

// Segment rows -> empty layouts (mapping lists checked); invalid segments are dropped.
void PrefixStore::Impl::RecoverLayouts(Recovery& r) const {
  // A segment's KV was written whole, so it fit the SSD then: its token count, the only value
  // that sizes the allocations below, is bounded by the larger of the budget and the data files.
  const uint64_t per_token = uint64_t(rec_bytes) * uint64_t(opt.n_layer);
  const uint64_t max_tokens = std::max(opt.ssd_bytes, files->disk_bytes()) / per_token + C;
  for (auto& g : r.cc.segments) r.rows[g.id] = std::move(g);
  for (auto& [id, g] : r.rows) {
    if (g.n_tokens > max_tokens) {
      spdlog::warn("store: segment {} claims {} tokens, more than the store can hold; dropped", id, g.n_tokens);
      r.fix.delete_segments.push_back(id);
      continue;
    }
    auto l = std::make_shared<SegLayout>();
    l->generation = g.generation;
    const size_t n_layer = size_t(opt.n_layer), n_flat = n_layer * g.n_tokens;
    l->mapping.assign(n_layer, {});
    l->slot_of.assign(n_layer, {});
    const bool ok = g.n_tokens > 0 && (g.mapping.empty() || g.mapping.size() == n_flat) &&
                    (g.imp_sum.empty() || g.imp_sum.size() == n_flat) &&
                    (g.imp_count.empty() || g.imp_count.size() == n_flat) &&
                    UnpackMapping(g.mapping, g.n_tokens, l.get());
    if (!ok) {
      spdlog::warn("store: segment {} has an invalid token count, mapping list or importance statistics; dropped", id);
      r.fix.delete_segments.push_back(id);
      continue;
    }
    l->chunks.assign(size_t(opt.n_layer), std::vector<ExtentPtr>(NChunks(g.n_tokens)));
    l->probes.assign(size_t(opt.n_layer), nullptr);
    r.layouts[id] = l;
  }
}

// Chunk and probe rows -> extents in the layouts (marked used in the data files); rows that do
// not fit their segment or the files are dropped. Chunk statistics go back to the tier manager.
void PrefixStore::Impl::RecoverExtents(Recovery& r) {
  for (auto& c : r.cc.chunks) {
    auto it = r.layouts.find(c.segment);
    if (it == r.layouts.end()) {
      r.fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;
    }
    auto& l = *it->second;
    if (c.layer >= l.chunks.size() || c.index >= l.chunks[c.layer].size() || c.generation != l.generation ||
        c.ext.slot_begin != c.index * C || c.ext.n_slots != std::min(C, r.rows[c.segment].n_tokens - c.index * C) ||
        c.ext.length != KVLayout(c.ext.n_slots).length) {
      r.fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;
    }
    Status s = files->MarkUsed(Extent{c.ext.file, c.ext.offset, c.ext.length});
    if (!s.ok()) {
      r.fix.delete_chunks.emplace_back(c.segment, c.layer, c.index);
      continue;  // reported as missing later
    }
    l.chunks[c.layer][c.index] = Own(c.ext);
    ChunkStats cs;
    cs.frequency = uint64_t(c.freq);
    cs.important_ratio = c.imp_ratio;
    cs.n_importance_reports = c.n_reports;
    cs.bytes = uint64_t(c.ext.n_slots) * rec_bytes;
    tiers.RestoreStats(Cid(c.segment, c.layer, c.index), cs);
  }
  for (auto& p : r.cc.probes) {
    auto it = r.layouts.find(p.segment);
    if (it == r.layouts.end()) {
      ++recovery_stats.probe_rows_dropped;
      r.orphan_probes.insert(p.segment);  // deleted with their segment id (no segment row left)
      continue;
    }
    if (it == r.layouts.end() || p.layer >= it->second->probes.size() || p.ext.n_slots != r.rows[p.segment].n_tokens ||
        p.ext.length != ProbeChunkLayout(p.ext.n_slots, probe_rec_bytes).length ||
        !files->MarkUsed(Extent{p.ext.file, p.ext.offset, p.ext.length}).ok()) {
      ++recovery_stats.probe_rows_dropped;  // the row stays; the missing probe keys cut the prefix
      continue;
    }
    it->second->probes[p.layer] = Own(p.ext);
  }
}

// The radix tree from the node rows, and the segment states from the layouts.
Status PrefixStore::Impl::RecoverTree(Recovery& r) {
  IMPRESS_ASSIGN_OR_RETURN(RebuildReport rep, tree.Rebuild(ns, r.cc.nodes));
  for (auto& [id, why] : rep.dropped) {
    spdlog::warn("store: catalog node {} dropped: {}", id, why);
    r.fix.delete_nodes.push_back(id);
    ++recovery_stats.nodes_dropped;
  }
  for (auto& [id, l] : r.layouts) {
    SegState s;
    const SegmentRow& row = r.rows[id];
    s.n_tokens = row.n_tokens;
    s.imp_sum = row.imp_sum;
    s.imp_count = row.imp_count;
    s.imp_sum.resize(size_t(opt.n_layer) * s.n_tokens, 0.0f);
    s.imp_count.resize(size_t(opt.n_layer) * s.n_tokens, 0);
    s.layout = l;
    segs[id] = std::move(s);
  }
  return Status::Ok();
}

void PrefixStore::Impl::NoteDamage(Recovery& r, uint64_t seg, uint64_t off, const std::string& why) {
  spdlog::warn("store: {}; the cached prefix is cut there", why);
  ++st.chunks_dropped_corrupt;
  auto it = r.bad_from.find(seg);
  if (it == r.bad_from.end() || it->second > off) r.bad_from[seg] = off;
}

// Every node's segment must exist; every live chunk and probe set must exist. With
// verify_on_open, every extent is queued to be read back and checked.
void PrefixStore::Impl::FindMissing(Recovery& r) {
  for (const auto& n : tree.Export(ns))
    if (!segs.count(n.segment)) {
      ++recovery_stats.chunks_missing;
      NoteDamage(r, n.segment, 0,
                 "segment " + std::to_string(n.segment) + " named by node " + std::to_string(n.id) + " is missing");
    }
  for (auto& [id, s] : segs) {
    auto range = tree.SegmentLiveRange(id);
    if (!range) continue;
    const SegLayout& l = *s.layout;
    for (uint64_t o = range->first; o < range->second && o < s.n_tokens; ++o) {
      for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il) {
        const uint32_t slot = l.Slot(il, o);
        if (!l.chunks[il][slot / C]) {
          ++recovery_stats.chunks_missing;
          NoteDamage(r, id, o,
                     "chunk " + std::to_string(slot / C) + " of segment " + std::to_string(id) + " layer " +
                         std::to_string(il) + " is missing");
          break;
        }
      }
      if (r.bad_from.count(id) && r.bad_from[id] <= o) break;
    }
    for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il)
      if (!l.probes[il]) {
        ++recovery_stats.chunks_missing;
        NoteDamage(r, id, 0,
                   "probe keys of segment " + std::to_string(id) + " layer " + std::to_string(il) + " are missing");
        break;
      }
    if (range->second > s.n_tokens) {
      ++recovery_stats.chunks_missing;
      NoteDamage(r, id, s.n_tokens, "segment " + std::to_string(id) + " is shorter than its nodes");
    }
    if (!opt.verify_on_open) continue;
    for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il) {
      for (uint32_t i = 0; i < l.chunks[il].size(); ++i)
        if (l.chunks[il][i]) r.verify.push_back({false, WholeExtent(id, il, i, l.generation, l.chunks[il][i])});
      if (l.probes[il]) r.verify.push_back({true, WholeExtent(id, il, 0, 0, l.probes[il])});
    }
  }
}

// Reads back what FindMissing queued, 256 extents per batch, and notes every failed checksum.
void PrefixStore::Impl::VerifyOnOpen(Recovery& r) {
  for (size_t b0 = 0; b0 < r.verify.size(); b0 += 256) {
    const size_t b1 = std::min(r.verify.size(), b0 + 256);
    std::vector<ReadOp> ops;
    for (size_t i = b0; i < b1; ++i) {
      auto& s = r.verify[i].second;
      s.img = AlignedBuffer(s.ext->ext.length);
      ops.push_back(ReadOp{files->file(s.ext->ext.file), s.ext->ext.offset, s.ext->ext.length, s.img.data()});
    }
    Status io_st = io->Wait(io->Submit(std::move(ops)));
    for (size_t i = b0; i < b1; ++i) {
      const auto& [probe, s] = r.verify[i];
      Status v = io_st.ok() ? VerifySource(s, probe) : io_st;
      if (v.ok()) continue;
      const SegLayout& l = *segs[s.segment].layout;
      uint64_t first = UINT64_MAX;
      if (probe) first = 0;
      else
        for (uint32_t k = 0; k < s.ext->ext.n_slots; ++k)
          first = std::min<uint64_t>(first, l.Orig(s.layer, s.ext->ext.slot_begin + k));
      ++recovery_stats.chunks_corrupt;
      NoteDamage(r, s.segment, first, v.ToString());
    }
  }
}

// Cuts the tree at the first bad offset of each segment.
Status PrefixStore::Impl::CutAtDamage(Recovery& r) {
  for (auto [seg, off] : r.bad_from) {
    auto range = tree.SegmentLiveRange(seg);
    if (!range || off >= range->second) continue;
    auto at = NodeAtLocked(seg, std::max(off, range->first));
    if (!at) continue;
    auto evs = tree.Truncate(at->first, at->second);
    if (!evs.ok()) return evs.status().WithContext("store recovery");
    recovery_stats.nodes_cut += evs->size();
    for (const auto& e : *evs) {
      if (tree.Get(e.node.id)) r.fix.upsert_nodes.push_back(RecordOf(e.node.id));
      else r.fix.delete_nodes.push_back(e.node.id);
    }
  }
  return Status::Ok();
}

// Segments no node names, and chunks outside the live ranges: dropped from the catalog. The
// allocator is still recovering, so their extents are forgotten (FinishRecovery frees whatever
// is not marked used) rather than freed.
void PrefixStore::Impl::ForgetUnnamed(Recovery& r) {
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
      for (uint32_t i = 0; i < l.chunks[il].size(); ++i) tiers.Remove(Cid(id, il, i));
    segs.erase(id);
    r.fix.delete_segments.push_back(id);
  }
  for (auto& [id, s] : segs) {
    LayoutPtr before = s.layout;
    CatalogBatch tmp;
    FreeDeadChunksLocked(id, tmp);
    for (auto [g, il, i] : tmp.delete_chunks) {
      const ExtentPtr& e = before->chunks[il][i];
      files->ForgetUsed(Extent{e->ext.file, e->ext.offset, e->ext.length});
      r.fix.delete_chunks.emplace_back(g, il, i);
    }
  }
}

Status PrefixStore::Impl::WritableOrError() const {
  if (!read_only) return Status::Ok();
  return Status::IOError("store " + opt.dir + " is read-only (" + read_only_why +
                         "): it serves the prefixes it holds and cannot store, evict, pin or reorder");
}

const RecoveryStats& PrefixStore::recovery() const { return impl_->recovery_stats; }

}  // namespace impress::store
