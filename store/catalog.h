// Catalog: the store's SQLite database (WAL mode, synchronous=FULL, prepared statements).
//
// Tables: meta (model fingerprint, format version, KV geometry, schema version); nodes (the radix
// tree's rows: id, parent, KV segment, segment offset, token span, last access, pinned, hits); segments (one per insert:
// token count, layout generation, per-layer mapping lists slot -> original segment offset, and
// per-(layer, token) importance sums and counts; format version 2); chunks (segment, layer, index -> data file, offset, length,
// checksums, generation, access frequency, important ratio); probes (segment, layer -> extent).
// Every change goes through Apply(), one transaction, so a crash leaves the old or the new state.
// Opening a catalog made for another model, format version or geometry discards its rows (a
// fresh namespace) and says why. The table layout has its own schema version (meta key
// schema_version, absent = 1): an older layout is migrated in place on open (schema 2 added
// nodes.pinned and nodes.hits), keeping every row.
//
// All SQL goes through the project's SQLite helper (base/sqlite.h).
//
// Internally synchronized (a mutex = the one writer); any thread may call.
#pragma once

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
  uint32_t n_tokens = 0;          // tokens written in the segment
  uint64_t generation = 0;        // bumped by each reorder
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

struct CatalogContents {
  std::vector<NodeRecord> nodes;
  std::vector<SegmentRow> segments;
  std::vector<ChunkRow> chunks;
  std::vector<ProbeRow> probes;
};

// One transaction's worth of changes, applied in this order: deletions, then upserts.
struct CatalogBatch {
  std::vector<NodeId> delete_nodes;
  std::vector<uint64_t> delete_segments;        // with their chunks and probes
  std::vector<uint64_t> delete_segment_chunks;  // all chunk rows of these segments (reorder)
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> delete_chunks;  // (segment, layer, index)
  std::vector<NodeRecord> upsert_nodes;
  std::vector<SegmentRow> upsert_segments;
  std::vector<ChunkRow> upsert_chunks;
  std::vector<ProbeRow> upsert_probes;
  std::vector<ChunkRow> chunk_stats;            // only freq / imp_ratio / n_reports are written
  std::vector<NodeRecord> node_stats;           // only last_access / hits are written (id names the row)
  bool empty() const {
    return delete_nodes.empty() && delete_segments.empty() && delete_segment_chunks.empty() &&
           delete_chunks.empty() && upsert_nodes.empty() && upsert_segments.empty() &&
           upsert_chunks.empty() && upsert_probes.empty() && chunk_stats.empty() && node_stats.empty();
  }
};

// The table layout this build writes (meta key schema_version; independent of the chunk format).
inline constexpr int kCatalogSchemaVersion = 2;

class Catalog {
 public:
  // *fresh: the catalog is new or was wiped; *why: the reason it was wiped (empty if new).
  static Result<std::unique_ptr<Catalog>> Open(const std::string& path, const std::string& fingerprint,
                                               const std::string& geometry, bool* fresh, std::string* why);
  ~Catalog();

  Result<CatalogContents> Load();
  Status Apply(const CatalogBatch& b);
  uint64_t FileBytes() const;  // catalog + WAL + shm on disk
  const std::string& path() const { return path_; }

 private:
  Catalog(std::unique_ptr<sqlite::SqliteDb> db, std::string path);
  // Why a catalog's rows cannot be reused (another model, format or geometry); empty if they can.
  Result<std::string> ForeignReasonLocked(const std::string& fingerprint, const std::string& geometry, bool* fresh)
      REQUIRES(mu_);
  Status ResetLocked(const std::string& fingerprint, const std::string& geometry) REQUIRES(mu_);
  Status MigrateLocked() REQUIRES(mu_);  // brings an older table layout up to kCatalogSchemaVersion
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
};

}  // namespace impress::store
