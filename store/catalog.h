// Catalog: the store's SQLite database (WAL mode, synchronous=FULL, prepared statements).
//
// Tables: meta (schema version); models (every model key that used the store, with the time it
// last opened it); nodes (the radix tree's rows: id, parent, KV segment, segment offset, token
// span, last access, pinned, hits, model); segments (one per insert: token count, layout
// generation, per-layer mapping lists slot -> original segment offset, per-(layer, token)
// importance sums and counts, model); chunks (segment, layer, index -> data file, offset, length,
// checksums, generation, access frequency, important ratio); probes (segment, layer -> extent).
// Every change goes through Apply(), one transaction, so a crash leaves the old or the new state.
//
// Models side by side: nodes and segments carry the model key (fingerprint, KV geometry and chunk
// format) of the model that wrote them. A Catalog is opened for one model key: Load() returns
// that model's rows, and of every other model only what the store needs to keep its data safe
// and to evict it under the shared SSD budget (ForeignContents). Nothing is wiped when another
// model opens the store; ids (node and segment) are unique across models.
//
// Nothing read is trusted: every row is checked against the limits below before use; a row that
// fails is deleted with a counted warning (never a crash or a huge allocation). A catalog written
// by a newer build (schema_version above kCatalogSchemaVersion) is refused with kUnsupported and
// left unchanged; a file shown not to be a usable catalog gives kCorruption (the store moves it
// aside); an error of the moment (locked, I/O, disk full) is never taken for corruption.
// The table layout has its own schema version (meta key schema_version, absent = 1): an older
// layout is migrated in place on open (2: nodes.pinned and nodes.hits; 3: the model columns, rows
// of a schema-2 catalog belong to the model its meta rows named), keeping every row.
//
// All SQL goes through the project's SQLite helper (base/sqlite.h).
//
// Internally synchronized (a mutex = the one writer); any thread may call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "store/chunk-format.h"
#include "store/radix-tree.h"

namespace impress::sqlite {
class SqliteDb;
}

namespace impress::store {

struct SegmentRow {
  uint64_t id = 0;
  uint32_t n_tokens = 0;    // tokens written in the segment
  uint64_t generation = 0;  // bumped by each reorder
  // Layer-major, n_layer * n_tokens each: [layer * n_tokens + i].
  std::vector<uint32_t> mapping;    // [layer][slot] -> original segment offset; empty = identity for all layers
  std::vector<float> imp_sum;       // [layer][original offset]: summed importance reports
  std::vector<uint32_t> imp_count;  // [layer][original offset]: number of reports
};

struct ChunkRow {
  uint64_t segment = 0;
  uint32_t layer = 0;
  uint32_t index = 0;
  uint64_t generation = 0;
  ChunkExtent ext;
  double freq = 0;
  double imp_ratio = 1.0;
  uint64_t n_reports = 0;
};

struct ProbeRow {
  uint64_t segment = 0;
  uint32_t layer = 0;
  ChunkExtent ext;
};

// Another model's node, as much as eviction under the shared budget needs.
struct ForeignNode {
  NodeId id = kNoNode;
  NodeId parent = kNoNode;
  uint64_t segment = 0;
  uint64_t last_access = 0;  // that model's logical clock
  bool pinned = false;
  std::string model;
};

// One extent of another model's segment (a chunk or its probe keys).
struct ForeignExtent {
  uint64_t segment = 0;
  uint32_t layer = 0;
  uint32_t index = 0;  // chunk index; UINT32_MAX for probe keys
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct ForeignContents {
  std::vector<ForeignNode> nodes;
  std::vector<uint64_t> segments;  // segment ids
  std::vector<ForeignExtent> extents;
  std::vector<std::pair<std::string, int64_t>> models;  // model key -> last opened (unix seconds)
  uint64_t max_id = 0;                                  // largest node or segment id any model used
};

struct CatalogContents {
  std::vector<NodeRecord> nodes;
  std::vector<SegmentRow> segments;  // and chunk / probe rows naming no segment at all (to drop)
  std::vector<ChunkRow> chunks;
  std::vector<ProbeRow> probes;
  ForeignContents foreign;
  uint64_t n_invalid_rows = 0;  // rows that failed validation and were deleted
};

// Limits a valid row stays within (anything beyond is a damaged or hostile catalog).
inline constexpr uint64_t kMaxCatalogId = 1ull << 48;      // node and segment ids
inline constexpr uint64_t kMaxSegmentTokens = 1ull << 24;  // tokens of one insert
inline constexpr uint64_t kMaxDataFileId = 1ull << 20;
inline constexpr uint64_t kMaxExtentOffset = 1ull << 50;
inline constexpr uint64_t kMaxExtentLength = 1ull << 31;
inline constexpr uint64_t kMaxCatalogLayers = 1024;

// One transaction's worth of changes, applied in this order: deletions, then upserts.
struct CatalogBatch {
  std::vector<NodeId> delete_nodes;
  std::vector<uint64_t> delete_segments;                                // with their chunks and probes
  std::vector<uint64_t> delete_segment_chunks;                          // all chunk rows of these segments (reorder)
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> delete_chunks;  // (segment, layer, index)
  std::vector<NodeRecord> upsert_nodes;
  std::vector<SegmentRow> upsert_segments;
  std::vector<ChunkRow> upsert_chunks;
  std::vector<ProbeRow> upsert_probes;
  std::vector<ChunkRow> chunk_stats;   // only freq / imp_ratio / n_reports are written
  std::vector<NodeRecord> node_stats;  // only last_access / hits are written (id names the row)
  bool empty() const {
    return delete_nodes.empty() && delete_segments.empty() && delete_segment_chunks.empty() && delete_chunks.empty() &&
           upsert_nodes.empty() && upsert_segments.empty() && upsert_chunks.empty() && upsert_probes.empty() &&
           chunk_stats.empty() && node_stats.empty();
  }
};

// The table layout this build writes (meta key schema_version; independent of the chunk format).
inline constexpr int kCatalogSchemaVersion = 3;

struct CatalogOpenOptions {
  // How long a statement waits for another connection's lock before failing (SQLITE_BUSY).
  std::chrono::milliseconds busy_timeout = std::chrono::seconds(5);
  // Open an existing catalog for reading only (its directory cannot be written): nothing is
  // created, migrated or recorded, Apply() refuses, and a catalog of an older layout is
  // kUnsupported (it would need an upgrade written first).
  bool read_only = false;
};

class Catalog {
 public:
  // Opens (creating it if missing) the catalog for model key `model`. kUnsupported for a newer
  // schema (file unchanged); kCorruption only when the file is shown unusable (SQLite reports it
  // corrupt or not a database, quick_check finds damage, or its tables have another layout);
  // kIOError / kResourceExhausted for errors of the moment (another connection's lock, I/O error,
  // disk full, no permission), which say nothing about the file (sqlite::IsTransient).
  static Result<std::unique_ptr<Catalog>> Open(const std::string& path, const std::string& model,
                                               const CatalogOpenOptions& o = {});
  // The same over a connection already open (Open's checks, creation and migrations run on it;
  // its path() names it in messages): e.g. a database image loaded in memory
  // (sqlite::SqliteDb::OpenImage), which the catalog fuzzer checks without a file per input.
  static Result<std::unique_ptr<Catalog>> OpenOn(std::unique_ptr<sqlite::SqliteDb> db, const std::string& model,
                                                 const CatalogOpenOptions& o = {});
  ~Catalog();

  // This model's rows and the other models' summary; rows failing validation are deleted first.
  Result<CatalogContents> Load();
  Status Apply(const CatalogBatch& b);
  uint64_t FileBytes() const;  // catalog + WAL + shm on disk
  const std::string& path() const { return path_; }

 private:
  Catalog(std::unique_ptr<sqlite::SqliteDb> db, std::string path, std::string model, bool read_only);
  Status QuickCheckLocked() REQUIRES(mu_);           // SQLite's page-level check of the whole file
  Status MigratePinsLocked() REQUIRES(mu_);          // schema 1 -> 2
  Status MigrateModelColumnsLocked() REQUIRES(mu_);  // schema 2 -> 3
  Status LoadForeignLocked(CatalogContents* out) REQUIRES(mu_);
  Status DeleteInvalidLocked() REQUIRES(mu_);
  Status LoadNodesLocked(CatalogContents* out) REQUIRES(mu_);
  Status LoadSegmentsLocked(CatalogContents* out) REQUIRES(mu_);
  Status LoadChunksLocked(CatalogContents* out) REQUIRES(mu_);
  Status LoadProbesLocked(CatalogContents* out) REQUIRES(mu_);
  Status ApplyLocked(const CatalogBatch& b) REQUIRES(mu_);
  Status DeleteLocked(const CatalogBatch& b) REQUIRES(mu_);
  Status UpsertNodeLocked(const NodeRecord& n) REQUIRES(mu_);
  Status UpsertSegmentLocked(const SegmentRow& g) REQUIRES(mu_);
  Status UpsertChunkLocked(const ChunkRow& c) REQUIRES(mu_);
  Status UpsertProbeLocked(const ProbeRow& p) REQUIRES(mu_);
  Status SaveStatsLocked(const CatalogBatch& b) REQUIRES(mu_);

  Mutex mu_;
  const std::unique_ptr<sqlite::SqliteDb> db_ PT_GUARDED_BY(mu_);
  const std::string path_;
  const std::string model_;
  const bool read_only_;
  // Raw keys of rows that failed validation during a Load, deleted at its end.
  std::vector<int64_t> bad_nodes_ GUARDED_BY(mu_), bad_segments_ GUARDED_BY(mu_);
  std::vector<std::array<int64_t, 3>> bad_chunks_ GUARDED_BY(mu_);
  std::vector<std::array<int64_t, 2>> bad_probes_ GUARDED_BY(mu_);
};

}  // namespace impress::store
