#include "store/catalog.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
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
CREATE TABLE IF NOT EXISTS models(model TEXT PRIMARY KEY, last_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, segment INTEGER NOT NULL,
  seg_begin INTEGER NOT NULL, tokens BLOB NOT NULL, last_access INTEGER NOT NULL, user_data INTEGER NOT NULL,
  pinned INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0, model TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS segments(id INTEGER PRIMARY KEY, n_tokens INTEGER NOT NULL, generation INTEGER NOT NULL,
  mapping BLOB, imp_sum BLOB, imp_count BLOB, model TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS chunks(segment INTEGER NOT NULL, layer INTEGER NOT NULL, idx INTEGER NOT NULL,
  generation INTEGER NOT NULL, file INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
  slot_begin INTEGER NOT NULL, n_slots INTEGER NOT NULL, checksum INTEGER NOT NULL, block_sums BLOB NOT NULL,
  freq REAL NOT NULL, imp_ratio REAL NOT NULL, n_reports INTEGER NOT NULL, PRIMARY KEY(segment, layer, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS probes(segment INTEGER NOT NULL, layer INTEGER NOT NULL, file INTEGER NOT NULL,
  offset INTEGER NOT NULL, length INTEGER NOT NULL, n_slots INTEGER NOT NULL, checksum INTEGER NOT NULL,
  block_sums BLOB NOT NULL, PRIMARY KEY(segment, layer)) WITHOUT ROWID;
)";

// The column lists Load reads. Open prepares every one of them, so a file whose tables have
// another layout is found unusable at Open (and moved aside) rather than half-loaded.
const char* kSelectNodes =
    "SELECT id, parent, segment, seg_begin, tokens, last_access, user_data, pinned, hits, model FROM nodes ORDER BY id";
const char* kSelectSegments =
    "SELECT id, n_tokens, generation, mapping, imp_sum, imp_count, model FROM segments ORDER BY id";
// Chunk and probe rows of this model's segments and of no segment at all (recovery drops those).
const char* kSelectChunks =
    "SELECT segment, layer, idx, generation, file, offset, length, slot_begin, n_slots, checksum, block_sums, freq, "
    "imp_ratio, n_reports FROM chunks WHERE segment NOT IN (SELECT id FROM segments WHERE model <> ?1) "
    "ORDER BY segment, layer, idx";
const char* kSelectProbes =
    "SELECT segment, layer, file, offset, length, n_slots, checksum, block_sums FROM probes "
    "WHERE segment NOT IN (SELECT id FROM segments WHERE model <> ?1)";
const char* kSelectForeignChunks =
    "SELECT segment, layer, idx, file, offset, length FROM chunks WHERE segment IN (SELECT id FROM segments WHERE "
    "model <> ?1)";
const char* kSelectForeignProbes =
    "SELECT segment, layer, file, offset, length FROM probes WHERE segment IN (SELECT id FROM segments WHERE model <> "
    "?1)";

using sqlite::ColumnType;

bool IsInt(const Stmt& s, int col) { return s.Type(col) == ColumnType::kInteger; }
// An INTEGER column with lo <= value < hi (NULL, text, real and out-of-range values fail).
bool IntIn(const Stmt& s, int col, int64_t lo, uint64_t hi) {
  return IsInt(s, col) && s.Int(col) >= lo && uint64_t(s.Int(col)) < hi;
}
bool IsBlobOrNull(const Stmt& s, int col) {
  const ColumnType t = s.Type(col);
  return t == ColumnType::kBlob || t == ColumnType::kNull;
}
// A chunk's access frequency is a count kept as REAL: at most 2^63, so it converts to uint64.
constexpr double kMaxFrequency = 9223372036854775808.0;
bool FiniteIn(const Stmt& s, int col, double lo, double hi) {
  const ColumnType t = s.Type(col);
  if (t != ColumnType::kFloat && t != ColumnType::kInteger) return false;
  const double v = s.Double(col);
  return std::isfinite(v) && v >= lo && v <= hi;
}
// The extent columns from `col` on (file, offset, length): within the limits, length > 0.
bool ExtentValid(const Stmt& s, int col) {
  return IntIn(s, col, 0, kMaxDataFileId) && IntIn(s, col + 1, 0, kMaxExtentOffset) &&
         IntIn(s, col + 2, 1, kMaxExtentLength);
}

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

// Steps the rows of `sql` (its ?1 bound to `model` where one is given) through on_row(s, *bad):
// the callback takes a row, or appends the key of a row with invalid values to *bad (Load
// deletes those rows).
template <class Key, class OnRow>
Status ReadRows(SqliteDb& db, const char* sql, const std::string* model, const std::string& what, std::vector<Key>* bad,
                OnRow&& on_row) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db.Prep(sql));
  if (model) stmt.Bind(1, std::string_view(*model));
  return db.ForEachRow(stmt, what, [&](const Stmt& s) { on_row(s, *bad); });
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

Catalog::Catalog(std::unique_ptr<SqliteDb> db, std::string path, std::string model, bool read_only) :
    db_(std::move(db)), path_(std::move(path)), model_(std::move(model)), read_only_(read_only) {}

Catalog::~Catalog() = default;

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& path, const std::string& model,
                                               const CatalogOpenOptions& o) {
  // Read-only: without a WAL holding commits, SQLite need not create the -shm file it cannot.
  std::error_code ec;
  const bool no_wal = !std::filesystem::exists(path + "-wal", ec) || std::filesystem::file_size(path + "-wal", ec) == 0;
  auto opened =
      o.read_only ? SqliteDb::OpenReadOnly(path, /*immutable=*/no_wal) : SqliteDb::Open(path, /*create=*/true);
  if (!opened.ok()) return opened.status().WithContext("store catalog");
  return OpenOn(std::move(opened).value(), model, o);
}

Result<std::unique_ptr<Catalog>> Catalog::OpenOn(std::unique_ptr<sqlite::SqliteDb> opened, const std::string& model,
                                                 const CatalogOpenOptions& o) {
  if (!opened) return Status::InvalidArgument("store catalog: no database connection given");
  const std::string path = opened->path();
  auto c = std::unique_ptr<Catalog>(new Catalog(std::move(opened), path, model, o.read_only));
  MutexLock lk(&c->mu_);
  SqliteDb& db = *c->db_;
  db.SetBusyTimeout(int(std::min<int64_t>(o.busy_timeout.count(), INT32_MAX)));
  // Only what shows the file itself unusable is kCorruption: SQLite's corrupt / not-a-database
  // codes, damage quick_check reports, tables of another layout (a statement Load needs does not
  // prepare). An error of the moment (locked, I/O, disk full, no permission, out of memory) says
  // nothing about the file and is returned as it is: the caller retries and never moves a healthy
  // catalog aside for it.
  auto unusable = [&path](const Status& st) {
    if (st.code() == Status::Code::kUnsupported) return st;
    if (sqlite::IsTransient(st.code())) return st.WithContext("store catalog");
    return Status::Corruption(path + ": not a usable catalog (" + st.message() + ")");
  };
  // The table layout's history. Schema 1 recorded no version: a catalog without one is of
  // schema 1, or fresh (kSchema below creates the latest tables, which the migrations, checking
  // the columns they add, then leave as they are).
  sqlite::SchemaHistory history;
  history.name = "catalog";
  history.version_table = "meta";
  history.latest = kCatalogSchemaVersion;
  history.newer_advice = "use a newer build or another --store directory";
  Catalog* const raw = c.get();
  history.migrations = {
      [raw](SqliteDb&) {
        raw->mu_.AssertHeld();  // Open holds it throughout
        return raw->MigratePinsLocked();
      },
      [raw](SqliteDb&) {
        raw->mu_.AssertHeld();
        return raw->MigrateModelColumnsLocked();
      },
  };
  // The version is checked before the first write (even the WAL pragma): a newer file stays as it was.
  auto recorded = sqlite::ReadSchemaVersion(db, history);
  if (!recorded.ok()) return unusable(recorded.status());
  const int64_t version = recorded->value_or(1);
  // Damage in pages the store would only meet when writing (a later commit, then every reopen
  // refused) is found here, where the file can still be moved aside. Cost: one read of the file.
  Status st = c->QuickCheckLocked();
  if (!st.ok()) return unusable(st);
  if (o.read_only) {
    if (version != kCatalogSchemaVersion)
      return Status::Unsupported(path + ": catalog of an older layout (schema " + std::to_string(version) +
                                 "); it needs an upgrade, which a read-only store cannot write");
  } else {
    st = db.Exec(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=128; "
        "PRAGMA journal_size_limit=524288;",
        "setting up the catalog");
    if (!st.ok()) return unusable(st);
    st = db.Exec(kSchema, "creating the catalog tables");
    if (!st.ok()) return unusable(st);
    {
      Txn t(db);
      IMPRESS_RETURN_IF_ERROR(t.Begin("catalog migration"));
      st = sqlite::UpgradeSchema(db, history, version);
      if (!st.ok()) return unusable(st);
      IMPRESS_ASSIGN_OR_RETURN(Stmt used, db.Prep("INSERT OR REPLACE INTO models(model, last_used) VALUES(?, ?)"));
      used.Bind(1, std::string_view(c->model_));
      used.Bind(2, int64_t(std::time(nullptr)));
      IMPRESS_RETURN_IF_ERROR(db.Run(used, "record the model"));
      IMPRESS_RETURN_IF_ERROR(t.Commit("catalog migration"));
    }
  }
  for (const char* sql :
       {kSelectNodes, kSelectSegments, kSelectChunks, kSelectProbes, kSelectForeignChunks, kSelectForeignProbes}) {
    auto p = db.Prep(sql);
    if (!p.ok()) return unusable(p.status());
  }
  return c;
}

Status Catalog::QuickCheckLocked() {
  IMPRESS_ASSIGN_OR_RETURN(const std::string problems, db_->QuickCheck("check the catalog file"));
  if (!problems.empty()) return Status::Corruption(path_ + ": the database file is damaged (" + problems + ")");
  return Status::Ok();
}

// Schema 2: nodes.pinned and nodes.hits. Added where missing (CREATE TABLE IF NOT EXISTS leaves
// an old table as it was).
Status Catalog::MigratePinsLocked() {
  bool has_pinned = false, has_hits = false;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("PRAGMA table_info(nodes)"));
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "read the nodes table layout", [&](const Stmt& row) {
      const std::string name = row.Text(1);
      if (name == "pinned") has_pinned = true;
      if (name == "hits") has_hits = true;
    }));
  }
  if (!has_pinned)
    IMPRESS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE nodes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0", "add nodes.pinned"));
  if (!has_hits)
    IMPRESS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE nodes ADD COLUMN hits INTEGER NOT NULL DEFAULT 0", "add nodes.hits"));
  if (!has_pinned || !has_hits)
    spdlog::info("store: catalog {} migrated from schema 1 (nodes.pinned, nodes.hits added)", path_);
  return Status::Ok();
}

// Schema 3: nodes and segments name their model. The rows of an older catalog belong to the
// model its meta rows named (the key composed as the store composes it); when those rows are
// missing or NULL the model is unknown ('?'): the rows are kept as another model's, evicted
// first under the budget.
Status Catalog::MigrateModelColumnsLocked() {
  bool nodes_have = false, segments_have = false;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT name FROM pragma_table_info('nodes') WHERE name = 'model' UNION "
                                               "ALL SELECT 'segments' FROM pragma_table_info('segments') WHERE name = "
                                               "'model'"));
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "read the table layout", [&](const Stmt& row) {
      (row.Text(0) == "model" ? nodes_have : segments_have) = true;
    }));
  }
  if (nodes_have && segments_have) return Status::Ok();
  std::string legacy = "?";
  {
    std::unordered_map<std::string, std::string> meta;
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT key, value FROM meta"));
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "read the catalog's meta table", [&meta](const Stmt& row) {
      if (IsInt(row, 1) || row.Type(1) == ColumnType::kText) meta[row.Text(0)] = row.Text(1);
    }));
    if (!meta["fingerprint"].empty() && !meta["geometry"].empty() && !meta["format_version"].empty())
      legacy = meta["fingerprint"] + "|" + meta["geometry"] + "|f" + meta["format_version"];
  }
  if (!nodes_have)
    IMPRESS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE nodes ADD COLUMN model TEXT NOT NULL DEFAULT ''", "add nodes.model"));
  if (!segments_have)
    IMPRESS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE segments ADD COLUMN model TEXT NOT NULL DEFAULT ''", "add segments.model"));
  // A node belongs to the model of its segment where that is known already.
  IMPRESS_RETURN_IF_ERROR(
      db_->Exec("UPDATE nodes SET model = (SELECT g.model FROM segments g WHERE g.id = nodes.segment) "
                "WHERE model = '' AND EXISTS (SELECT 1 FROM segments g WHERE g.id = nodes.segment "
                "AND g.model <> '')",
                "assign nodes to their segments' model"));
  for (const char* sql :
       {"UPDATE segments SET model = ? WHERE model = ''", "UPDATE nodes SET model = ? WHERE model = ''"}) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep(sql));
    s.Bind(1, std::string_view(legacy));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "assign rows to their model"));
  }
  IMPRESS_RETURN_IF_ERROR(
      db_->Exec("DELETE FROM meta WHERE key IN ('fingerprint', 'geometry', 'format_version')", "drop old meta rows"));
  spdlog::info("store: catalog {} migrated to schema {}: its rows belong to model {}", path_, kCatalogSchemaVersion,
               legacy.substr(0, 40));
  return Status::Ok();
}

// ==================================================================== load

Result<CatalogContents> Catalog::Load() {
  MutexLock lk(&mu_);
  CatalogContents out;
  bad_nodes_.clear();
  bad_segments_.clear();
  bad_chunks_.clear();
  bad_probes_.clear();
  IMPRESS_RETURN_IF_ERROR(LoadNodesLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadSegmentsLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadChunksLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadProbesLocked(&out));
  IMPRESS_RETURN_IF_ERROR(LoadForeignLocked(&out));
  out.n_invalid_rows = bad_nodes_.size() + bad_segments_.size() + bad_chunks_.size() + bad_probes_.size();
  if (out.n_invalid_rows == 0) return out;
  spdlog::warn("store: catalog {}: {} row(s) with invalid values dropped ({} node, {} segment, {} chunk, {} probe)",
               path_, out.n_invalid_rows, bad_nodes_.size(), bad_segments_.size(), bad_chunks_.size(),
               bad_probes_.size());
  if (!read_only_) IMPRESS_RETURN_IF_ERROR(DeleteInvalidLocked());  // read-only: skipped in memory only
  return out;
}

// A node row: ids within the limits, a non-empty token span of whole tokens, no negative counter.
Status Catalog::LoadNodesLocked(CatalogContents* out) {
  return ReadRows(*db_, kSelectNodes, nullptr, "read nodes", &bad_nodes_, [&](const Stmt& s, auto& bad) {
    const ColumnType tokens_type = s.Type(4);
    const int token_bytes = s.Size(4);
    const bool ok = IntIn(s, 0, 1, kMaxCatalogId) && IntIn(s, 1, 0, kMaxCatalogId) && IntIn(s, 2, 1, kMaxCatalogId) &&
                    IntIn(s, 3, 0, kMaxSegmentTokens) && tokens_type == ColumnType::kBlob && token_bytes > 0 &&
                    size_t(token_bytes) % sizeof(Token) == 0 &&
                    size_t(token_bytes) / sizeof(Token) <= kMaxSegmentTokens && IntIn(s, 5, 0, UINT64_MAX >> 1) &&
                    IsInt(s, 6) && IntIn(s, 7, 0, 2) && IntIn(s, 8, 0, UINT64_MAX >> 1);
    const std::string model = s.Text(9);
    if (!ok) {
      if (IsInt(s, 0)) bad.push_back(s.Int(0));
      return;
    }
    if (model != model_) {
      ForeignNode f;
      f.id = uint64_t(s.Int(0));
      f.parent = uint64_t(s.Int(1));
      f.segment = uint64_t(s.Int(2));
      f.last_access = uint64_t(s.Int(5));
      f.pinned = s.Int(7) != 0;
      f.model = model;
      out->foreign.max_id = std::max({out->foreign.max_id, f.id, f.segment});
      out->foreign.nodes.push_back(std::move(f));
      return;
    }
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

// A segment row: 1 <= n_tokens <= kMaxSegmentTokens (the caller checks the blobs' sizes against
// its layer count: n_tokens alone never sizes an allocation beyond this limit).
Status Catalog::LoadSegmentsLocked(CatalogContents* out) {
  return ReadRows(*db_, kSelectSegments, nullptr, "read segments", &bad_segments_, [&](const Stmt& s, auto& bad) {
    const bool ok = IntIn(s, 0, 1, kMaxCatalogId) && IntIn(s, 1, 1, kMaxSegmentTokens + 1) &&
                    IntIn(s, 2, 0, UINT64_MAX >> 1) && IsBlobOrNull(s, 3) && IsBlobOrNull(s, 4) && IsBlobOrNull(s, 5);
    if (!ok) {
      if (IsInt(s, 0)) bad.push_back(s.Int(0));
      return;
    }
    if (s.Text(6) != model_) {
      out->foreign.segments.push_back(uint64_t(s.Int(0)));
      out->foreign.max_id = std::max(out->foreign.max_id, uint64_t(s.Int(0)));
      return;
    }
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
  return ReadRows(*db_, kSelectChunks, &model_, "read chunks", &bad_chunks_, [&](const Stmt& s, auto& bad) {
    const bool ok = IntIn(s, 0, 1, kMaxCatalogId) && IntIn(s, 1, 0, kMaxCatalogLayers) &&
                    IntIn(s, 2, 0, kMaxSegmentTokens) && IntIn(s, 3, 0, UINT64_MAX >> 1) && ExtentValid(s, 4) &&
                    IntIn(s, 7, 0, kMaxSegmentTokens) && IntIn(s, 8, 1, kMaxSegmentTokens + 1) && IsInt(s, 9) &&
                    s.Type(10) == ColumnType::kBlob && s.Size(10) % int(sizeof(uint64_t)) == 0 &&
                    FiniteIn(s, 11, 0, kMaxFrequency) && FiniteIn(s, 12, 0, 1) && IntIn(s, 13, 0, UINT64_MAX >> 1);
    if (!ok) {
      bad.push_back({s.Int(0), s.Int(1), s.Int(2)});
      return;
    }
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
  return ReadRows(*db_, kSelectProbes, &model_, "read probes", &bad_probes_, [&](const Stmt& s, auto& bad) {
    const bool ok = IntIn(s, 0, 1, kMaxCatalogId) && IntIn(s, 1, 0, kMaxCatalogLayers) && ExtentValid(s, 2) &&
                    IntIn(s, 5, 1, kMaxSegmentTokens + 1) && IsInt(s, 6) && s.Type(7) == ColumnType::kBlob &&
                    s.Size(7) % int(sizeof(uint64_t)) == 0;
    if (!ok) {
      bad.push_back({s.Int(0), s.Int(1)});
      return;
    }
    ProbeRow p;
    p.segment = uint64_t(s.Int(0));
    p.layer = uint32_t(s.Int(1));
    p.ext = ExtentColumns(s, 2, /*with_slot_begin=*/false);
    out->probes.push_back(std::move(p));
  });
}

// The other models' extents (their space stays in use) and the models' last use.
Status Catalog::LoadForeignLocked(CatalogContents* out) {
  IMPRESS_RETURN_IF_ERROR(ReadRows(
      *db_, kSelectForeignChunks, &model_, "read other models' chunks", &bad_chunks_, [&](const Stmt& s, auto& bad) {
        if (!IntIn(s, 0, 1, kMaxCatalogId) || !IntIn(s, 1, 0, kMaxCatalogLayers) ||
            !IntIn(s, 2, 0, kMaxSegmentTokens) || !ExtentValid(s, 3)) {
          bad.push_back({s.Int(0), s.Int(1), s.Int(2)});
          return;
        }
        out->foreign.extents.push_back(ForeignExtent{uint64_t(s.Int(0)), uint32_t(s.Int(1)), uint32_t(s.Int(2)),
                                                     uint32_t(s.Int(3)), uint64_t(s.Int(4)), uint64_t(s.Int(5))});
      }));
  IMPRESS_RETURN_IF_ERROR(ReadRows(
      *db_, kSelectForeignProbes, &model_, "read other models' probes", &bad_probes_, [&](const Stmt& s, auto& bad) {
        if (!IntIn(s, 0, 1, kMaxCatalogId) || !IntIn(s, 1, 0, kMaxCatalogLayers) || !ExtentValid(s, 2)) {
          bad.push_back({s.Int(0), s.Int(1)});
          return;
        }
        out->foreign.extents.push_back(ForeignExtent{uint64_t(s.Int(0)), uint32_t(s.Int(1)), UINT32_MAX,
                                                     uint32_t(s.Int(2)), uint64_t(s.Int(3)), uint64_t(s.Int(4))});
      }));
  IMPRESS_ASSIGN_OR_RETURN(Stmt stmt, db_->Prep("SELECT model, last_used FROM models"));
  return db_->ForEachRow(stmt, "read models", [out](const Stmt& s) {
    out->foreign.models.emplace_back(s.Text(0), IsInt(s, 1) ? s.Int(1) : 0);
  });
}

// Deletes the rows Load found invalid, by the keys as stored (one transaction).
Status Catalog::DeleteInvalidLocked() {
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin("dropping invalid catalog rows"));
  for (int64_t id : bad_nodes_) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM nodes WHERE id = ?"));
    s.Bind(1, id);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "drop an invalid node row"));
  }
  for (int64_t id : bad_segments_) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM segments WHERE id = ?"));
    s.Bind(1, id);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "drop an invalid segment row"));
  }
  for (const auto& k : bad_chunks_) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM chunks WHERE segment = ? AND layer = ? AND idx = ?"));
    for (int i = 0; i < 3; ++i) s.Bind(i + 1, k[size_t(i)]);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "drop an invalid chunk row"));
  }
  for (const auto& k : bad_probes_) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM probes WHERE segment = ? AND layer = ?"));
    for (int i = 0; i < 2; ++i) s.Bind(i + 1, k[size_t(i)]);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, "drop an invalid probe row"));
  }
  return t.Commit("dropping invalid catalog rows");
}

// ==================================================================== apply

Status Catalog::Apply(const CatalogBatch& b) {
  if (b.empty()) return Status::Ok();
  if (read_only_) return Status::IOError(path_ + ": opened read-only; nothing can be changed");
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
  IMPRESS_ASSIGN_OR_RETURN(Stmt s,
                           db_->Prep("INSERT OR REPLACE INTO nodes(id, parent, segment, seg_begin, tokens, "
                                     "last_access, user_data, pinned, hits, model) VALUES(?,?,?,?,?,?,?,?,?,?)"));
  s.Bind(1, int64_t(n.id));
  s.Bind(2, int64_t(n.parent));
  s.Bind(3, int64_t(n.segment));
  s.Bind(4, int64_t(n.seg_begin));
  s.BindVector(5, n.tokens);
  s.Bind(6, int64_t(n.last_access));
  s.Bind(7, int64_t(n.user_data));
  s.Bind(8, int64_t(n.pinned ? 1 : 0));
  s.Bind(9, int64_t(n.hits));
  s.Bind(10, std::string_view(model_));
  return db_->Run(s, "upsert node");
}

Status Catalog::UpsertSegmentLocked(const SegmentRow& g) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT OR REPLACE INTO segments(id, n_tokens, generation, mapping, "
                                             "imp_sum, imp_count, model) VALUES(?,?,?,?,?,?,?)"));
  s.Bind(1, int64_t(g.id));
  s.Bind(2, int64_t(g.n_tokens));
  s.Bind(3, int64_t(g.generation));
  s.BindVector(4, g.mapping);
  s.BindVector(5, g.imp_sum);
  s.BindVector(6, g.imp_count);
  s.Bind(7, std::string_view(model_));
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
