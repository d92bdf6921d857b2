#include "base/sqlite.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace impress::sqlite {

Status::Code CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_OK: return Status::Code::kOk;
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_PROTOCOL: return Status::Code::kIOError;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Status::Code::kCorruption;
    case SQLITE_NOMEM: return Status::Code::kResourceExhausted;
    case SQLITE_TOOBIG: return Status::Code::kOutOfRange;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE: return Status::Code::kInvalidArgument;
    default: return Status::Code::kInternal;
  }
}

bool IsTransient(Status::Code code) {
  return code == Status::Code::kIOError || code == Status::Code::kResourceExhausted;
}

const char* LibraryVersion() { return sqlite3_libversion(); }

Status CheckFts5() {
  IMPRESS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> mem, SqliteDb::Open(":memory:", /*create=*/true));
  if (sqlite3_exec(mem->handle(), "CREATE VIRTUAL TABLE fts5_probe USING fts5(x);", nullptr, nullptr, nullptr) !=
      SQLITE_OK)
    return Status::Unsupported(std::string("the SQLite library in use (") + sqlite3_libversion() +
                               ") has no FTS5 full-text search (" + sqlite3_errmsg(mem->handle()) + ")");
  return Status::Ok();
}

// --- Stmt ---------------------------------------------------------------------------------------

Stmt::~Stmt() {
  if (s_) {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
}

void Stmt::Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
void Stmt::Bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
void Stmt::Bind(int i, std::string_view v) {
  sqlite3_bind_text64(s_, i, v.data() ? v.data() : "", uint64_t(v.size()), SQLITE_STATIC, SQLITE_UTF8);
}
void Stmt::BindBlob(int i, const void* p, size_t n) {
  if (n == 0) sqlite3_bind_zeroblob(s_, i, 0);
  else sqlite3_bind_blob64(s_, i, p, uint64_t(n), SQLITE_STATIC);
}

Result<bool> Stmt::Step(const std::string& what) {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  if (db_) return db_->Error(rc, what);
  return Status(CodeFor(rc), what + ": " + sqlite3_errstr(rc));
}

int64_t Stmt::Int(int col) const { return sqlite3_column_int64(s_, col); }
double Stmt::Double(int col) const { return sqlite3_column_double(s_, col); }

ColumnType Stmt::Type(int col) const {
  switch (sqlite3_column_type(s_, col)) {
    case SQLITE_INTEGER: return ColumnType::kInteger;
    case SQLITE_FLOAT: return ColumnType::kFloat;
    case SQLITE_TEXT: return ColumnType::kText;
    case SQLITE_BLOB: return ColumnType::kBlob;
    default: return ColumnType::kNull;
  }
}

int Stmt::Size(int col) const { return sqlite3_column_bytes(s_, col); }

std::string_view Stmt::View(int col) const {
  const void* p = sqlite3_column_blob(s_, col);  // before the size (the order SQLite documents)
  const int n = sqlite3_column_bytes(s_, col);
  return p ? std::string_view(static_cast<const char*>(p), size_t(n)) : std::string_view();
}

// --- SqliteDb -----------------------------------------------------------------------------------

Result<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, bool create) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status(CodeFor(rc), path + ": cannot open: " + m);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, path));
}

Result<std::unique_ptr<SqliteDb>> SqliteDb::OpenReadOnly(const std::string& path, bool immutable) {
  // A URI, so the parameters can be given: '%', '?' and '#' in the path are escaped.
  std::string uri = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char esc[4];
      std::snprintf(esc, sizeof esc, "%%%02X", unsigned(static_cast<unsigned char>(c)));
      uri += esc;
    } else {
      uri += c;
    }
  }
  uri += immutable ? "?immutable=1" : "?mode=ro";
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status(CodeFor(rc), path + ": cannot open for reading: " + m);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, path));
}

Result<std::unique_ptr<SqliteDb>> SqliteDb::OpenImage(std::string_view image, const std::string& name) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status(CodeFor(rc), name + ": cannot open an in-memory database: " + m);
  }
  // SQLite owns the copy (freed on close) and may grow it: writes work as on a file.
  auto* copy = static_cast<unsigned char*>(sqlite3_malloc64(std::max<uint64_t>(1, image.size())));
  if (!copy) {
    sqlite3_close(db);
    return Status::ResourceExhausted(name + ": no memory for a database image of " + std::to_string(image.size()) +
                                     " bytes");
  }
  if (!image.empty()) std::memcpy(copy, image.data(), image.size());
  // A file in WAL mode (header bytes 18 and 19 = 2) is read as a rollback-journal one: memory has
  // no WAL, and SQLite refuses to read such an image otherwise. The pages are the same.
  if (image.size() >= 20 && copy[18] == 2 && copy[19] == 2) copy[18] = copy[19] = 1;
  rc = sqlite3_deserialize(db, "main", copy, sqlite3_int64(image.size()), sqlite3_int64(image.size()),
                           SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
  if (rc != SQLITE_OK) {  // the copy is freed by SQLite on failure too
    std::string m = sqlite3_errmsg(db);
    sqlite3_close(db);
    return Status(CodeFor(rc), name + ": cannot load the database image: " + m);
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, name));
}

SqliteDb::~SqliteDb() {
  for (auto& [k, s] : stmts_) sqlite3_finalize(s);
  for (auto& [k, s] : text_stmts_) sqlite3_finalize(s);
  sqlite3_close(db_);
}

Status SqliteDb::Error(int rc, const std::string& what) const {
  std::string m = sqlite3_errmsg(db_);
  if ((rc & 0xff) == SQLITE_FULL) m = "disk full or size limit reached (" + m + "); nothing was changed";
  if ((rc & 0xff) == SQLITE_NOTADB) m = "not an SQLite database (" + m + ")";
  if ((rc & 0xff) == SQLITE_CORRUPT) m = "the database file is damaged (" + m + ")";
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
    m = "the database is locked by another process (" + m + ")";
  return Status(CodeFor(rc), path_ + ": " + what + ": " + m);
}

Status SqliteDb::Exec(const char* sql, const std::string& what) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, what);
  return Status::Ok();
}

Result<Stmt> SqliteDb::Prep(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return Stmt(it->second, this);
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return Error(rc, std::string("prepare \"") + sql + "\"");
  stmts_[sql] = s;
  return Stmt(s, this);
}

Result<Stmt> SqliteDb::PrepText(const std::string& sql) {
  auto it = text_stmts_.find(sql);
  if (it != text_stmts_.end()) return Stmt(it->second, this);
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "prepare \"" + sql + "\"");
  text_stmts_[sql] = s;
  return Stmt(s, this);
}

void SqliteDb::SetBusyTimeout(int ms) { sqlite3_busy_timeout(db_, ms); }

Status SqliteDb::SetMaxFileBytes(uint64_t max_bytes) {
  if (max_bytes == 0) return Status::Ok();
  IMPRESS_ASSIGN_OR_RETURN(const int64_t page, QueryInt("PRAGMA page_size", "reading the page size"));
  if (page <= 0) return Status::Internal(path_ + ": page size " + std::to_string(page));
  const uint64_t n_pages = std::max<uint64_t>(1, max_bytes / uint64_t(page));
  return Exec("PRAGMA max_page_count=" + std::to_string(n_pages), "setting the size limit");
}

Status SqliteDb::Run(Stmt& s, const std::string& what) {
  int rc = sqlite3_step(s.get());
  if (rc != SQLITE_DONE) return Error(rc, what);
  return Status::Ok();
}

Result<int64_t> SqliteDb::QueryInt(const char* sql, const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep(sql));
  IMPRESS_ASSIGN_OR_RETURN(const bool row, s.Step(what));
  if (!row) return Status::Internal(path_ + ": " + what + ": no row");
  return s.Int(0);
}

Result<std::optional<std::string>> SqliteDb::QueryText(const char* sql, const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep(sql));
  IMPRESS_ASSIGN_OR_RETURN(const bool row, s.Step(what));
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.Text(0));
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

int64_t SqliteDb::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }

bool SqliteDb::InTransaction() const { return !sqlite3_get_autocommit(db_); }

Result<std::string> SqliteDb::QuickCheck(const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep("PRAGMA quick_check(4)"));
  std::string problems;
  IMPRESS_RETURN_IF_ERROR(ForEachRow(s, what, [&](const Stmt& row) {
    const std::string line = row.Text(0);
    if (line != "ok") problems += (problems.empty() ? "" : "; ") + line.substr(0, 200);
  }));
  return problems;
}

// --- Transactions -------------------------------------------------------------------------------

Txn::~Txn() {
  // After some errors (SQLITE_FULL, SQLITE_IOERR) SQLite has already rolled back; then
  // the connection is in autocommit mode again and there is nothing left to undo.
  if (open_ && db_.InTransaction()) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

Status Txn::Begin(const std::string& what) {
  IMPRESS_RETURN_IF_ERROR(db_.Exec("BEGIN IMMEDIATE", what + " (begin)"));
  open_ = true;
  return Status::Ok();
}

Status Txn::Commit(const std::string& what) {
  int rc = sqlite3_exec(db_.handle(), "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return db_.Error(rc, what + " (commit)");
  open_ = false;
  return Status::Ok();
}

ReadTxn::~ReadTxn() {
  if (open_) sqlite3_exec(db_.handle(), "COMMIT", nullptr, nullptr, nullptr);
}

Status ReadTxn::Begin(const std::string& what) {
  IMPRESS_RETURN_IF_ERROR(db_.Exec("BEGIN", what));
  open_ = true;
  return Status::Ok();
}

// --- Schema versions ----------------------------------------------------------------------------

Result<bool> IsFreshFile(SqliteDb& db, int32_t app_id, const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(int64_t file_id, db.QueryInt("PRAGMA application_id", "reading the file header"));
  IMPRESS_ASSIGN_OR_RETURN(int64_t n_objects, db.QueryInt("SELECT count(*) FROM sqlite_master", "reading the schema"));
  const bool fresh = file_id == 0 && n_objects == 0;
  if (!fresh && file_id != app_id) {
    char id[16];
    std::snprintf(id, sizeof id, "0x%08x", uint32_t(file_id));
    return Status::InvalidArgument(db.path() + ": not an IMPRESS " + what + " (SQLite application_id " + id + ", " +
                                   std::to_string(n_objects) + " schema objects); the file was left unchanged");
  }
  return fresh;
}

std::function<Status(SqliteDb&)> CreateWithApplicationId(std::string schema, int32_t app_id, std::string what) {
  return [schema = std::move(schema), app_id, what = std::move(what)](SqliteDb& db) -> Status {
    IMPRESS_RETURN_IF_ERROR(db.Exec(schema, what));
    return db.Exec("PRAGMA application_id=" + std::to_string(app_id), what);
  };
}

Result<std::optional<int64_t>> ReadSchemaVersion(SqliteDb& db, const SchemaHistory& history) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt has, db.Prep("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"));
  has.Bind(1, std::string_view(history.version_table));
  IMPRESS_ASSIGN_OR_RETURN(const bool row, has.Step("reading the " + history.name + "'s tables"));
  if (!row || has.Int(0) == 0) return std::optional<int64_t>();
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db.PrepText("SELECT value FROM " + history.version_table +
                                               " WHERE key = 'schema_version' AND value IS NOT NULL"));
  IMPRESS_ASSIGN_OR_RETURN(const bool found, s.Step("reading the schema version"));
  if (!found) return std::optional<int64_t>();
  const std::string text = s.Text(0);
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1)
    return Status::Corruption(db.path() + ": " + history.name + " has an invalid schema_version \"" +
                              text.substr(0, 32) + "\"");
  if (v > history.latest)
    return Status::Unsupported(db.path() + ": " + history.name + " has schema version " + std::to_string(v) +
                               ", written by a newer IMPRESS; this build reads up to version " +
                               std::to_string(history.latest) + " (the file was left unchanged" +
                               (history.newer_advice.empty() ? "" : "; " + history.newer_advice) + ")");
  return std::optional<int64_t>(v);
}

namespace {

// The steps of UpgradeSchema, inside its transaction or savepoint.
Status UpgradeSteps(SqliteDb& db, const SchemaHistory& history, int64_t from) {
  const std::string what = "upgrading the " + history.name + " to schema version " + std::to_string(history.latest);
  if (from == 0) {
    if (!history.create) return Status::Internal(db.path() + ": no way to create the " + history.name);
    IMPRESS_RETURN_IF_ERROR(history.create(db));
  } else {
    for (int64_t v = from; v < history.latest; ++v) {
      const size_t i = size_t(v - 1);
      if (i >= history.migrations.size() || !history.migrations[i])
        return Status::Internal(db.path() + ": no migration of the " + history.name + " from schema version " +
                                std::to_string(v));
      IMPRESS_RETURN_IF_ERROR(history.migrations[i](db));
    }
  }
  return db.Exec("INSERT OR REPLACE INTO " + history.version_table + "(key, value) VALUES('schema_version', '" +
                     std::to_string(history.latest) + "')",
                 what);
}

}  // namespace

Status UpgradeSchema(SqliteDb& db, const SchemaHistory& history, int64_t from) {
  if (from < 0 || from > history.latest)
    return Status::Unsupported(db.path() + ": " + history.name + " at schema version " + std::to_string(from) +
                               ", this build reads up to version " + std::to_string(history.latest));
  if (from == history.latest) return Status::Ok();
  const std::string what = "upgrading the " + history.name;
  if (!db.InTransaction()) {
    Txn t(db);
    IMPRESS_RETURN_IF_ERROR(t.Begin(what));
    IMPRESS_RETURN_IF_ERROR(UpgradeSteps(db, history, from));
    return t.Commit(what);
  }
  // Inside the caller's transaction: a savepoint undoes this upgrade alone.
  IMPRESS_RETURN_IF_ERROR(db.Exec("SAVEPOINT schema_upgrade", what));
  Status st = UpgradeSteps(db, history, from);
  if (!st.ok()) {
    // A failed statement may have ended the transaction already (SQLITE_FULL, SQLITE_IOERR).
    if (db.InTransaction()) (void)db.Exec("ROLLBACK TO schema_upgrade; RELEASE schema_upgrade", what);
    return st;
  }
  return db.Exec("RELEASE schema_upgrade", what);
}

}  // namespace impress::sqlite
