#include "store/catalog.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstring>

namespace impress::store {

namespace {

template <class T>
std::vector<T> BlobTo(sqlite3_stmt* s, int col) {
  const void* p = sqlite3_column_blob(s, col);
  int n = sqlite3_column_bytes(s, col);
  std::vector<T> v(size_t(n) / sizeof(T));
  if (p && !v.empty()) std::memcpy(v.data(), p, v.size() * sizeof(T));
  return v;
}

template <class T>
int BindVec(sqlite3_stmt* s, int col, const std::vector<T>& v) {
  if (v.empty()) return sqlite3_bind_zeroblob(s, col, 0);
  return sqlite3_bind_blob(s, col, v.data(), int(v.size() * sizeof(T)), SQLITE_TRANSIENT);
}

// Rolls back unless Commit() ran.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) { ok_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK; }
  ~Txn() {
    if (ok_ && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  bool began() const { return ok_; }
  bool Commit() {
    done_ = true;
    return sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
  }

 private:
  sqlite3* db_;
  bool ok_ = false, done_ = false;
};

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

}  // namespace

Status Catalog::Err(const char* what) {
  return Status::IOError(path_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

Status Catalog::Exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : "?";
    sqlite3_free(msg);
    return Status::IOError(path_ + ": " + m);
  }
  return Status::Ok();
}

Result<sqlite3_stmt*> Catalog::Prep(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) {
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) return Err("prepare");
  stmts_[sql] = s;
  return s;
}

Catalog::~Catalog() {
  for (auto& [k, s] : stmts_) sqlite3_finalize(s);
  sqlite3_close(db_);
}

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& path, const std::string& fingerprint,
                                               const std::string& geometry, bool* fresh, std::string* why) {
  *fresh = false;
  why->clear();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IOError(path + ": cannot open catalog: " + m);
  }
  auto c = std::unique_ptr<Catalog>(new Catalog(db, path));
  sqlite3_busy_timeout(db, 5000);
  IMPRESS_RETURN_IF_ERROR(c->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=128; PRAGMA journal_size_limit=524288;"));
  Status st = c->Exec(kSchema);
  if (!st.ok()) return Status::Corruption(path + ": not a usable catalog (" + st.message() + ")");
  {
    Txn t(db);
    if (!t.began()) return c->Err("begin");
    IMPRESS_RETURN_IF_ERROR(c->MigrateLocked());
    if (!t.Commit()) return c->Err("commit");
  }
  const std::string version = std::to_string(kFormatVersion);
  std::unordered_map<std::string, std::string> meta;
  {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, c->Prep("SELECT key, value FROM meta"));
    while (sqlite3_step(s) == SQLITE_ROW)
      meta[reinterpret_cast<const char*>(sqlite3_column_text(s, 0))] = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
  }
  if (meta.empty()) {
    *fresh = true;
  } else if (meta["fingerprint"] != fingerprint || meta["format_version"] != version || meta["geometry"] != geometry) {
    *fresh = true;
    if (meta["fingerprint"] != fingerprint)
      *why = "catalog was made for another model (fingerprint " + meta["fingerprint"].substr(0, 16) + ", now " +
             fingerprint.substr(0, 16) + ")";
    else if (meta["format_version"] != version)
      *why = "catalog has format version " + meta["format_version"] + ", this build writes " + version;
    else
      *why = "catalog geometry " + meta["geometry"] + " differs from " + geometry;
  }
  if (*fresh) {
    Txn t(db);
    if (!t.began()) return c->Err("begin");
    IMPRESS_RETURN_IF_ERROR(c->Exec("DELETE FROM chunks; DELETE FROM probes; DELETE FROM nodes; DELETE FROM segments; DELETE FROM meta;"));
    for (auto [k, v] : {std::pair<const char*, std::string>{"fingerprint", fingerprint},
                        {"format_version", version}, {"geometry", geometry},
                        {"schema_version", std::to_string(kCatalogSchemaVersion)}}) {
      IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, c->Prep("INSERT INTO meta(key, value) VALUES(?, ?)"));
      sqlite3_bind_text(s, 1, k, -1, SQLITE_STATIC);
      sqlite3_bind_text(s, 2, v.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s) != SQLITE_DONE) return c->Err("insert meta");
    }
    if (!t.Commit()) return c->Err("commit");
  }
  return c;
}

Status Catalog::MigrateLocked() {
  // Which columns does `nodes` have? (CREATE TABLE IF NOT EXISTS leaves an old table as it was.)
  bool has_pinned = false, has_hits = false;
  {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("PRAGMA table_info(nodes)"));
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
      const char* name = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
      if (name && std::strcmp(name, "pinned") == 0) has_pinned = true;
      if (name && std::strcmp(name, "hits") == 0) has_hits = true;
    }
    if (r != SQLITE_DONE) return Err("read the nodes table layout");
  }
  int from = 0;
  {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("SELECT value FROM meta WHERE key = 'schema_version'"));
    if (sqlite3_step(s) == SQLITE_ROW) from = sqlite3_column_int(s, 0);
    sqlite3_reset(s);  // no statement may be active during ALTER TABLE
  }
  if (!has_pinned) IMPRESS_RETURN_IF_ERROR(Exec("ALTER TABLE nodes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"));
  if (!has_hits) IMPRESS_RETURN_IF_ERROR(Exec("ALTER TABLE nodes ADD COLUMN hits INTEGER NOT NULL DEFAULT 0"));
  if (!has_pinned || !has_hits)
    spdlog::info("store: catalog {} migrated from schema {} to {} (nodes.pinned, nodes.hits added)", path_,
                 from ? from : 1, kCatalogSchemaVersion);
  // Record the version unless the meta table is empty (a fresh catalog; Open fills it).
  IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("UPDATE meta SET value = ? WHERE key = 'schema_version'"));
  sqlite3_bind_text(s, 1, std::to_string(kCatalogSchemaVersion).c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s) != SQLITE_DONE) return Err("update schema version");
  if (sqlite3_changes(db_) == 0) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * c, Prep("SELECT COUNT(*) FROM meta"));
    const bool has_meta = sqlite3_step(c) == SQLITE_ROW && sqlite3_column_int64(c, 0) > 0;
    sqlite3_reset(c);
    if (has_meta) {
      IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * ins, Prep("INSERT INTO meta(key, value) VALUES('schema_version', ?)"));
      sqlite3_bind_text(ins, 1, std::to_string(kCatalogSchemaVersion).c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(ins) != SQLITE_DONE) return Err("insert schema version");
    }
  }
  return Status::Ok();
}

Result<CatalogContents> Catalog::Load() {
  std::lock_guard<std::mutex> lk(mu_);
  CatalogContents out;
  IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("SELECT id, parent, segment, seg_begin, tokens, last_access, user_data, "
                                                  "pinned, hits FROM nodes ORDER BY id"));
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    NodeRecord n;
    n.id = uint64_t(sqlite3_column_int64(s, 0));
    n.parent = uint64_t(sqlite3_column_int64(s, 1));
    n.segment = uint64_t(sqlite3_column_int64(s, 2));
    n.seg_begin = uint64_t(sqlite3_column_int64(s, 3));
    n.tokens = BlobTo<Token>(s, 4);
    n.last_access = uint64_t(sqlite3_column_int64(s, 5));
    n.user_data = uint64_t(sqlite3_column_int64(s, 6));
    n.pinned = sqlite3_column_int64(s, 7) != 0;
    n.hits = uint64_t(sqlite3_column_int64(s, 8));
    out.nodes.push_back(std::move(n));
  }
  if (r != SQLITE_DONE) return Err("read nodes");
  IMPRESS_ASSIGN_OR_RETURN(s, Prep("SELECT id, n_tokens, generation, mapping, imp_sum, imp_count FROM segments ORDER BY id"));
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    SegmentRow g;
    g.id = uint64_t(sqlite3_column_int64(s, 0));
    g.n_tokens = uint32_t(sqlite3_column_int64(s, 1));
    g.generation = uint64_t(sqlite3_column_int64(s, 2));
    g.mapping = BlobTo<uint32_t>(s, 3);
    g.imp_sum = BlobTo<float>(s, 4);
    g.imp_count = BlobTo<uint32_t>(s, 5);
    out.segments.push_back(std::move(g));
  }
  if (r != SQLITE_DONE) return Err("read segments");
  IMPRESS_ASSIGN_OR_RETURN(s, Prep("SELECT segment, layer, idx, generation, file, offset, length, slot_begin, n_slots, "
                                   "checksum, block_sums, freq, imp_ratio, n_reports FROM chunks ORDER BY segment, layer, idx"));
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    ChunkRow c;
    c.segment = uint64_t(sqlite3_column_int64(s, 0));
    c.layer = uint32_t(sqlite3_column_int64(s, 1));
    c.index = uint32_t(sqlite3_column_int64(s, 2));
    c.generation = uint64_t(sqlite3_column_int64(s, 3));
    c.ext.file = uint32_t(sqlite3_column_int64(s, 4));
    c.ext.offset = uint64_t(sqlite3_column_int64(s, 5));
    c.ext.length = uint32_t(sqlite3_column_int64(s, 6));
    c.ext.slot_begin = uint32_t(sqlite3_column_int64(s, 7));
    c.ext.n_slots = uint32_t(sqlite3_column_int64(s, 8));
    c.ext.checksum = uint64_t(sqlite3_column_int64(s, 9));
    c.ext.block_sums = BlobTo<uint64_t>(s, 10);
    c.freq = sqlite3_column_double(s, 11);
    c.imp_ratio = sqlite3_column_double(s, 12);
    c.n_reports = uint64_t(sqlite3_column_int64(s, 13));
    out.chunks.push_back(std::move(c));
  }
  if (r != SQLITE_DONE) return Err("read chunks");
  IMPRESS_ASSIGN_OR_RETURN(s, Prep("SELECT segment, layer, file, offset, length, n_slots, checksum, block_sums FROM probes"));
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    ProbeRow p;
    p.segment = uint64_t(sqlite3_column_int64(s, 0));
    p.layer = uint32_t(sqlite3_column_int64(s, 1));
    p.ext.file = uint32_t(sqlite3_column_int64(s, 2));
    p.ext.offset = uint64_t(sqlite3_column_int64(s, 3));
    p.ext.length = uint32_t(sqlite3_column_int64(s, 4));
    p.ext.n_slots = uint32_t(sqlite3_column_int64(s, 5));
    p.ext.checksum = uint64_t(sqlite3_column_int64(s, 6));
    p.ext.block_sums = BlobTo<uint64_t>(s, 7);
    out.probes.push_back(std::move(p));
  }
  if (r != SQLITE_DONE) return Err("read probes");
  return out;
}

Status Catalog::Apply(const CatalogBatch& b) {
  if (b.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lk(mu_);
  Txn t(db_);
  if (!t.began()) return Err("begin");
  IMPRESS_RETURN_IF_ERROR(ApplyLocked(b));
  if (!t.Commit()) return Err("commit");
  return Status::Ok();
}

Status Catalog::ApplyLocked(const CatalogBatch& b) {
  auto run1 = [&](const char* sql, int64_t a) -> Status {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep(sql));
    sqlite3_bind_int64(s, 1, a);
    if (sqlite3_step(s) != SQLITE_DONE) return Err(sql);
    return Status::Ok();
  };
  for (NodeId id : b.delete_nodes) IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM nodes WHERE id = ?", int64_t(id)));
  for (uint64_t g : b.delete_segments) {
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM segments WHERE id = ?", int64_t(g)));
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM chunks WHERE segment = ?", int64_t(g)));
    IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM probes WHERE segment = ?", int64_t(g)));
  }
  for (uint64_t g : b.delete_segment_chunks) IMPRESS_RETURN_IF_ERROR(run1("DELETE FROM chunks WHERE segment = ?", int64_t(g)));
  for (auto [g, l, i] : b.delete_chunks) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("DELETE FROM chunks WHERE segment = ? AND layer = ? AND idx = ?"));
    sqlite3_bind_int64(s, 1, int64_t(g));
    sqlite3_bind_int64(s, 2, l);
    sqlite3_bind_int64(s, 3, i);
    if (sqlite3_step(s) != SQLITE_DONE) return Err("delete chunk");
  }
  for (const auto& n : b.upsert_nodes) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("INSERT OR REPLACE INTO nodes(id, parent, segment, seg_begin, tokens, "
                                                    "last_access, user_data, pinned, hits) VALUES(?,?,?,?,?,?,?,?,?)"));
    sqlite3_bind_int64(s, 1, int64_t(n.id));
    sqlite3_bind_int64(s, 2, int64_t(n.parent));
    sqlite3_bind_int64(s, 3, int64_t(n.segment));
    sqlite3_bind_int64(s, 4, int64_t(n.seg_begin));
    BindVec(s, 5, n.tokens);
    sqlite3_bind_int64(s, 6, int64_t(n.last_access));
    sqlite3_bind_int64(s, 7, int64_t(n.user_data));
    sqlite3_bind_int64(s, 8, n.pinned ? 1 : 0);
    sqlite3_bind_int64(s, 9, int64_t(n.hits));
    if (sqlite3_step(s) != SQLITE_DONE) return Err("upsert node");
  }
  for (const auto& g : b.upsert_segments) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("INSERT OR REPLACE INTO segments(id, n_tokens, generation, mapping, "
                                                    "imp_sum, imp_count) VALUES(?,?,?,?,?,?)"));
    sqlite3_bind_int64(s, 1, int64_t(g.id));
    sqlite3_bind_int64(s, 2, g.n_tokens);
    sqlite3_bind_int64(s, 3, int64_t(g.generation));
    BindVec(s, 4, g.mapping);
    BindVec(s, 5, g.imp_sum);
    BindVec(s, 6, g.imp_count);
    if (sqlite3_step(s) != SQLITE_DONE) return Err("upsert segment");
  }
  for (const auto& c : b.upsert_chunks) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("INSERT OR REPLACE INTO chunks(segment, layer, idx, generation, file, "
                                                    "offset, length, slot_begin, n_slots, checksum, block_sums, freq, "
                                                    "imp_ratio, n_reports) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
    sqlite3_bind_int64(s, 1, int64_t(c.segment));
    sqlite3_bind_int64(s, 2, c.layer);
    sqlite3_bind_int64(s, 3, c.index);
    sqlite3_bind_int64(s, 4, int64_t(c.generation));
    sqlite3_bind_int64(s, 5, c.ext.file);
    sqlite3_bind_int64(s, 6, int64_t(c.ext.offset));
    sqlite3_bind_int64(s, 7, c.ext.length);
    sqlite3_bind_int64(s, 8, c.ext.slot_begin);
    sqlite3_bind_int64(s, 9, c.ext.n_slots);
    sqlite3_bind_int64(s, 10, int64_t(c.ext.checksum));
    BindVec(s, 11, c.ext.block_sums);
    sqlite3_bind_double(s, 12, c.freq);
    sqlite3_bind_double(s, 13, c.imp_ratio);
    sqlite3_bind_int64(s, 14, int64_t(c.n_reports));
    if (sqlite3_step(s) != SQLITE_DONE) return Err("upsert chunk");
  }
  for (const auto& p : b.upsert_probes) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("INSERT OR REPLACE INTO probes(segment, layer, file, offset, length, "
                                                    "n_slots, checksum, block_sums) VALUES(?,?,?,?,?,?,?,?)"));
    sqlite3_bind_int64(s, 1, int64_t(p.segment));
    sqlite3_bind_int64(s, 2, p.layer);
    sqlite3_bind_int64(s, 3, p.ext.file);
    sqlite3_bind_int64(s, 4, int64_t(p.ext.offset));
    sqlite3_bind_int64(s, 5, p.ext.length);
    sqlite3_bind_int64(s, 6, p.ext.n_slots);
    sqlite3_bind_int64(s, 7, int64_t(p.ext.checksum));
    BindVec(s, 8, p.ext.block_sums);
    if (sqlite3_step(s) != SQLITE_DONE) return Err("upsert probe");
  }
  for (const auto& c : b.chunk_stats) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("UPDATE chunks SET freq = ?, imp_ratio = ?, n_reports = ? "
                                                    "WHERE segment = ? AND layer = ? AND idx = ?"));
    sqlite3_bind_double(s, 1, c.freq);
    sqlite3_bind_double(s, 2, c.imp_ratio);
    sqlite3_bind_int64(s, 3, int64_t(c.n_reports));
    sqlite3_bind_int64(s, 4, int64_t(c.segment));
    sqlite3_bind_int64(s, 5, c.layer);
    sqlite3_bind_int64(s, 6, c.index);
    if (sqlite3_step(s) != SQLITE_DONE) return Err("save chunk stats");
  }
  for (const auto& n : b.node_stats) {
    IMPRESS_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prep("UPDATE nodes SET last_access = ?, hits = ? WHERE id = ?"));
    sqlite3_bind_int64(s, 1, int64_t(n.last_access));
    sqlite3_bind_int64(s, 2, int64_t(n.hits));
    sqlite3_bind_int64(s, 3, int64_t(n.id));
    if (sqlite3_step(s) != SQLITE_DONE) return Err("save node stats");
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
