// The one SQLite layer of the project (the store's catalog, saved conversations, passage index):
// opening a file (read-write or read-only), prepared statements, SQLite result codes turned into
// Status values that name the file (and classified: damage of the file vs errors of the moment),
// transactions, schema versions and their migrations, and the checks the callers need (the
// file's page-level integrity, FTS5 in the library). sqlite3.h stays inside sqlite.cpp: no other
// production file includes it (scripts/check-layout.sh checks).
//
// Requires external synchronization (the owners hold a mutex around every call).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/status.h"

// SQLite's own handle types (sqlite3.h declares them the same way).
struct sqlite3;
struct sqlite3_stmt;

namespace impress::sqlite {

// Maps a SQLite result code to a Status code: FULL/IOERR/BUSY/LOCKED/READONLY/CANTOPEN/PERM ->
// kIOError, CORRUPT/NOTADB -> kCorruption, NOMEM -> kResourceExhausted, TOOBIG -> kOutOfRange,
// CONSTRAINT/MISMATCH/RANGE -> kInvalidArgument, anything else -> kInternal.
Status::Code CodeFor(int rc);

// True for the codes CodeFor maps from errors of the moment rather than of the file (another
// connection's lock, an I/O error, a full disk, no permission, out of memory): a file that gave
// one of these is not shown damaged by it, and the same call may succeed later.
bool IsTransient(Status::Code code);

// The version of the SQLite library in use ("3.40.1").
const char* LibraryVersion();

// Ok when the SQLite library in use has FTS5 full-text search (compiled into Debian's libsqlite3,
// not into every build); Unsupported naming the library's version otherwise. Checked on an
// in-memory connection of its own, so no file is ever blamed for the library.
Status CheckFts5();

// The storage class of a column's value in the current row.
enum class ColumnType { kInteger, kFloat, kText, kBlob, kNull };

class SqliteDb;

// A statement borrowed from the connection's cache; reset (and its bindings cleared) when it goes
// out of scope, so no read transaction stays open behind the caller's back.
class Stmt {
 public:
  // `db` names the file in Step's errors (none: the message has no file name).
  explicit Stmt(sqlite3_stmt* s, const SqliteDb* db = nullptr) : s_(s), db_(db) {}
  Stmt(Stmt&& o) noexcept : s_(o.s_), db_(o.db_) { o.s_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();
  sqlite3_stmt* get() const { return s_; }

  void Bind(int i, int64_t v);
  void Bind(int i, double v);
  // Text is not copied: callers keep `v` alive until the statement finished stepping.
  void Bind(int i, std::string_view v);
  void BindBlob(int i, std::string_view v) { BindBlob(i, v.data(), v.size()); }
  // n bytes at p (not copied: kept alive by the caller until the statement finished stepping);
  // an empty blob is bound as a zero-length blob, never NULL.
  void BindBlob(int i, const void* p, size_t n);
  // The elements' bytes as one blob (host byte order); read back with Blob<T>.
  template <class T>
  void BindVector(int i, const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    BindBlob(i, v.data(), v.size() * sizeof(T));
  }

  // Steps once: true with a row to read, false when the statement has finished; an error is the
  // connection's, named by `what`.
  Result<bool> Step(const std::string& what);

  int64_t Int(int col) const;
  double Double(int col) const;
  ColumnType Type(int col) const;
  // Bytes of a text or blob column (0 for NULL).
  int Size(int col) const;
  // Text or blob column as bytes (exact, embedded NULs kept).
  std::string Text(int col) const { return std::string(View(col)); }
  // A blob column written by BindVector: as many whole elements as it holds (a trailing partial
  // element is ignored; NULL or empty gives an empty vector).
  template <class T>
  std::vector<T> Blob(int col) const {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::string_view b = View(col);
    std::vector<T> v(b.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  // The column's bytes, valid until the next Step or the reset.
  std::string_view View(int col) const;

  sqlite3_stmt* s_;
  const SqliteDb* db_;
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
  // A private in-memory database holding a copy of `image` (the bytes of a database file),
  // read-write and growable, never touching a file; `name` stands for the path in messages. The
  // image is not checked here: a damaged one fails the first statement that reads it, with the
  // codes a file would give. A WAL-mode image is read in rollback-journal mode (memory has no
  // WAL). Used to check databases without a file per check (the fuzzers).
  static Result<std::unique_ptr<SqliteDb>> OpenImage(std::string_view image, const std::string& name);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // The raw connection, for tests that reach below this layer.
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // "path: what: sqlite message" with the code from CodeFor(rc); disk full is spelled out.
  Status Error(int rc, const std::string& what) const;
  // Runs one or more statements without results.
  Status Exec(const char* sql, const std::string& what);
  Status Exec(const std::string& sql, const std::string& what) { return Exec(sql.c_str(), what); }
  // A cached prepared statement for `sql` (a string literal: the pointer is the cache key).
  Result<Stmt> Prep(const char* sql);
  // The same for SQL built at run time (cached by its text).
  Result<Stmt> PrepText(const std::string& sql);
  // How long a statement waits for another connection's lock before failing with SQLITE_BUSY
  // (Open sets 5000 ms).
  void SetBusyTimeout(int ms);
  // Makes writes that would grow the main file past `max_bytes` fail with SQLITE_FULL, like a
  // full disk (0 = no limit). Per connection; nothing is written.
  Status SetMaxFileBytes(uint64_t max_bytes);
  // Steps a statement expected to finish without rows.
  Status Run(Stmt& s, const std::string& what);
  // Steps `s` to the end, calling on_row(s) for each row; an error names `what`. An on_row that
  // returns a Status stops at the first row it refuses and returns that Status as it is.
  template <class OnRow>
  Status ForEachRow(Stmt& s, const std::string& what, OnRow&& on_row) {
    for (;;) {
      IMPRESS_ASSIGN_OR_RETURN(const bool row, s.Step(what));
      if (!row) return Status::Ok();
      if constexpr (std::is_same_v<std::invoke_result_t<OnRow&, Stmt&>, Status>) {
        Status st = on_row(s);
        if (!st.ok()) return st;
      } else {
        on_row(s);
      }
    }
  }
  // The first column of the only row `sql` returns, as an integer; an error when there is no row.
  Result<int64_t> QueryInt(const char* sql, const std::string& what);
  // The first column of the first row `sql` returns, as bytes; nullopt when there is no row
  // (e.g. a schema_version key absent from a meta table).
  Result<std::optional<std::string>> QueryText(const char* sql, const std::string& what);
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  int64_t Changes() const;
  // The rowid of the last successful INSERT on this connection.
  int64_t LastInsertRowid() const;
  // Whether a transaction is open (BEGIN without its COMMIT or ROLLBACK yet).
  bool InTransaction() const;
  // SQLite's page-level check of the whole file (PRAGMA quick_check: one read of the file): ""
  // when healthy, else up to four of its findings, "; "-separated. An error is the read's.
  Result<std::string> QuickCheck(const std::string& what);

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  std::unordered_map<const char*, sqlite3_stmt*> stmts_;
  std::unordered_map<std::string, sqlite3_stmt*> text_stmts_;
};

// BEGIN IMMEDIATE on Begin; ROLLBACK on destruction unless Commit() succeeded.
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

// A read transaction (BEGIN, deferred): the queries inside it see one state of the file. Ended
// (COMMIT: nothing was written) on destruction.
class ReadTxn {
 public:
  explicit ReadTxn(SqliteDb& db) : db_(db) {}
  ~ReadTxn();
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;
  Status Begin(const std::string& what);

 private:
  SqliteDb& db_;
  bool open_ = false;
};

// A database's schema history. The version is the 'schema_version' row of a key/value table
// (key TEXT PRIMARY KEY, value TEXT NOT NULL, the decimal version) that the schema itself
// contains.
struct SchemaHistory {
  std::string name;           // what the file is, for messages: "chat database"
  std::string version_table;  // the key/value table holding the schema_version row: "meta"
  int64_t latest = 1;         // the version this build writes
  // Makes the latest schema, version table included, in an empty database.
  std::function<Status(SqliteDb&)> create;
  // migrations[i] upgrades version i + 1 to i + 2: latest - 1 steps, run in order.
  std::vector<std::function<Status(SqliteDb&)>> migrations;
  // Appended to the refusal of a newer file (what the user can do), may be empty.
  std::string newer_advice;
};

// The version the file records; nullopt when it has no version table or no (non-NULL) version
// row. Only reads, so it is called before anything is written: a value that is not a positive
// integer is kCorruption, one above history.latest (a newer build's file) kUnsupported with a
// message naming both versions.
Result<std::optional<int64_t>> ReadSchemaVersion(SqliteDb& db, const SchemaHistory& history);

// Brings the database from version `from` to history.latest and records the version: from == 0
// runs history.create on an empty database; 1 <= from < latest runs the migrations from `from` on,
// in order; from == latest changes nothing. All in one transaction (a savepoint when the caller
// has one open): when a step fails, nothing of the upgrade stays and the recorded version is
// the one before. kUnsupported for from > latest, kInternal for a history missing a step.
Status UpgradeSchema(SqliteDb& db, const SchemaHistory& history, int64_t from);

// Identifies a file of ours before anything is written to it: true when it is fresh (no
// application_id and no schema object: ours to create), false when its application_id is
// `app_id`. Only reads: the header's read fails (kCorruption) for a file that is not SQLite, and a
// foreign SQLite file (another application_id, or objects of its own) is kInvalidArgument
// "PATH: not an IMPRESS <what> (SQLite application_id 0x..., N schema objects); the file was left
// unchanged".
Result<bool> IsFreshFile(SqliteDb& db, int32_t app_id, const std::string& what);
// A SchemaHistory::create for such a file: runs `schema` (the latest schema, version table
// included), then records `app_id` as the file's application_id; `what` for messages ("creating
// the chat database").
std::function<Status(SqliteDb&)> CreateWithApplicationId(std::string schema, int32_t app_id, std::string what);

}  // namespace impress::sqlite
