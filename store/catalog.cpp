#include "store/catalog.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "base/sqlite.h"

namespace impress::store {

using sqlite::SqliteDb;
using sqlite::Stmt;
using sqlite::Txn;

namespace {

const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, segment INTEGER NOT NULL,
  seg_begin INTEGER NOT NULL, tokens BLOB NOT NULL, last_access INTEGER NOT NULL, user_data INTEGER NOT NULL,
  pinned INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS segments(id INTEGER PRIMARY KEY, n_tokens INTEGER NOT NULL, generation INTEGER NOT NULL,
  mapping BLOB, imp_sum BLOB, imp_count BLOB);
CREATE TABLE IF NOT EXISTS chunks(segment INTEGER NOT NULL, layer INTEGER NOT NULL, idx INTEGER NOT NULL,
  generation INTEGER NOT NULL, file INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
  slot_begin INTEGER NOT NULL, n_slots INTEGER NOT NULL, checksum INTEGER NOT NULL, block_sums BLOB NOT NULL,
  freq REAL NOT NULL, imp_ratio REAL NOT NULL, n_reports INTEGER NOT NULL, PRIMARY KEY(segment, layer, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS probes(segment INTEGER NOT NULL, layer INTEGER NOT NULL, file INTEGER NOT NULL,
  offset INTEGER NOT NULL, length INTEGER NOT NULL, n_slots INTEGER NOT NULL, checksum INTEGER NOT NULL,
  block_sums BLOB NOT NULL, PRIMARY KEY(segment, layer)) WITHOUT ROWID;
)";

// The extent columns of the chunks and probes tables from column `col` on: file, offset, length,
// slot_begin (chunks only), n_slots, checksum, block_sums.
ChunkExtent ExtentColumns(const Stmt& s, int col, bool with_slot_begin) {
  ChunkExtent e;
  e.file = uint32_t(s.Int(col++));
  e.offset = uint64_t(s.Int(col++));
  e.length = uint32_t(s.Int(col++));
  if (with_slot_begin) e.slot_begin = uint32_t(s.Int(col++));
  e.n_slots = uint32_t(s.Int(col++));
  e.checksum = uint64_t(s.Int(col++));
  e.block_sums = s.Blob<uint64_t>(col);
  return e;
}

void BindExtent(Stmt& s, int col, const ChunkExtent& e, bool with_slot_begin) {
  s.Bind(col++, int64_t(e.file));
  s.Bind(col++, int64_t(e.offset));
  s.Bind(col++, int64_t(e.length));
  if (with_slot_begin) s.Bind(col++, int64_t(e.slot_begin));
  s.Bind(col++, int64_t(e.n_slots));
  s.Bind(col++, int64_t(e.checksum));
  s.BindVector(col, e.block_sums);
}

}  // namespace

Catalog::Catalog(std::unique_ptr<SqliteDb> db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}

Catalog::~Catalog() = default;

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& path, const std::string& fingerprint,
                                               const std::string& geometry, bool* fresh, std::string* why) {
  *fresh = false;
  why->clear();
  auto opened = SqliteDb::Open(path, /*create=*/true);
  if (!opened.ok()) return opened.status().WithContext("store catalog");
  auto c = std::unique_ptr<Catalog>(new Catalog(std::move(opened).value(), path));
  MutexLock lk(&c->mu_);
  SqliteDb& db = *c->db_;
  IMPRESS_RETURN_IF_ERROR(db.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=128; "
                                  "PRAGMA journal_size_limit=524288;",
                                  "setting up the catalog"));
  Status st = db.Exec(kSchema, "creating the catalog tables");
  if (!st.ok()) return Status::Corruption(path + ": not a usable catalog (" + st.message() + ")");
  {
    Txn t(db);
    IMPRESS_RETURN_IF_ERROR(t.Begin("catalog migration"));
    IMPRESS_RETURN_IF_ERROR(c->MigrateLocked());
    IMPRESS_RETURN_IF_ERROR(t.Commit("catalog migration"));
  }
  IMPRESS_ASSIGN_OR_RETURN(*why, c->ForeignReasonLocked(fingerprint, geometry, fresh));
  if (*fresh) IMPRESS_RETURN_IF_ERROR(c->ResetLocked(fingerprint, geometry));
  return c;
}

// *fresh when the meta table is empty (a new catalog) or names another model, format version or
// geometry; then returns why (empty for a new catalog).
Result<std::string> Catalog::ForeignReasonLocked(const std::string& fingerprint, const std::string& geometry, bool* fresh) {
  const std::string version = std::to_string(kFormatVersion);
  std::unordered_map<std::string, std::string> meta;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT key, value FROM meta"));
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "reading the catalog's meta table",
                                            [&meta](const Stmt& row) { meta[row.Text(0)] = row.Text(1); }));
  }
  if (meta.empty()) {
    *fresh = true;
    return std::string();
  }
  if (meta["fingerprint"] == fingerprint && meta["format_version"] == version && meta["geometry"] == geometry)
    return std::string();
  *fresh = true;
  if (meta["fingerprint"] != fingerprint)
    return "catalog was made for another model (fingerprint " + meta["fingerprint"].substr(0, 16) + ", now " +
           fingerprint.substr(0, 16) + ")";
  if (meta["format_version"] != version)
    return "catalog has format version " + meta["format_version"] + ", this build writes " + version;
  return "catalog geometry " + meta["geometry"] + " differs from " + geometry;
}

// Empties every table and writes the meta rows of this model, format and geometry.
Status Catalog::ResetLocked(const std::string& fingerprint, const std::string& geometry) {
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin("catalog reset"));
  IMPRESS_RETURN_IF_ERROR(db_->Exec("DELETE FROM chunks; DELETE FROM probes; DELETE FROM nodes; DELETE FROM segments; DELETE FROM meta;",
                                    "catalog reset"));
  for (auto [k, v] : {std::pair<const char*, std::string>{"fingerprint", fingerprint},
                      {"format_version", std::to_string(kFormatVersion)}, {"geometry", geometry},
                      {"schema_version", std::to_string(kCatalogSchemaVersion)}}) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO meta(key, value) VALUES(?, ?)"));
    s.Bind(1, std::string_view(k));
    s.Bind(2, std::string_view(v));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "insert meta"));
  }
  return t.Commit("catalog reset");
}

Status Catalog::MigrateLocked() {
  // Which columns does `nodes` have? (CREATE TABLE IF NOT EXISTS leaves an old table as it was.)
  bool has_pinned = false, has_hits = false;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("PRAGMA table_info(nodes)"));
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "read the nodes table layout", [&](const Stmt& row) {
      const std::string name = row.Text(1);
      if (name == "pinned") has_pinned = true;
      if (name == "hits") has_hits = true;
    }));
  }
  // The statement is reset when QueryText returns: none may be active during ALTER TABLE.
  IMPRESS_ASSIGN_OR_RETURN(auto from_text, db_->QueryText("SELECT value FROM meta WHERE key = 'schema_version'",
                                                          "read the schema version"));
  const long from = from_text ? std::strtol(from_text->c_str(), nullptr, 10) : 0;
  if (!has_pinned)
    IMPRESS_RETURN_IF_ERROR(db_->Exec("ALTER TABLE nodes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0", "add nodes.pinned"));
  if (!has_hits) IMPRESS_RETURN_IF_ERROR(db_->Exec("ALTER TABLE nodes ADD COLUMN hits INTEGER NOT NULL DEFAULT 0", "add nodes.hits"));
  if (!has_pinned || !has_hits)
    spdlog::info("store: catalog {} migrated from schema {} to {} (nodes.pinned, nodes.hits added)", path_,
                 from ? from : 1, kCatalogSchemaVersion);
  // Record the version unless the meta table is empty (a fresh catalog; Open fills it).
  const std::string version = std::to_string(kCatalogSchemaVersion);
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("UPDATE meta SET value = ? WHERE key = 'schema_version'"));
    s.Bind(1, std::string_view(version));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "update schema version"));
  }
  if (db_->Changes() != 0) return Status::Ok();
  IMPRESS_ASSIGN_OR_RETURN(int64_t n_meta, db_->QueryInt("SELECT COUNT(*) FROM meta", "count meta rows"));
  if (n_meta == 0) return Status::Ok();
  IMPRESS_ASSIGN_OR_RETURN(Stmt ins, db_->Prep("INSERT INTO meta(key, value) VALUES('schema_version', ?)"));
  ins.Bind(1, std::string_view(version));
  return db_->Run(ins, "insert schema version");
}

// ==================================================================== load

Result<CatalogContents> Catalog::Load() {
  MutexLock lk(&mu_);
  CatalogContents out;
  IMPRESS_RETURN_IF_ERROR(LoadNodesLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadSegmentsLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadChunksLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadProbesLocked(&out));
  return out;
}

Status Catalog::LoadNodesLocked(CatalogContents* out) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db_->Prep("SELECT id, parent, segment, seg_begin, tokens, last_access, user_data, "
                                             "pinned, hits FROM nodes ORDER BY id"));
  return db_->ForEachRow(stmt, "read nodes", [out](const Stmt& s) {
    NodeRecord n;
    n.id = uint64_t(s.Int(0));
    n.parent = uint64_t(s.Int(1));
    n.segment = uint64_t(s.Int(2));
    n.seg_begin = uint64_t(s.Int(3));
    n.tokens = s.Blob<Token>(4);
    n.last_access = uint64_t(s.Int(5));
    n.user_data = uint64_t(s.Int(6));
    n.pinned = s.Int(7) != 0;
    n.hits = uint64_t(s.Int(8));
    out->nodes.push_back(std::move(n));
  });
}

Status Catalog::LoadSegmentsLocked(CatalogContents* out) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db_->Prep("SELECT id, n_tokens, generation, mapping, imp_sum, imp_count FROM segments ORDER BY id"));
  return db_->ForEachRow(stmt, "read segments", [out](const Stmt& s) {
    SegmentRow g;
    g.id = uint64_t(s.Int(0));
    g.n_tokens = uint32_t(s.Int(1));
    g.generation = uint64_t(s.Int(2));
    g.mapping = s.Blob<uint32_t>(3);
    g.imp_sum = s.Blob<float>(4);
    g.imp_count = s.Blob<uint32_t>(5);
    out->segments.push_back(std::move(g));
  });
}

Status Catalog::LoadChunksLocked(CatalogContents* out) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db_->Prep("SELECT segment, layer, idx, generation, file, offset, length, slot_begin, n_slots, "
                                             "checksum, block_sums, freq, imp_ratio, n_reports FROM chunks ORDER BY segment, layer, idx"));
  return db_->ForEachRow(stmt, "read chunks", [out](const Stmt& s) {
    ChunkRow c;
    c.segment = uint64_t(s.Int(0));
    c.layer = uint32_t(s.Int(1));
    c.index = uint32_t(s.Int(2));
    c.generation = uint64_t(s.Int(3));
    c.ext = ExtentColumns(s, 4, /*with_slot_begin=*/true);
    c.freq = s.Double(11);
    c.imp_ratio = s.Double(12);
    c.n_reports = uint64_t(s.Int(13));
    out->chunks.push_back(std::move(c));
  });
}

Status Catalog::LoadProbesLocked(CatalogContents* out) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db_->Prep("SELECT segment, layer, file, offset, length, n_slots, checksum, block_sums FROM probes"));
  return db_->ForEachRow(stmt, "read probes", [out](const Stmt& s) {
    ProbeRow p;
    p.segment = uint64_t(s.Int(0));
    p.layer = uint32_t(s.Int(1));
    p.ext = ExtentColumns(s, 2, /*with_slot_begin=*/false);
    out->probes.push_back(std::move(p));
  });
}

// ==================================================================== apply

Status Catalog::Apply(const CatalogBatch& b) {
  if (b.empty()) return Status::Ok();
  MutexLock lk(&mu_);
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin("catalog batch"));
  IMPRESS_RETURN_IF_ERROR(ApplyLocked(b));
  return t.Commit("catalog batch");
}

Status Catalog::ApplyLocked(const CatalogBatch& b) {
  IMPRESS_RETURN_IF_ERROR(DeleteLocked(b));
  for (const auto& n : b.upsert_nodes) IMPRESS_RETURN_IF_ERROR(UpsertNodeLocked(n));
  for (const auto& g : b.upsert_segments) IMPRESS_RETURN_IF_ERROR(UpsertSegmentLocked(g));
  for (const auto& c : b.upsert_chunks) IMPRESS_RETURN_IF_ERROR(UpsertChunkLocked(c));
  for (const auto& p : b.upsert_probes) IMPRESS_RETURN_IF_ERROR(UpsertProbeLocked(p));
  return SaveStatsLocked(b);
}

Status Catalog::DeleteLocked(const CatalogBatch& b) {
  auto run1 = [this](const char* sql, uint64_t a) REQUIRES(mu_) -> Status {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep(sql));
    s.Bind(1, int64_t(a));
    return db_->Run(s, sql);
  };
  for (NodeId id : b.delete_nodes) IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM nodes WHERE id = ?", id));
  for (uint64_t g : b.delete_segments) {
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM segments WHERE id = ?", g));
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM chunks WHERE segment = ?", g));
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM probes WHERE segment = ?", g));
  }
  for (uint64_t g : b.delete_segment_chunks) IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM chunks WHERE segment = ?", g));
  for (auto [g, l, i] : b.delete_chunks) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM chunks WHERE segment = ? AND layer = ? AND idx = ?"));
    s.Bind(1, int64_t(g));
    s.Bind(2, int64_t(l));
    s.Bind(3, int64_t(i));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "delete chunk"));
  }
  return Status::Ok();
}

Status Catalog::UpsertNodeLocked(const NodeRecord& n) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT OR REPLACE INTO nodes(id, parent, segment, seg_begin, tokens, "
                                             "last_access, user_data, pinned, hits) VALUES(?,?,?,?,?,?,?,?,?)"));
  s.Bind(1, int64_t(n.id));
  s.Bind(2, int64_t(n.parent));
  s.Bind(3, int64_t(n.segment));
  s.Bind(4, int64_t(n.seg_begin));
  s.BindVector(5, n.tokens);
  s.Bind(6, int64_t(n.last_access));
  s.Bind(7, int64_t(n.user_data));
  s.Bind(8, int64_t(n.pinned ? 1 : 0));
  s.Bind(9, int64_t(n.hits));
  return db_->Run(s, "upsert node");
}

Status Catalog::UpsertSegmentLocked(const SegmentRow& g) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT OR REPLACE INTO segments(id, n_tokens, generation, mapping, "
                                             "imp_sum, imp_count) VALUES(?,?,?,?,?,?)"));
  s.Bind(1, int64_t(g.id));
  s.Bind(2, int64_t(g.n_tokens));
  s.Bind(3, int64_t(g.generation));
  s.BindVector(4, g.mapping);
  s.BindVector(5, g.imp_sum);
  s.BindVector(6, g.imp_count);
  return db_->Run(s, "upsert segment");
}

Status Catalog::UpsertChunkLocked(const ChunkRow& c) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT OR REPLACE INTO chunks(segment, layer, idx, generation, file, "
                                             "offset, length, slot_begin, n_slots, checksum, block_sums, freq, "
                                             "imp_ratio, n_reports) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  s.Bind(1, int64_t(c.segment));
  s.Bind(2, int64_t(c.layer));
  s.Bind(3, int64_t(c.index));
  s.Bind(4, int64_t(c.generation));
  BindExtent(s, 5, c.ext, /*with_slot_begin=*/true);
  s.Bind(12, c.freq);
  s.Bind(13, c.imp_ratio);
  s.Bind(14, int64_t(c.n_reports));
  return db_->Run(s, "upsert chunk");
}

Status Catalog::UpsertProbeLocked(const ProbeRow& p) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT OR REPLACE INTO probes(segment, layer, file, offset, length, "
                                             "n_slots, checksum, block_sums) VALUES(?,?,?,?,?,?,?,?)"));
  s.Bind(1, int64_t(p.segment));
  s.Bind(2, int64_t(p.layer));
  BindExtent(s, 3, p.ext, /*with_slot_begin=*/false);
  return db_->Run(s, "upsert probe");
}

// Statistics only: chunk frequency / importance, node last access / hits.
Status Catalog::SaveStatsLocked(const CatalogBatch& b) {
  for (const auto& c : b.chunk_stats) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("UPDATE chunks SET freq = ?, imp_ratio = ?, n_reports = ? "
                                               "WHERE segment = ? AND layer = ? AND idx = ?"));
    s.Bind(1, c.freq);
    s.Bind(2, c.imp_ratio);
    s.Bind(3, int64_t(c.n_reports));
    s.Bind(4, int64_t(c.segment));
    s.Bind(5, int64_t(c.layer));
    s.Bind(6, int64_t(c.index));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "save chunk stats"));
  }
  for (const auto& n : b.node_stats) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("UPDATE nodes SET last_access = ?, hits = ? WHERE id = ?"));
    s.Bind(1, int64_t(n.last_access));
    s.Bind(2, int64_t(n.hits));
    s.Bind(3, int64_t(n.id));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "save node stats"));
  }
  return Status::Ok();
}

uint64_t Catalog::FileBytes() const {
  uint64_t t = 0;
  struct stat st;
  for (const std::string& p : {path_, path_ + "-wal", path_ + "-shm"})
    if (::stat(p.c_str(), &st) == 0) t += uint64_t(st.st_size);
  return t;
}

}  // namespace impress::store
