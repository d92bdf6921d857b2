// PrefixStore: the tiered prefix KV store facade the IMPRESS pipeline calls (docs/design.md sections 2 and 4).
//
// Owns the radix tree (store/radix-tree.h), the SQLite catalog (store/catalog.h), the chunk data
// files (store/extent-files.h), the read engine (store/uring-io.h), the device/host memory tiers
// (store/tier-manager.h decides, MemorySpace holds bytes) and the background reorder worker.
//
// Per request: Match() the token sequence -> a MatchHandle that locks the matched nodes and pins
// the KV layout they had (a reorder or eviction meanwhile never changes what the handle reads);
// per layer SubmitProbeKeys() / SubmitReadKV() return a ticket at once, Wait(ticket) gives the
// fp16 data in ORIGINAL position order plus I/O statistics; ReportImportance() after the layer;
// Release() at the end. Insert() stores new KV (it may run on a background thread).
//
// For the GUI: SnapshotTree() copies the radix tree with sizes, hits and tier residency;
// Residency() says which tier would serve a prefix without touching any statistic; Pin()/Unpin()
// keep a prefix from eviction (persisted in the catalog); DropFrom() drops a prefix's tail and
// everything cached below it (one document's cache).
//
// Thread contract: internally synchronized; every method may be called from any thread. Tickets
// and handles may be used from any thread but each ticket is waited once and each handle
// released once. Insert and ReorderNow block on disk I/O; Submit* do not (beyond planning).
// The implementation (store/prefix-store-impl.h) is split by job across prefix-store-*.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "base/memory-space.h"
#include "base/row-arrivals.h"
#include "base/status.h"
#include "store/cache-policy.h"
#include "store/env.h"
#include "store/kv-codec.h"
#include "store/radix-tree.h"
#include "store/tier-manager.h"
#include "store/tls-tunnel.h"

namespace impress::store {

// The team KV tier (store/team-tier.h, docs/team-tier.md): a Redis the desktops of a team share.
// The store publishes the KV it inserts there in the background and fills a local miss from it
// (FillFromTeam). Off unless `url` is given.
struct TeamOptions {
  std::string url;               // "redis://host:port" (no password in it); empty: no team tier
  std::string team = "default";  // the namespace: 1-64 of [A-Za-z0-9._-]; two teams never see each other
  // The user (first line) and password (second; one line: the password alone). Empty: from
  // IMPRESS_TEAM_USER / IMPRESS_TEAM_PASSWORD, else no AUTH.
  std::string credentials_file;
  // rediss:// (TLS): the CA certificates to verify the server with (empty: the system's), and the
  // client certificate and key to present (Redis asks for one unless tls-auth-clients is off).
  // A file that cannot be read fails the store's Open.
  TlsFiles tls;
  std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(1000);
  std::chrono::milliseconds request_timeout = std::chrono::milliseconds(3000);  // per Redis request
  // After the team tier could not be reached, fills do not try it again for this long.
  std::chrono::milliseconds retry_pause = std::chrono::milliseconds(2000);
  std::chrono::seconds ttl = std::chrono::seconds(0);  // of published keys; 0: they do not expire
  bool publish = true;                                 // false: only read from the team tier
  // A local miss reads per layer only what the request selects from the team tier (probe keys,
  // then the selected rows by byte ranges), and the whole prefix is filled into the local tiers
  // in the background after the request. false: the fill reads the whole prefix first.
  bool selective = true;
  // With selective reads and the default block-group selection, which groups a remote match
  // offers: false, runs of consecutive rows of each span's value (a span's tokens in the
  // publisher's slot order), which are runs of bytes; true, the publisher's own groups (runs of
  // its segment's slots), so the request selects exactly the tokens the publisher's would and
  // answers the same at temperature 0, but a group's rows lie in many spans and each costs a
  // 4 KiB block. Token-level selection and AS-like read the same tokens either way.
  bool publisher_groups = false;
  uint64_t publish_queue_bytes = 512ull << 20;  // KV copies waiting to be published
  // How long closing the store waits for KV still being published (then it is dropped).
  std::chrono::milliseconds close_wait = std::chrono::seconds(10);
  bool enabled() const { return !url.empty(); }
};

struct PrefixStoreOptions {
  std::string dir;                // created (0700) if missing; holds LOCK, catalog.db and data-*.dat
  std::string model_fingerprint;  // KV of another model is never reused
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  std::vector<int> probe_kv_heads = {0};  // KV heads whose keys are stored separately
  int chunk_tokens = 64;                  // C
  // How K/V and probe keys are kept on the SSD and in the device/host tiers (store/kv-codec.h);
  // reads return fp16 either way. KV stored under another encoding is kept but not read (as
  // another model's): its prefixes are recomputed.
  KVEncoding kv_encoding = KVEncoding::kF16;
  // Probe keys may be kept more compactly than K (int4: a quarter of fp16's bytes): they only rank
  // tokens. nullopt: as kv_encoding.
  std::optional<KVEncoding> probe_encoding;
  uint64_t device_bytes = 256ull << 20;
  uint64_t host_bytes = 1ull << 30;
  uint64_t ssd_bytes = 16ull << 30;  // data files + catalog never grow past this
  int queue_depth = 128;             // disk reads in flight at once
  // Reads of one chunk at most this many 4 KiB blocks apart become one read (the blocks between
  // are read and dropped): fewer, larger requests for a scattered selection. One block: on the
  // disk measured (docs/benchmarks.md), a 32K-token question read 8% fewer bytes than with two and
  // was no slower; with none it made 29% more requests and was slower.
  uint32_t read_gap_blocks = 1;
  PolicyKind policy = PolicyKind::kImpress;
  // Freshly written chunks enter the device, else the host tier while it has room (nothing is
  // evicted for them), so a follow-up question does not go back to the SSD for KV just computed.
  // false: new KV lands on the SSD only (benchmarks that measure SSD reads of a cold store).
  bool admit_on_insert = true;
  std::chrono::milliseconds reorder_interval = std::chrono::minutes(10);  // 0: on demand only
  bool force_pread = false;                                               // also IMPRESS_STORE_FORCE_PREAD=1
  bool verify_on_open = false;  // read and check every chunk on open (else: on every read)
  // How long Open waits for another process to close the store (0: refuse at once, naming it).
  std::chrono::milliseconds lock_wait = std::chrono::milliseconds(0);
  // Errors of the moment while opening the catalog (another program holding a lock on it, an I/O
  // error, a full disk, no permission) are tried this many times in all, pausing
  // catalog_retry_pause (doubled after each try) in between; then Open fails with the last error
  // and the catalog stays where it is. Each try waits up to catalog_busy_timeout for a lock.
  int catalog_open_attempts = 3;
  std::chrono::milliseconds catalog_retry_pause = std::chrono::milliseconds(200);
  std::chrono::milliseconds catalog_busy_timeout = std::chrono::seconds(5);
  uint64_t data_file_bytes = 1ull << 30;
  Env* env = nullptr;                          // nullptr: Env::Default()
  std::shared_ptr<MemorySpace> device_memory;  // nullptr: host memory stand-in
  std::shared_ptr<MemorySpace> host_memory;    // nullptr: host memory
  TeamOptions team;                            // the team KV tier (off by default)
};

// The encoding probe keys are kept in: probe_encoding, else the K/V's. For the store's options and
// for every settings struct that carries the pair (benchmarks, chat sessions).
template <class Options>
KVEncoding ProbeEncoding(const Options& o) {
  return o.probe_encoding.value_or(o.kv_encoding);
}

// K and V of one layer for tokens [start, end) of an insert, fp16, each (n_tokens, n_head_kv, head_dim).
// `importance` (optional, n_tokens values, larger = more important) is what the computation that
// produced the KV saw (e.g. H2O column sums over the prompt's last part): the layer's chunks are
// then written in that order, with the layer's mapping list (the first write is already packed,
// as a reorder would pack it). It is not an importance report: the reorder learns from questions.
struct LayerKV {
  const f16_t* k = nullptr;
  const f16_t* v = nullptr;
  const float* importance = nullptr;
};

struct InsertOptions {
  // The KV belongs to a private document: it never leaves the machine (not published to the team
  // tier, counted as refused).
  bool private_document = false;
  // false: not published at all (KV that came from the team tier).
  bool publish = true;
  // Tokens [0, shared_prefix) are what other questions (and other desktops, through the team tier)
  // reuse, e.g. a prompt's documents before the question. With importance given, the write order
  // keeps the whole spans (chunks) of that prefix apart from what follows: they are ordered among
  // themselves into the first slots, the rest after them. So the prefix's chunks and read groups
  // hold no token of this question or its answer, and a store filled with the prefix alone (from
  // the team tier, in this order) lays it out exactly as this one does. 0: one order for all.
  uint64_t shared_prefix = 0;
};

// What FillFromTeam did. It never fails: whatever went wrong leaves the local tiers as they were
// (or holding a verified part of the team's prefix), and the caller computes the rest.
struct TeamFill {
  uint64_t n_local = 0;  // tokens the local store held before
  uint64_t n_team = 0;   // tokens whose KV came from the team tier and entered the local store
  // Tokens the next Match of this prefix reads from the team tier directly (TeamOptions::selective):
  // per layer the probe keys and the selected rows; the whole prefix is filled after that request.
  uint64_t n_remote = 0;
  uint64_t bytes = 0;  // bytes received from the team tier (descriptors and values)
  Status status;       // why the fill stopped short (network, bad value, local write), else Ok
};

// The team tier as this store sees it (StoreStats::team).
struct TeamTierInfo {
  bool configured = false;
  bool connected = false;  // the last request reached Redis
  std::string url, team;
  std::string status;          // "off", "connected", "unreachable: <why>", "connecting"
  uint64_t fills = 0;          // FillFromTeam calls that asked the team tier
  uint64_t fill_hits = 0;      // of which brought KV into the local store
  uint64_t tokens_filled = 0;  // tokens of KV the team tier supplied
  uint64_t bytes_read = 0;     // bytes received (descriptors and values)
  uint64_t errors = 0;         // fills that fell back: network, server, local write
  uint64_t corrupt = 0;        // values or descriptors refused by verification
  uint64_t request_us = 0;     // total time of the fills' team requests
  uint64_t requests = 0;       // lookups and value batches they made
  uint64_t publish_submitted = 0;
  uint64_t publish_refused_private = 0;
  uint64_t publish_refused_full = 0;
  uint64_t publish_failed = 0;  // given up (not the network: it is retried)
  uint64_t spans_published = 0;
  uint64_t bytes_written = 0;
  uint64_t publish_queued_bytes = 0;
  double mean_latency_ms() const { return requests ? double(request_us) / 1000.0 / double(requests) : 0.0; }
};

struct MatchHandle {
  uint64_t id = 0;         // 0: nothing to release
  uint64_t n_matched = 0;  // tokens of the query whose KV the store holds
  bool remote = false;     // the team tier holds them (a staged prefix), not the local tiers
};

using ReadTicket = uint64_t;

struct ReadStats {
  uint64_t ssd_bytes = 0;      // bytes read from the data files
  uint64_t useful_bytes = 0;   // bytes of K/V (or probe keys) actually returned
  uint32_t chunks_device = 0;  // chunks served from each tier
  uint32_t chunks_host = 0;
  uint32_t chunks_ssd = 0;
  uint32_t chunks_team = 0;  // spans read from the team tier (a remote match)
  uint64_t team_bytes = 0;   // bytes received from the team tier for this read
  uint32_t n_ios = 0;        // read requests submitted
  // When the read was submitted and when its last disk read completed (equal when served from
  // memory): the disk's time on it, whether or not anyone waited.
  std::chrono::steady_clock::time_point submitted{}, completed{};
  uint32_t chunks() const { return chunks_device + chunks_host + chunks_ssd + chunks_team; }
  double read_amplification() const { return useful_bytes ? double(ssd_bytes) / double(useful_bytes) : 0.0; }
};

// Where a KV read's rows go, when the caller knows it at submit (a layer's buffers): each chunk's
// rows are checked and copied there as soon as its blocks arrive, while the rest of the read is in
// flight, so WaitInto has little left to do. k / v as WaitInto's k_out / v_out (null: not
// wanted), rows as its out_rows (empty: row r to row r); WaitInto must name the same k and v
// (Wait, which allocates its own, is refused), and they must live until it returns (or, for a
// read never waited, until the store is closed).
//
// With `arrivals` (reset by the caller to the read's output rows, n_rows = its row count or the
// largest out row + 1), the store reports each row once it is in place: rows a memory tier holds
// before SubmitReadKV returns, the disk's as their chunks arrive; a reader may use those rows
// before WaitInto (RowArrivals::Wait), and a wait for rows of a chunk that failed ends when the
// read has finished, with false (WaitInto then returns the error). Not for a read of a remote
// match. `arrivals` must outlive the read's WaitInto.
struct ReadInto {
  f16_t* k = nullptr;
  f16_t* v = nullptr;
  std::vector<uint32_t> rows;
  RowArrivals* arrivals = nullptr;
  uint8_t* probe_records = nullptr;  // a probe read's records (SubmitProbeKeys' records_into)
};

struct ReadResult {
  std::vector<f16_t> k;  // KV read: (n_pos, n_head_kv, head_dim) if wanted; probe read: (n_matched, n_probe, head_dim)
  std::vector<f16_t> v;  // KV read: (n_pos, n_head_kv, head_dim) if wanted
  ReadStats stats;
};

struct InsertSummary {
  uint64_t n_cached_before = 0;  // tokens already present
  uint64_t n_written = 0;        // tokens whose KV was written now
  uint64_t bytes_written = 0;
};

struct ReorderReport {
  uint64_t segments_seen = 0;
  uint64_t segments_reordered = 0;
  uint64_t bytes_written = 0;
};

struct StoreStats {
  TierStats tiers;
  uint64_t n_nodes = 0;
  uint64_t n_tokens = 0;
  uint64_t n_segments = 0;
  uint64_t ssd_disk_bytes = 0;         // data files
  uint64_t ssd_free_inside_bytes = 0;  // holes inside the data files (freed, reused before growing)
  uint64_t catalog_bytes = 0;
  uint64_t ssd_cap_bytes = 0;
  uint64_t ssd_bytes_read = 0;
  uint64_t chunk_reads = 0;  // chunks fetched from SSD
  uint64_t n_reads = 0;      // Submit* calls
  uint64_t reorder_passes = 0;
  uint64_t segments_reordered = 0;
  uint64_t nodes_evicted = 0;
  uint64_t chunks_dropped_corrupt = 0;  // failed a checksum, or missing on open
  uint64_t inserts = 0;
  uint64_t insert_failures = 0;
  std::string io_engine;  // "io_uring" or "pread"
  bool direct_io = false;
  TeamTierInfo team;
};

// What Open repaired, by kind (each kind also logs a warning). A clean shutdown or a crash at
// any moment (every change is one catalog transaction) leaves all of them 0: space written but
// never committed is named by no row and is reclaimed without a repair.
struct RecoveryStats {
  uint64_t catalog_rows_invalid = 0;  // rows with impossible values (NULL, out of range), deleted
  uint64_t nodes_dropped = 0;         // node rows the tree could not restore (orphan, cycle, clash)
  uint64_t nodes_cut = 0;             // nodes removed or shortened because their KV was missing or bad
  uint64_t segments_dropped = 0;      // segment rows dropped: inconsistent, or named by no node
  uint64_t chunk_rows_dropped = 0;    // chunk rows not fitting their segment or the data files, or dead
  uint64_t probe_rows_dropped = 0;    // probe rows not fitting their segment or the data files
  uint64_t chunks_missing = 0;        // live KV (chunk, probe keys or a whole segment) the catalog lacks
  uint64_t chunks_corrupt = 0;        // failed their checksum on open (verify_on_open)
  uint64_t foreign_rows_dropped = 0;  // other models' rows whose extents do not fit the data files
  std::string catalog_moved_to;       // non-empty: the catalog was unreadable and renamed to this path
  uint64_t total() const {
    return catalog_rows_invalid + nodes_dropped + nodes_cut + segments_dropped + chunk_rows_dropped +
           probe_rows_dropped + chunks_missing + chunks_corrupt + foreign_rows_dropped +
           (catalog_moved_to.empty() ? 0 : 1);
  }
};

// One radix node of this model's namespace, for display.
struct TreeNodeInfo {
  uint64_t id = 0;     // node id (stable while the node exists; a split keeps it on the lower part)
  int parent = -1;     // index in TreeSnapshot::nodes; -1 for children of the root
  uint64_t start = 0;  // sequence position of the node's first token
  uint64_t n_tokens = 0;
  uint64_t kv_bytes = 0;     // this node's share of the SSD extents (K/V chunks + probe keys, all layers)
  uint64_t hits = 0;         // Match() calls whose match used this node (persisted)
  uint64_t last_access = 0;  // logical clock of the last match/insert that walked it
  double score =
      0;  // mean policy priority (IMPRESS: frequency x important ratio) of its chunks with statistics; 0 if none
  double importance = -1;      // mean reported importance of its tokens over all layers; -1 if never reported
  uint32_t chunks_device = 0;  // distinct chunks (all layers) holding its tokens, by the tier a read
  uint32_t chunks_host = 0;    // would be served from now
  uint32_t chunks_ssd_only = 0;
  uint32_t n_children = 0;
  bool pinned = false;
  bool locked = false;      // a request in flight holds it (or a node below it)
  std::vector<Token> head;  // the node's first <= kHeadTokens tokens, for labels
  static constexpr size_t kHeadTokens = 24;
};

struct TreeSnapshot {
  std::vector<TreeNodeInfo> nodes;  // pre-order: a parent before its children, siblings by first token
  bool truncated = false;           // more than max_nodes nodes: the rest were left out (still a forest)
  uint64_t n_nodes_total = 0;       // nodes of this model's namespace
  uint64_t n_tokens_total = 0;
};

// Where the longest cached prefix of a query would be served from now. A token counts as device
// when every layer's chunk holding it is in the device tier, as host when every one is in host or
// device (not all device), else ssd_only; the three sum to n_matched.
struct PrefixResidency {
  uint64_t n_matched = 0;
  uint64_t tokens_device = 0;
  uint64_t tokens_host = 0;
  uint64_t tokens_ssd_only = 0;
  uint32_t chunks_device = 0;  // distinct chunks (all layers) of the matched prefix, by tier
  uint32_t chunks_host = 0;
  uint32_t chunks_ssd_only = 0;
  bool pinned = false;  // every node on the matched path is pinned (false when nothing matched)
};

class PrefixStore {
 public:
  // Creates the directory (0700) if missing and takes its LOCK: while one PrefixStore holds a
  // directory, another Open of it (this or any process) fails with kIOError naming the holder's
  // pid and program; the lock goes with the store or its process. A catalog of a newer schema
  // fails with kUnsupported (left unchanged); one shown damaged is renamed aside and the store
  // starts empty (RecoveryStats::catalog_moved_to); one that cannot be opened now (locked, I/O
  // error, disk full) fails Open with kIOError / kResourceExhausted after catalog_open_attempts
  // tries and is left as it is. The catalog is created 0600. Several models
  // share one directory: each sees only its own prefixes, the others' are kept.
  // A directory the user cannot write (Env::CanWrite: read-only filesystem or mode) opens
  // read-only: matches and reads work; Insert, Pin/Unpin, DropFrom, EvictNodes, SetSsdBudget,
  // ReorderNow and Flush fail with kIOError saying the store is read-only; nothing is written.
  // Its catalog must exist at the current schema version.
  static Result<std::unique_ptr<PrefixStore>> Open(PrefixStoreOptions options);
  ~PrefixStore();  // stops the reorder worker, saves statistics
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  // Longest cached prefix of `tokens`; locks it until Release. n_matched may be 0 (then id is 0).
  // When FillFromTeam staged a longer prefix of `tokens` (TeamOptions::selective), the handle
  // covers that instead and its reads go to the team tier (ReadStats::chunks_team); releasing it
  // starts the background fill of the whole prefix.
  MatchHandle Match(std::span<const Token> tokens);
  Status Release(MatchHandle& handle);

  // Probe keys of layer il for the whole matched prefix: (n_matched, n_probe, head_dim) in k.
  // With records_into (RecordBytes(...) * n_matched bytes, see WaitProbeRecords), the records go
  // there: each chunk's checked and copied as soon as it arrives, so WaitProbeRecords, which must
  // name the same buffer (Wait is refused), has little left to do; the buffer must live until it
  // returns (or, for a read never waited, until the store is closed). A remote match's read
  // copies at the wait.
  Result<ReadTicket> SubmitProbeKeys(const MatchHandle& h, int il, uint8_t* records_into = nullptr);
  // K and/or V of layer il at `positions` (ascending, each < n_matched), in that order.
  Result<ReadTicket> SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions, bool want_k,
                                  bool want_v);
  // The same, copying the rows into `into` as they arrive (ReadInto).
  Result<ReadTicket> SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions, bool want_k,
                                  bool want_v, ReadInto into);
  // All keys of layer il (the fallback path): positions 0..n_matched-1, K only.
  Result<ReadTicket> SubmitReadAllKeys(const MatchHandle& h, int il);
  // The read unit of layer il, for I/O-aware selection: for each matched position, the id of its
  // group of `group_tokens` consecutive slots of one chunk (in the layer's stored order, so their
  // K records, and their V records, share disk blocks). Ids are dense from 0. Reads nothing.
  Result<std::vector<uint32_t>> ReadGroups(const MatchHandle& h, int il, uint32_t group_tokens);
  // The smallest group of slots whose K (or V) records fill whole 4 KiB blocks, at most a chunk.
  uint32_t BlockGroupTokens() const;
  // Holds back the admission of what reads bring from the SSD into the memory tiers until the
  // matching ReleaseAdmissions (holds nest): a question's prefill keeps the cores and the memory
  // bandwidth that admission's copies and first-touch page faults take (in a fresh process a
  // 32K-token question on the 1.5B model fills about a gigabyte of new tier blocks). Bounded: past
  // kHeldAdmissionBytes of queued read buffers the admitter goes on, and anything that waits for
  // the admissions (a new match, the statistics) lets them through.
  void HoldAdmissions();
  void ReleaseAdmissions();
  static constexpr uint64_t kHeldAdmissionBytes = 512ull << 20;
  Result<ReadResult> Wait(ReadTicket t);
  // The same, gathering into caller memory (e.g. the compute arena): k_out / v_out must hold
  // n_pos * n_head_kv * head_dim halves if wanted (probe reads: n_matched * n_probe * head_dim in
  // k_out); they may be null when not wanted.
  Result<ReadStats> WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out);
  // The same, placing row r of the read at row out_rows[r] of k_out / v_out, or nowhere where it is
  // kSkipRow (out_rows: one entry per position the read named). Merges reads into one buffer.
  static constexpr uint32_t kSkipRow = UINT32_MAX;
  Result<ReadStats> WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out, std::span<const uint32_t> out_rows);
  // A probe read (SubmitProbeKeys) as its records are stored, not decoded: n_matched records of
  // RecordBytes(ProbeEncoding(options()), probe_kv_heads.size(), head_dim) bytes into
  // records_out, in position order (for scoring straight from int8/int4 codes).
  Result<ReadStats> WaitProbeRecords(ReadTicket t, uint8_t* records_out);

  // Stores KV for tokens [start, tokens.size()) of the sequence `tokens`; layers[il] holds them.
  // Tokens the tree already has are skipped. The new chunks also enter the memory tiers while
  // they have room (options().admit_on_insert). Fails (nothing visible) if [0, start) is no longer
  // cached, the SSD budget cannot be met by evicting unlocked leaves, or a write fails.
  // With a team tier, the new KV is then published in the background (from the span boundary at
  // or before `start`; the rows before `start` are read back from this store), unless `io` says not.
  Result<InsertSummary> Insert(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                               const InsertOptions& io = {});

  // The team tier's longest prefix of `tokens` past the local match, read (every value verified)
  // and inserted here, so the local tiers admit it by their policy and the next Match finds it.
  // Asks the team tier only when it could add whole spans. Never fails (TeamFill::status says why
  // it stopped short); with no team tier it does nothing. With TeamOptions::selective nothing is
  // read yet: the team's prefix is staged for the next Match (TeamFill::n_remote).
  TeamFill FillFromTeam(std::span<const Token> tokens);
  // Until everything inserted so far is published (or given up), or the timeout; true when done.
  bool WaitTeamPublished(std::chrono::milliseconds timeout);
  // Publishes the cached prefix of `tokens` (read back from this store, with its write order) to
  // the team tier in the background: a prefix cached before the team tier was configured. Returns
  // the tokens handed to the publisher (0: nothing of `tokens` cached here); kInvalidArgument when
  // the store has no team tier to publish to, kResourceExhausted when the publisher's queue has no
  // room.
  Result<uint64_t> PublishCached(std::span<const Token> tokens);

  // The pipeline's verdict for layer il: `selected` positions (< n_matched) were important;
  // `scores` (same length, optional) weights them (default 1). Feeds the tier policy and the
  // reorder of layer il (each layer keeps its own importance statistics and mapping list).
  Status ReportImportance(const MatchHandle& h, int il, std::span<const uint32_t> selected,
                          std::span<const float> scores = {});

  StoreStats Stats();
  Result<ReorderReport> ReorderNow();
  // Evicts up to n unlocked leaf nodes (least recently used first); returns how many went.
  Result<uint64_t> EvictNodes(uint64_t n);
  std::vector<TierMove> SetTierBudget(Tier tier, uint64_t bytes);
  Status SetSsdBudget(uint64_t bytes);  // shrinking evicts leaves until it fits
  void SetPolicy(PolicyKind kind);
  // The background reorder's period from now on (0: only ReorderNow); the next pass comes one
  // new interval after the call.
  void SetReorderInterval(std::chrono::milliseconds interval);
  Status Flush();  // persists statistics now

  // ---- Inspection and administration (GUI). All of them only see this model's namespace.
  // A copy of the radix tree, pre-order, at most max_nodes nodes. Read-only: touches no
  // statistic, hit counter or tier.
  TreeSnapshot SnapshotTree(size_t max_nodes = 4096);
  // Tier residency of the longest cached prefix of `tokens`. Read-only: no lock, no hit, no
  // LRU/LFU or importance update, no tier move.
  PrefixResidency Residency(std::span<const Token> tokens);
  // Pins every node on the cached path of `tokens` (a node the query ends inside is pinned
  // whole): never evicted (SSD budget, EvictNodes, DropFrom refuse it) and ranked above every
  // unpinned chunk in the device/host tiers while it fits. Persisted. NotFound if nothing of
  // `tokens` is cached.
  Status Pin(std::span<const Token> tokens);
  // Unpins the cached path of `tokens` from its deepest node up, stopping at a node another
  // pinned path still needs (pins are closed upwards: KV is useless without its prefix).
  // NotFound if nothing of `tokens` is cached.
  Status Unpin(std::span<const Token> tokens);
  // Drops the cached KV of `tokens`' path from position `begin` on, and every cached sequence
  // that extends tokens[0, begin] (the subtree): the node holding `begin` keeps [0, begin), its
  // tail and subtree are evicted (extents freed, catalog rows removed, tier copies dropped).
  // Returns the tokens dropped (0 when position `begin` of `tokens` is not cached). Refuses,
  // dropping nothing: ResourceExhausted when a request in flight holds a node of that subtree
  // (retry after it finishes), InvalidArgument when a node there is pinned (unpin first).
  Result<uint64_t> DropFrom(std::span<const Token> tokens, uint64_t begin);

  // The options as opened (SetSsdBudget changes the budget Stats().ssd_cap_bytes reports, not these).
  const PrefixStoreOptions& options() const;
  // What Open repaired (constant after Open).
  const RecoveryStats& recovery() const;
  // For tests: checks tree, tier and catalog agree; every chunk is readable and verified.
  Status CheckConsistency();

  struct Impl;

 private:
  explicit PrefixStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace impress::store
