#include "base/sqlite.h"

#include <algorithm>
#include <cstdio>

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

SqliteDb::~SqliteDb() {
  for (auto& [k, s] : stmts_) sqlite3_finalize(s);
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
  if (it != stmts_.end()) return Stmt(it->second);
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return Error(rc, std::string("prepare \"") + sql + "\"");
  stmts_[sql] = s;
  return Stmt(s);
}

Status SqliteDb::SetMaxFileBytes(uint64_t max_bytes) {
  if (max_bytes == 0) return Status::Ok();
  int64_t page = 0;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep("PRAGMA page_size"));
    int rc = s.Step();
    if (rc != SQLITE_ROW) return Error(rc, "reading the page size");
    page = s.Int(0);
  }
  if (page <= 0) return Status::Internal(path_ + ": page size " + std::to_string(page));
  const uint64_t n_pages = std::max<uint64_t>(1, max_bytes / uint64_t(page));
  const std::string sql = "PRAGMA max_page_count=" + std::to_string(n_pages);
  return Exec(sql.c_str(), "setting the size limit");
}

Status SqliteDb::Run(Stmt& s, const std::string& what) {
  int rc = s.Step();
  if (rc != SQLITE_DONE) return Error(rc, what);
  return Status::Ok();
}

Result<int64_t> SqliteDb::QueryInt(const char* sql, const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep(sql));
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return Status::Internal(path_ + ": " + what + ": no row");
  if (rc != SQLITE_ROW) return Error(rc, what);
  return s.Int(0);
}

Result<std::optional<std::string>> SqliteDb::QueryText(const char* sql, const std::string& what) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, Prep(sql));
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error(rc, what);
  return std::optional<std::string>(s.Text(0));
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

Txn::~Txn() {
  // After some errors (SQLITE_FULL, SQLITE_IOERR) SQLite has already rolled back; then
  // the connection is in autocommit mode again and there is nothing left to undo.
  if (open_ && !sqlite3_get_autocommit(db_.handle())) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
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

}  // namespace impress::sqlite
