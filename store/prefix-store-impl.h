// PrefixStore::Impl: the state and the logic behind the PrefixStore facade (store/prefix-store.h).
// Private to the store; declared once here, defined by job in
//   prefix-store-open.cpp     Open, crash recovery, Close
//   prefix-store-read.cpp     Match/Release, per-layer reads, importance reports
//   prefix-store-admit.cpp    what reads leave in the memory tiers: admission, tier moves
//   prefix-store-write.cpp    Insert, chunk writing, catalog commits, eviction and truncation
//   prefix-store-reorder.cpp  the reorder pass and its background worker
//   prefix-store-admin.cpp    statistics, budgets, snapshots, residency, pins, drops, checks
//   prefix-store-team.cpp     the team KV tier: publishing inserts, filling a local miss
// and prefix-store.cpp forwards each public method to the Impl method of the same name.
//
// Thread contract: `mu` guards the in-memory index (tree, tiers, segments, tier blocks, handles,
// pending reads, counters); members marked GUARDED_BY are checked by clang -Wthread-safety
// (scripts/thread-safety.sh). Methods named *Locked, and every method marked REQUIRES(mu), run
// with `mu` held; the others take it themselves and never hold it across disk I/O (data file
// reads and writes, fsync), so reads of other requests go on meanwhile. Lock order:
// reorder_mu -> mu -> pool_mu; worker_mu is never held together with another store lock.
// Members above `mu` are constant once Open returns (Open sets them before any other thread
// can see the store); the objects they point to (catalog, files, io) synchronize themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread-annotations.h"
#include "store/catalog.h"
#include "store/chunk-format.h"
#include "store/extent-files.h"
#include "store/prefix-store.h"
#include "store/store-dir.h"
#include "store/uring-io.h"

namespace impress::store {

class TeamTier;  // store/team-tier.h
struct TeamDescriptor;
struct TeamOrder;
struct RemotePrefix;  // prefix-store-team.cpp: a prefix only the team tier holds, staged for a match
struct RemoteRead;    // prefix-store-team.cpp: one layer's read from the team tier, in flight

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

// A chunk held by a memory tier: K region then V region (n_slots records each), no header.
// A chunk admitted from a partial SSD read holds only the records that read brought (k_have /
// v_have per slot; empty: every record), and later reads bring the rest from the SSD. The tier
// reserves the whole chunk's bytes either way. A published block is never written again (filling
// in records publishes a new one), so a reader copies from it without the store's mutex.
struct TierBlock {
  std::shared_ptr<MemorySpace> mem;
  void* p = nullptr;
  size_t n = 0;
  uint64_t generation = 0;
  std::vector<bool> k_have, v_have;
  bool HasK(uint32_t slot) const { return k_have.empty() || k_have[slot]; }
  bool HasV(uint32_t slot) const { return v_have.empty() || v_have[slot]; }
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
  std::shared_ptr<const RemotePrefix> remote;  // set: every read goes to the team tier (no spans)
};

// The 4 KiB blocks of one chunk that a read needs, a bit each: marked record by record (in any
// order), then read back as ascending runs.
class BlockMask {
 public:
  void Reset(uint64_t chunk_bytes);   // all clear, sized for a chunk of that many bytes
  void Mark(uint64_t a, uint64_t b);  // the blocks of bytes [a, b)
  bool Empty() const { return empty_; }
  // The marked blocks as (first, count) runs, ascending; runs at most max_gap_blocks apart joined
  // (the blocks between are read too).
  std::vector<std::pair<uint32_t, uint32_t>> Runs(uint32_t max_gap_blocks) const;

 private:
  std::vector<uint64_t> words_;
  bool empty_ = true;
};

// One chunk (or probe set) a read touches.
struct ReadSource {
  ChunkId cid = 0;
  uint64_t segment = 0;
  uint32_t layer = 0, index = 0;
  uint64_t generation = 0;
  ExtentPtr ext;                                    // disk source
  BlockPtr block;                                   // memory source (may lack some records: TierBlock)
  AlignedBuffer img;                                // maintenance reads: the whole chunk image
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // (first block, n blocks) read from disk; none: memory only
  // The read path: the blocks of `runs`, one run after another, in the read's buffer
  // (PendingRead::buf), and where each block of the chunk begins there (only the read ones valid).
  uint8_t* read = nullptr;
  std::vector<uint32_t> block_at;
  // The bytes at chunk offset `off` as read (a record read whole lies in one run).
  const uint8_t* At(uint64_t off) const {
    return read ? read + block_at[off / kBlockBytes] + off % kBlockBytes : img.data() + off;
  }
  bool whole = false;                               // whole chunk read
  Tier install = Tier::kSsd;                        // admitted from the SSD: install what was read there
  std::vector<std::pair<uint32_t, uint32_t>> rows;  // (output row, record index inside the chunk)
};

// A read of a whole chunk (or probe set) for checking: recovery, reorder, consistency checks.
inline ReadSource WholeExtent(uint64_t segment, uint32_t layer, uint32_t index, uint64_t generation, ExtentPtr ext) {
  ReadSource s;
  s.segment = segment;
  s.layer = layer;
  s.index = index;
  s.generation = generation;
  s.ext = std::move(ext);
  s.whole = true;
  return s;
}

struct PendingRead {
  bool probe = false;
  bool want_k = false, want_v = false;
  uint64_t n_rows = 0;
  ReadEngine::Ticket ticket = 0;
  std::vector<ReadSource> sources;
  AlignedBuffer buf;  // what the disk reads land in (ReadSource::read points into it)
  // Rows copied as their chunks arrived (SubmitReadKV with a ReadInto): where to, and per source
  // whether it was checked and served so (written by the completion thread before the batch ends).
  std::optional<ReadInto> into;
  std::vector<uint8_t> served;
  ReadStats stats;
  std::shared_ptr<RemoteRead> remote;  // a read of a remote match (no sources, no disk ticket)
};

// What one layer's chunk writing produced: rows to commit, the extents they own (retired if the
// commit never comes) and the data files to fsync before it.
struct WrittenChunks {
  std::vector<ChunkRow> rows;
  std::vector<ExtentPtr> owned;
  std::set<uint32_t> files_touched;
  uint64_t bytes = 0;
};

// Returns the K or V bytes (k_bytes) of one original segment offset.
using RecordAt = std::function<const uint8_t*(uint32_t)>;

inline constexpr uint64_t kMiB = 1ull << 20;

// Other models' data in the same directory: kept on disk and in the catalog, never read, and
// evicted (leaves first, the least recently opened model first) when this model needs the space.
struct ForeignIndex {
  struct Node {
    NodeId parent = kNoNode;
    uint64_t segment = 0;
    uint64_t last_access = 0;
    uint32_t n_children = 0;
    bool pinned = false;
    int64_t model_used = 0;  // when its model last opened the store (unix seconds)
  };
  std::map<NodeId, Node> nodes;
  std::map<uint64_t, std::vector<Extent>> segments;  // segment -> its extents (chunks, probe keys)
  std::map<uint64_t, uint32_t> seg_nodes;            // segment -> nodes naming it
  uint64_t bytes = 0;                                // sum of the extents' lengths
};

struct PrefixStore::Impl {
  explicit Impl(PrefixStoreOptions o);  // geometry only; Open does the rest

  // ---- Store directory, recovery report, other models (prefix-store-open.cpp,
  //      prefix-store-foreign.cpp). First, so that the LOCK is released after everything else.
  std::unique_ptr<StoreLock> lock;  // held from Open until destruction
  // The directory cannot be written (read-only filesystem, no write permission): the store serves
  // what it holds and refuses every change (WritableOrError). Constant after Open.
  bool read_only = false;
  std::string read_only_why;
  RecoveryStats recovery_stats;  // constant after Open
  ForeignIndex foreign GUARDED_BY(mu);
  std::string ModelKey() const;  // fingerprint | geometry | chunk format: the catalog's model key
  Status OpenCatalog();
  Status WritableOrError() const;  // ok, or the read-only store's refusal
  Result<std::unique_ptr<Catalog>> OpenCatalogRetrying(const std::string& path);
  void AdoptForeign(ForeignContents& fc) REQUIRES(mu);
  uint64_t EvictForeignLocked(uint64_t bytes) REQUIRES(mu);

  // ---- Constant after Open.
  const PrefixStoreOptions opt;
  Env* const env;
  const std::string ns;  // radix namespace = model fingerprint
  const uint64_t fp_hash;
  const uint32_t C;                // tokens per chunk
  const uint32_t k_bytes;          // K (or V) of one token: (n_head_kv, head_dim) fp16
  const uint32_t rec_bytes;        // K + V of one token (memory tiers hold n_slots * rec_bytes)
  const KVEncoding probe_enc;      // probe_encoding, else kv_encoding
  const uint32_t probe_rec_bytes;  // (n_probe, head_dim) in probe_enc
  const std::shared_ptr<MemorySpace> device_mem, host_mem;
  std::unique_ptr<Catalog> catalog;  // internally synchronized; commits are ordered by mu
  std::shared_ptr<ExtentFiles> files;
  std::unique_ptr<ReadEngine> io;
  bool direct = false;
  std::thread worker;  // the reorder worker (started by Open, joined by Close)
  // The team KV tier (prefix-store-team.cpp); null when none is configured. Set by Open, reset by
  // Close; synchronizes itself.
  struct TeamState;
  struct TeamStateDeleter {
    void operator()(TeamState* t) const;
  };
  std::unique_ptr<TeamState, TeamStateDeleter> team;

  // ---- The in-memory index.
  Mutex mu;
  RadixTree tree GUARDED_BY(mu);
  TierManager tiers GUARDED_BY(mu);
  uint64_t ssd_budget GUARDED_BY(mu);  // opt.ssd_bytes until SetSsdBudget
  std::unordered_map<uint64_t, SegState> segs GUARDED_BY(mu);
  std::unordered_map<ChunkId, BlockPtr> blocks[3] GUARDED_BY(mu);  // by Tier
  std::unordered_map<uint64_t, HandleState> handles GUARDED_BY(mu);
  std::unordered_map<ReadTicket, std::unique_ptr<PendingRead>> reads GUARDED_BY(mu);
  std::set<std::tuple<uint64_t, uint64_t, uint32_t, uint32_t>> bad_chunks GUARDED_BY(mu);  // (seg, gen, layer, index)
  std::set<std::pair<uint64_t, uint64_t>> pending_truncations GUARDED_BY(mu);  // (segment, first bad original offset)
  uint64_t next_handle GUARDED_BY(mu) = 1;
  uint64_t next_ticket GUARDED_BY(mu) = 1;
  StoreStats st GUARDED_BY(mu);                            // counters only
  std::unordered_set<uint64_t> dirty_segs GUARDED_BY(mu);  // importance statistics to persist
  std::unordered_set<NodeId> dirty_nodes GUARDED_BY(mu);   // hits / last access to persist
  std::vector<ExtentPtr> pending_retire GUARDED_BY(mu);    // freed after the next commit

  // ---- Read buffers for reuse: fresh pages would cost a page fault per 4 KiB on every read.
  // Read buffers kept for reuse: a few layers' reads of a 32K-token prefix in flight at once.
  static constexpr size_t kReadPoolBytes = 128ull << 20;
  Mutex pool_mu;
  std::multimap<size_t, AlignedBuffer> pool GUARDED_BY(pool_mu);
  size_t pool_bytes GUARDED_BY(pool_mu) = 0;

  // ---- Admission: what reads brought from the SSD enters the memory tiers on the admitter
  // thread, not on the reader's (the copies would lengthen every wait). Match and Stats wait for
  // the queue to drain, so a request sees everything earlier requests admitted.
  Mutex admit_mu;
  CondVar admit_cv;  // waits under admit_mu: work queued, the queue drained, or stopping
  std::deque<std::unique_ptr<PendingRead>> admit_q GUARDED_BY(admit_mu);
  bool admit_busy GUARDED_BY(admit_mu) = false;     // the admitter is installing one it popped
  int admit_holds GUARDED_BY(admit_mu) = 0;         // HoldAdmissions not yet released
  int admit_waiters GUARDED_BY(admit_mu) = 0;       // in WaitForAdmissions: a hold gives way
  uint64_t admit_q_bytes GUARDED_BY(admit_mu) = 0;  // read buffers the queue holds
  bool admit_stop GUARDED_BY(admit_mu) = false;
  std::thread admitter;

  // ---- Reorder.
  Mutex reorder_mu;  // one reorder pass at a time
  Mutex worker_mu;
  CondVar worker_cv;  // waits under worker_mu
  bool stop GUARDED_BY(worker_mu) = false;
  std::chrono::milliseconds reorder_interval GUARDED_BY(worker_mu){0};  // 0: on demand only
  uint64_t reorder_interval_gen GUARDED_BY(worker_mu) = 0;              // bumped by SetReorderInterval

  // ---- Geometry (pure).
  std::string Geometry() const;
  uint32_t NChunks(uint32_t n_tokens) const { return (n_tokens + C - 1) / C; }
  ChunkId Cid(uint64_t seg, uint32_t layer, uint32_t index) const { return ChunkKey{seg, layer, index}.Pack(); }
  // The memory tiers hold a (segment, layer)'s probe keys as one more "chunk" of the layer, under
  // the last chunk index (no segment reaches it: 2^18 - 1 chunks is 16.7M tokens at C = 64).
  static constexpr uint32_t kProbeIndex = (1u << ChunkKey::kIndexBits) - 1;
  ChunkId ProbeCid(uint64_t seg, uint32_t layer) const { return Cid(seg, layer, kProbeIndex); }
  uint64_t ProbeMemBytes(const ExtentPtr& e) const { return uint64_t(e->ext.n_slots) * probe_rec_bytes; }
  // A probe read admits a segment's probe keys to a memory tier (reading them whole) only when it
  // wants at least 1 / kProbeAdmitShare of their records, or a tier already holds them.
  static constexpr uint64_t kProbeAdmitShare = 4;
  uint64_t ChunkMemBytes(const ExtentPtr& e) const { return uint64_t(e->ext.n_slots) * rec_bytes; }
  ChunkLayout KVLayout(uint32_t n_slots) const {
    return KVChunkLayout(n_slots, k_bytes, opt.kv_encoding != KVEncoding::kF16);
  }
  ChunkHeader HeaderFor(ChunkKind kind, uint64_t seg, uint64_t gen, uint32_t layer, uint32_t index, uint32_t slot_begin,
                        uint32_t n_slots, bool reordered) const;
  ExtentPtr Own(const ChunkExtent& e) const;

  // ---- prefix-store-open.cpp
  struct Recovery;
  static Result<std::unique_ptr<Impl>> Open(PrefixStoreOptions o);
  Status OpenFiles();
  Status Recover() EXCLUDES(mu);
  void RecoverLayouts(Recovery& r) const;
  void RecoverExtents(Recovery& r) REQUIRES(mu);
  Status RecoverTree(Recovery& r) REQUIRES(mu);
  void NoteDamage(Recovery& r, uint64_t seg, uint64_t off, const std::string& why) REQUIRES(mu);
  void FindMissing(Recovery& r) REQUIRES(mu);
  void VerifyOnOpen(Recovery& r) REQUIRES(mu);
  Status CutAtDamage(Recovery& r) REQUIRES(mu);
  void ForgetUnnamed(Recovery& r) REQUIRES(mu);
  void Close() EXCLUDES(mu, worker_mu);

  // ---- prefix-store-read.cpp
  MatchHandle Match(std::span<const Token> tokens) EXCLUDES(mu);
  Status Release(MatchHandle& h) EXCLUDES(mu);
  Result<ReadTicket> SubmitProbeKeys(const MatchHandle& h, int il, uint8_t* records_into) EXCLUDES(mu);
  Result<ReadTicket> SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions, bool want_k,
                                  bool want_v, std::optional<ReadInto> into) EXCLUDES(mu);
  Result<ReadTicket> SubmitReadAllKeys(const MatchHandle& h, int il) EXCLUDES(mu);
  Result<std::vector<uint32_t>> ReadGroups(const MatchHandle& h, int il, uint32_t group_tokens) EXCLUDES(mu);
  uint32_t BlockGroupTokens() const;
  Result<ReadResult> Wait(ReadTicket t) EXCLUDES(mu);
  // probe_records (probe reads only): the records as stored instead of decoded halves in k_out.
  // out_rows (KV reads): where row r of the read goes in k_out / v_out (kSkipRow: nowhere); empty:
  // row r to row r.
  Result<ReadStats> WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out, uint8_t* probe_records = nullptr,
                             std::span<const uint32_t> out_rows = {}) EXCLUDES(mu);
  Status ReportImportance(const MatchHandle& h, int il, std::span<const uint32_t> selected,
                          std::span<const float> scores) EXCLUDES(mu);
  Result<const HandleState*> HandleLocked(const MatchHandle& h, int il) REQUIRES(mu);
  Status PlanKVSourcesLocked(const HandleState& hs, uint32_t il, std::span<const uint32_t> positions, PendingRead* pr)
      REQUIRES(mu);
  void PlanTierReadsLocked(PendingRead* pr) REQUIRES(mu);
  Result<ReadTicket> SubmitLocked(std::unique_ptr<PendingRead> pr) REQUIRES(mu);
  Status VerifyRead(PendingRead& pr) EXCLUDES(mu);
  void GatherKV(PendingRead& pr, f16_t* k_out, f16_t* v_out, std::span<const uint32_t> out_rows) const;
  void PlaceProbeRecords(const ReadSource& s, uint8_t* records, f16_t* k_out) const;
  void GatherSource(const PendingRead& pr, const ReadSource& s, f16_t* k_out, f16_t* v_out,
                    std::span<const uint32_t> out_rows) const;
  // A read with a ReadInto and RowArrivals, at submit: the sources the memory tiers hold, in place.
  void ServeFromMemory(PendingRead& pr) const;
  // Tells the read's RowArrivals (if any) that source s's rows are in place.
  static void ReportArrived(const PendingRead& pr, const ReadSource& s);
  // A read with a ReadInto: source g's blocks all arrived (on the engine's completion thread).
  void ServeArrived(PendingRead& pr, uint32_t g) const;
  static const uint8_t* BlockRecords(const TierBlock& b, std::vector<uint8_t>& tmp);
  void RecycleBuffers(PendingRead& pr) EXCLUDES(pool_mu);
  void MarkCorruptLocked(const ReadSource& s, const Status& why) REQUIRES(mu);
  Status VerifySource(const ReadSource& s, bool probe) const;
  static std::vector<std::pair<uint32_t, uint32_t>> RunsFor(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                                            uint32_t max_gap_blocks = 0);
  // PlanKVSourcesLocked's sources by chunk index and PlanTierReadsLocked's blocks of one chunk,
  // kept from read to read (their capacity).
  std::vector<uint32_t> plan_sources_ GUARDED_BY(mu);
  BlockMask plan_blocks_ GUARDED_BY(mu);
  AlignedBuffer GetBuffer(size_t n) EXCLUDES(pool_mu);
  void PutBuffer(AlignedBuffer b) EXCLUDES(pool_mu);
  Tier ServedFromLocked(ChunkId cid, uint64_t generation) const REQUIRES(mu);

  // ---- prefix-store-admit.cpp
  static bool HasAdmissions(const PendingRead& pr);
  void QueueAdmission(std::unique_ptr<PendingRead> pr) EXCLUDES(admit_mu);
  void AdmitLoop() EXCLUDES(mu, admit_mu);
  void WaitForAdmissions() EXCLUDES(admit_mu);
  void HoldAdmissions(bool hold) EXCLUDES(admit_mu);
  // The admitter waits: held (PrefixStore::HoldAdmissions), nobody waiting for it, queue under the cap.
  bool AdmissionsHeldLocked() const REQUIRES(admit_mu);
  bool WantInstallLocked(const PendingRead& pr, const ReadSource& s, Tier* t, BlockPtr* base) REQUIRES(mu);
  void InstallSource(const PendingRead& pr, const ReadSource& s) EXCLUDES(mu);
  BlockPtr MakeProbeBlock(const ReadSource& s, Tier t);
  BlockPtr MakeKVBlock(const PendingRead& pr, const ReadSource& s, Tier t, const BlockPtr& base);
  void ApplyMoveLocked(const TierMove& m) REQUIRES(mu);
  void ApplyMovesLocked(const std::vector<TierMove>& moves) REQUIRES(mu);
  void DropChunkLocked(ChunkId cid) REQUIRES(mu);

  // ---- prefix-store-write.cpp
  struct InsertJob;
  // `shared_prefix`: InsertOptions::shared_prefix.
  Result<InsertSummary> Insert(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                               uint64_t shared_prefix = 0) EXCLUDES(mu);
  Status BeginInsert(std::span<const Token> tokens, uint64_t start, InsertJob* job) EXCLUDES(mu);
  Status WriteInsert(std::span<const LayerKV> layers, uint64_t start, InsertJob* job) EXCLUDES(mu);
  Result<InsertSummary> PublishInsertLocked(std::span<const Token> tokens, InsertJob* job) REQUIRES(mu);
  void AdmitInsertedLocked(const InsertJob& job, std::span<const LayerKV> layers, uint64_t start) REQUIRES(mu);
  void AdmitFreshLocked(ChunkId cid, uint64_t generation, uint64_t bytes, const std::function<void(uint8_t*)>& fill)
      REQUIRES(mu);
  Status WriteLayer(uint64_t seg, uint64_t gen, uint32_t il, uint32_t n_tokens, const std::vector<uint32_t>& mapping,
                    const std::vector<bool>& chunk_wanted, const RecordAt& k_at, const RecordAt& v_at,
                    const uint8_t* probe_records, ProbeRow* probe_row, WrittenChunks* out) EXCLUDES(mu);
  Result<Extent> AllocateEvicting(uint64_t bytes, uint32_t il) EXCLUDES(mu);
  static void RetireAll(std::vector<ExtentPtr>& v);
  Status SyncFiles(const std::set<uint32_t>& ids);
  Status CommitLocked(const CatalogBatch& b) REQUIRES(mu);
  uint64_t UpdateDataCapLocked() REQUIRES(mu);
  uint64_t EvictLocked(uint64_t bytes, uint64_t max_nodes) REQUIRES(mu);
  void ApplyEvictionsLocked(const std::vector<Eviction>& evs, CatalogBatch& batch) REQUIRES(mu);
  void FreeDeadChunksLocked(uint64_t seg, CatalogBatch& batch) REQUIRES(mu);
  void KillSegmentLocked(uint64_t seg, CatalogBatch& batch) REQUIRES(mu);
  NodeRecord RecordOf(NodeId id) REQUIRES(mu);
  std::optional<std::pair<NodeId, uint64_t>> NodeAtLocked(uint64_t seg, uint64_t off) REQUIRES(mu);
  void TryPendingTruncationsLocked() REQUIRES(mu);
  std::string NoRoomReasonLocked() REQUIRES(mu);

  // ---- prefix-store-reorder.cpp
  struct ReorderPlan;
  Result<ReorderReport> ReorderNow() EXCLUDES(mu, reorder_mu);
  Status ReorderSegment(uint64_t seg, ReorderReport* rep) REQUIRES(reorder_mu) EXCLUDES(mu);
  bool PlanReorderLocked(uint64_t seg, ReorderPlan* plan) REQUIRES(mu);
  std::vector<uint64_t> NodeCutsLocked(uint64_t seg, uint32_t n) REQUIRES(mu);
  Status RewriteLayer(uint64_t seg, ReorderPlan& plan, uint32_t il, WrittenChunks* out) EXCLUDES(mu);
  Status SwapLayoutLocked(uint64_t seg, ReorderPlan& plan, WrittenChunks& w, ReorderReport* rep) REQUIRES(mu);
  void KeepTierImages(uint64_t seg, ReorderPlan& plan, uint32_t il) EXCLUDES(mu);
  void CarryOverChunkLocked(ChunkId cid, const ReorderPlan& plan, const ExtentPtr& now) REQUIRES(mu);
  void SetReorderInterval(std::chrono::milliseconds interval) EXCLUDES(worker_mu);
  void WorkerLoop() EXCLUDES(worker_mu);

  // ---- prefix-store-team.cpp
  Status OpenTeam();
  void CloseTeam();
  void PublishToTeam(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                     const InsertOptions& io) EXCLUDES(mu);
  void PublishPrefixTail(std::span<const Token> tokens, uint64_t base, std::span<const LayerKV> layers,
                         uint64_t shared_prefix) EXCLUDES(mu);
  TeamFill FillFromTeam(std::span<const Token> tokens) EXCLUDES(mu);
  TeamOrder WriteOrderOf(std::span<const Token> tokens, uint64_t from) EXCLUDES(mu);
  Result<uint64_t> PublishCached(std::span<const Token> tokens) EXCLUDES(mu);
  // K and V of every layer at positions [from, to) of a match, fp16, read back from this store.
  Status ReadBackKV(const MatchHandle& h, uint64_t from, uint64_t to, std::vector<std::vector<f16_t>>* k,
                    std::vector<std::vector<f16_t>>* v) EXCLUDES(mu);
  struct TeamFillKV;
  void AppendTeamSpans(const TeamTier& tier, std::span<const TeamDescriptor> spans, size_t b, size_t e,
                       const std::vector<Result<std::vector<uint8_t>>>& vals, TeamFillKV* kv);
  Status InsertTeamKV(std::span<const Token> tokens, const TeamFillKV& kv, uint64_t* n_written) EXCLUDES(mu);
  bool WaitTeamPublished(std::chrono::milliseconds timeout);
  TeamTierInfo TeamInfo();
  // A match on a prefix only the team tier holds (TeamOptions::selective): the staged prefix of
  // `tokens` (its length in *n), else null; reads planned, run on the team worker, waited.
  std::shared_ptr<const RemotePrefix> StagedFor(std::span<const Token> tokens, uint64_t* n) EXCLUDES(mu);
  Result<ReadTicket> SubmitRemoteLocked(const HandleState& hs, int il, bool probe, std::span<const uint32_t> positions,
                                        bool want_k, bool want_v) REQUIRES(mu);
  void RunRemoteRead(const RemotePrefix& rp, uint32_t il, RemoteRead& rr) EXCLUDES(mu);
  Result<ReadStats> WaitRemote(PendingRead& pr, f16_t* k_out, f16_t* v_out, uint8_t* probe_records,
                               std::span<const uint32_t> out_rows) EXCLUDES(mu);
  std::vector<uint32_t> RemoteGroups(const HandleState& hs, uint32_t il, uint32_t group_tokens) const;
  // After a remote match's request: the whole prefix into the local tiers, in the background.
  void FillAfterRemote(std::shared_ptr<const RemotePrefix> rp) EXCLUDES(mu);
  // An Insert past a staged prefix the local store does not hold yet: kept and written once the
  // background fill has brought the prefix. False when there is no such prefix.
  bool DeferInsert(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                   const InsertOptions& io) EXCLUDES(mu);
  TeamFill FillWhole(std::span<const Token> tokens, bool stage) EXCLUDES(mu);

  // ---- prefix-store-admin.cpp
  struct SegView;
  StoreStats Stats() EXCLUDES(mu);
  Status Flush() EXCLUDES(mu);
  Status FlushLocked() REQUIRES(mu);
  Result<uint64_t> EvictNodes(uint64_t n) EXCLUDES(mu);
  std::vector<TierMove> SetTierBudget(Tier tier, uint64_t bytes) EXCLUDES(mu);
  Status SetSsdBudget(uint64_t bytes) EXCLUDES(mu);
  void SetPolicy(PolicyKind kind) EXCLUDES(mu);
  TreeSnapshot SnapshotTree(size_t max_nodes) EXCLUDES(mu);
  const SegView& SegViewLocked(uint64_t seg, const SegState& ss, std::unordered_map<uint64_t, SegView>& views)
      REQUIRES(mu);
  void DescribeNodeLocked(const NodeInfo& n, const SegView& v, const SegState& ss, TreeNodeInfo* t) REQUIRES(mu);
  PrefixResidency Residency(std::span<const Token> tokens) EXCLUDES(mu);
  void SpanResidencyLocked(const PathSpan& sp, const SegLayout& l, std::set<ChunkId>& seen, PrefixResidency* r)
      REQUIRES(mu);
  Status SetPinned(std::span<const Token> tokens, bool pin) EXCLUDES(mu);
  void RefreshPinsLocked(const std::set<uint64_t>& seg_ids) REQUIRES(mu);
  void RefreshSegmentPinsLocked(uint64_t seg, const SegState& ss, const std::pair<uint64_t, uint64_t>* pinned)
      REQUIRES(mu);
  Result<uint64_t> DropFrom(std::span<const Token> tokens, uint64_t begin) EXCLUDES(mu);
  Status CheckConsistency() EXCLUDES(mu);
  Status CheckIndexLocked(std::vector<ReadSource>* to_verify) REQUIRES(mu);
};

}  // namespace impress::store
