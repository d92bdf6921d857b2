// The one SQLite helper of the project (the store's catalog, saved conversations, passage index):
// prepared statements, SQLite result codes turned into Status values that name the file, and a
// transaction guard that rolls back unless committed. Include it only from .cpp files
// (it pulls in sqlite3.h).
//
// Requires external synchronization (the owners hold a mutex around every call).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace impress::sqlite {

// Maps a SQLite result code to a Status code: FULL/IOERR/BUSY/LOCKED/READONLY/CANTOPEN/PERM ->
// kIOError, CORRUPT/NOTADB -> kCorruption, NOMEM -> kResourceExhausted, TOOBIG -> kOutOfRange,
// CONSTRAINT/MISMATCH/RANGE -> kInvalidArgument, anything else -> kInternal.
Status::Code CodeFor(int rc);

// True for the codes CodeFor maps from errors of the moment rather than of the file (another
// connection's lock, an I/O error, a full disk, no permission, out of memory): a file that gave
// one of these is not shown damaged by it, and the same call may succeed later.
bool IsTransient(Status::Code code);

// A statement borrowed from the cache; reset (and its bindings cleared) when it goes out of
// scope, so no read transaction stays open behind the caller's back.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() {
    if (s_) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  sqlite3_stmt* get() const { return s_; }

  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  // Text is copied (SQLITE_TRANSIENT) only when the caller's buffer may die first; callers
  // keep `v` alive until the statement finished stepping, so STATIC is used.
  void Bind(int i, std::string_view v) {
    sqlite3_bind_text64(s_, i, v.data() ? v.data() : "", uint64_t(v.size()), SQLITE_STATIC, SQLITE_UTF8);
  }
  void BindBlob(int i, std::string_view v) { BindBlob(i, v.data(), v.size()); }
  // n bytes at p (not copied: kept alive by the caller until the statement finished stepping);
  // an empty blob is bound as a zero-length blob, never NULL.
  void BindBlob(int i, const void* p, size_t n) {
    if (n == 0) sqlite3_bind_zeroblob(s_, i, 0);
    else sqlite3_bind_blob64(s_, i, p, uint64_t(n), SQLITE_STATIC);
  }
  // The elements' bytes as one blob (host byte order); read back with Blob<T>.
  template <class T>
  void BindVector(int i, const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    BindBlob(i, v.data(), v.size() * sizeof(T));
  }
  int Step() { return sqlite3_step(s_); }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Double(int col) const { return sqlite3_column_double(s_, col); }
  // Text or blob column as bytes (exact, embedded NULs kept).
  std::string Text(int col) const {
    const void* p = sqlite3_column_blob(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    return p ? std::string(static_cast<const char*>(p), size_t(n)) : std::string();
  }
  // A blob column written by BindVector: as many whole elements as it holds (a trailing partial
  // element is ignored; NULL or empty gives an empty vector).
  template <class T>
  std::vector<T> Blob(int col) const {
    static_assert(std::is_trivially_copyable_v<T>);
    const void* p = sqlite3_column_blob(s_, col);
    const int n = sqlite3_column_bytes(s_, col);
    std::vector<T> v(size_t(n) / sizeof(T));
    if (p && !v.empty()) std::memcpy(v.data(), p, v.size() * sizeof(T));
    return v;
  }

 private:
  sqlite3_stmt* s_;
};

class SqliteDb {
 public:
  // Opens (and with `create`, creates) the file read-write. Performs no reads or writes of the
  // file's contents yet, so a foreign file is left untouched by Open itself.
  static Result<std::unique_ptr<SqliteDb>> Open(const std::string& path, bool create);
  // Opens an existing file for reading only (a directory the user cannot write). `immutable`:
  // SQLite takes no locks and reads no WAL (the file must not change while open, and a WAL file
  // must not hold commits: use it only when there is no -wal file with content).
  static Result<std::unique_ptr<SqliteDb>> OpenReadOnly(const std::string& path, bool immutable);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // "path: what: sqlite message" with the code from CodeFor(rc); disk full is spelled out.
  Status Error(int rc, const std::string& what) const;
  // Runs one or more statements without results.
  Status Exec(const char* sql, const std::string& what);
  // A cached prepared statement for `sql` (a string literal: the pointer is the cache key).
  Result<Stmt> Prep(const char* sql);
  // How long a statement waits for another connection's lock before failing with SQLITE_BUSY
  // (Open sets 5000 ms).
  void SetBusyTimeout(int ms) { sqlite3_busy_timeout(db_, ms); }
  // Makes writes that would grow the main file past `max_bytes` fail with SQLITE_FULL, like a
  // full disk (0 = no limit). Per connection; nothing is written.
  Status SetMaxFileBytes(uint64_t max_bytes);
  // Steps a statement expected to finish without rows.
  Status Run(Stmt& s, const std::string& what);
  // Steps `s` to the end, calling on_row(s) for each row; an error names `what`. An on_row that
  // returns a Status stops at the first row it refuses and returns that Status as it is.
  template <class OnRow>
  Status ForEachRow(Stmt& s, const std::string& what, OnRow&& on_row) {
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      if constexpr (std::is_same_v<std::invoke_result_t<OnRow&, Stmt&>, Status>) {
        Status st = on_row(s);
        if (!st.ok()) return st;
      } else {
        on_row(s);
      }
    }
    if (rc != SQLITE_DONE) return Error(rc, what);
    return Status::Ok();
  }
  // The first column of the only row `sql` returns, as an integer; an error when there is no row.
  Result<int64_t> QueryInt(const char* sql, const std::string& what);
  // The first column of the first row `sql` returns, as bytes; nullopt when there is no row
  // (e.g. a schema_version key absent from a meta table).
  Result<std::optional<std::string>> QueryText(const char* sql, const std::string& what);
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  int64_t Changes() const;

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  std::unordered_map<const char*, sqlite3_stmt*> stmts_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless Commit() succeeded.
class Txn {
 public:
  explicit Txn(SqliteDb& db) : db_(db) {}
  ~Txn();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  Status Begin(const std::string& what);
  Status Commit(const std::string& what);

 private:
  SqliteDb& db_;
  bool open_ = false;
};

}  // namespace impress::sqlite
