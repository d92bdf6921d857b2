#include "chat/chat-db.h"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>

#include "base/sqlite.h"
#include "chat/private-file.h"

namespace impress::persist {

using sqlite::SqliteDb;
using sqlite::Stmt;
using sqlite::Txn;

namespace {

// PRAGMA application_id of a chat database ("IMPc"), so a foreign SQLite file is recognised
// before anything is written to it.
constexpr int32_t kAppId = 0x494d5063;

// Schema history (ChatHistory below):
//   1: meta, conversations, texts, documents, turns.
//   2: documents.private (a document never shared through the team KV tier); kSchema below.
// A later version adds its migration step to ChatHistory (N -> N+1, run in order in one
// transaction by sqlite::UpgradeSchema) and writes its full schema in `create`.
const char* kSchema = R"(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE conversations(
  id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  created INTEGER NOT NULL,
  updated INTEGER NOT NULL,
  mode TEXT NOT NULL CHECK(mode IN ('documents', 'retrieval')),
  settings TEXT NOT NULL DEFAULT '');
CREATE INDEX conversations_by_update ON conversations(updated, id);
CREATE TABLE texts(
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  n_bytes INTEGER NOT NULL,
  text BLOB NOT NULL);
CREATE TABLE documents(
  conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  path TEXT NOT NULL,
  text_id INTEGER NOT NULL REFERENCES texts(id),
  n_tokens INTEGER NOT NULL,
  attached INTEGER NOT NULL,
  private INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(conversation, position)) WITHOUT ROWID;
CREATE INDEX documents_by_text ON documents(text_id);
CREATE TABLE turns(
  conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  role TEXT NOT NULL,
  content BLOB NOT NULL,
  meta BLOB NOT NULL,
  created INTEGER NOT NULL,
  PRIMARY KEY(conversation, position));
)";

std::string TextKey(const std::string& text) {
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64 ":%zu", uint64_t(h.high64), uint64_t(h.low64),
                text.size());
  return buf;
}

bool ParseMode(const std::string& s, ConversationMode* m) {
  if (s == "documents") *m = ConversationMode::kDocuments;
  else if (s == "retrieval") *m = ConversationMode::kRetrieval;
  else return false;
  return true;
}

Status CheckRole(const std::string& role) {
  if (role == "system" || role == "user" || role == "assistant") return Status::Ok();
  return Status::InvalidArgument("turn role \"" + role + "\" is not system, user or assistant");
}

sqlite::SchemaHistory ChatHistory() {
  sqlite::SchemaHistory h;
  h.name = "chat database";
  h.version_table = "meta";
  h.latest = ChatDb::kSchemaVersion;
  h.create = sqlite::CreateWithApplicationId(kSchema, kAppId, "creating the chat database");
  h.migrations.push_back([](SqliteDb& db) {  // 1 -> 2: every earlier document is shared as before
    return db.Exec("ALTER TABLE documents ADD COLUMN private INTEGER NOT NULL DEFAULT 0",
                   "adding documents.private (schema 1 -> 2)");
  });
  return h;
}

}  // namespace

const char* ConversationModeName(ConversationMode m) {
  return m == ConversationMode::kRetrieval ? "retrieval" : "documents";
}

Conversation ToConversation(const SavedConversation& saved) {
  Conversation c;
  for (const SavedDocument& d : saved.documents)
    if (d.attached) c.AddDocument(Document{.path = d.path, .name = d.name, .text = d.text, .is_private = d.is_private});
  for (const SavedTurn& t : saved.turns) c.AddTurn(t.role, t.content);
  return c;
}

ChatDb::ChatDb(std::unique_ptr<SqliteDb> db, ChatDbOptions options) :
    db_(std::move(db)), path_(db_->path()), options_(std::move(options)) {}
ChatDb::~ChatDb() = default;

const std::string& ChatDb::path() const { return path_; }

int64_t ChatDb::Now() const { return options_.now ? options_.now() : int64_t(std::time(nullptr)); }

Result<std::unique_ptr<ChatDb>> ChatDb::Open(const std::string& path, ChatDbOptions options) {
  // The user's documents and conversations: owner-only file and folder (WAL and SHM follow).
  IMPRESS_RETURN_IF_ERROR(PreparePrivateFile(path));
  IMPRESS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path, /*create=*/true));
  // Identify the file before writing anything: reading the header fails with NOTADB for a file
  // that is not SQLite; a foreign SQLite file has another application_id or tables of its own.
  IMPRESS_ASSIGN_OR_RETURN(const bool fresh, sqlite::IsFreshFile(*db, kAppId, "chat database"));
  // The version is checked before the first write (even the WAL pragma), so a file from a
  // newer build is left exactly as it was.
  const sqlite::SchemaHistory history = ChatHistory();
  int64_t version = 0;  // a fresh file: created below
  if (!fresh) {
    IMPRESS_ASSIGN_OR_RETURN(std::optional<int64_t> v, sqlite::ReadSchemaVersion(*db, history));
    if (!v) return Status::Corruption(path + ": chat database has no schema_version row");
    version = *v;
  }
  IMPRESS_RETURN_IF_ERROR(RestrictToOwner(path));  // ours: private even if an older build made it 0644
  IMPRESS_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
                                   "setting up the connection"));
  IMPRESS_RETURN_IF_ERROR(db->SetMaxFileBytes(options.max_file_bytes));
  IMPRESS_RETURN_IF_ERROR(sqlite::UpgradeSchema(*db, history, version));
  return std::unique_ptr<ChatDb>(new ChatDb(std::move(db), std::move(options)));
}

Status ChatDb::CheckConversation(int64_t id) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT 1 FROM conversations WHERE id = ?"));
  s.Bind(1, id);
  IMPRESS_ASSIGN_OR_RETURN(const bool found, s.Step("looking up conversation " + std::to_string(id)));
  if (!found) return Status::NotFound(path_ + ": no conversation with id " + std::to_string(id));
  return Status::Ok();
}

Status ChatDb::Touch(int64_t id) {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("UPDATE conversations SET updated = ? WHERE id = ?"));
  s.Bind(1, Now());
  s.Bind(2, id);
  return db_->Run(s, "updating conversation " + std::to_string(id));
}

Status ChatDb::RemoveOrphanTexts() {
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM texts WHERE NOT EXISTS "
                                             "(SELECT 1 FROM documents d WHERE d.text_id = texts.id)"));
  return db_->Run(s, "removing unused document texts");
}

Result<std::vector<ConversationSummary>> ChatDb::ListConversations() {
  MutexLock lk(&mu_);
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT c.id, c.title, c.created, c.updated, c.mode, "
                                             "(SELECT count(*) FROM turns t WHERE t.conversation = c.id), "
                                             "(SELECT count(*) FROM documents d WHERE d.conversation = c.id) "
                                             "FROM conversations c ORDER BY c.updated DESC, c.id DESC"));
  std::vector<ConversationSummary> out;
  IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "listing conversations", [&](const Stmt& row) -> Status {
    ConversationSummary c;
    c.id = row.Int(0);
    c.title = row.Text(1);
    c.created = row.Int(2);
    c.updated = row.Int(3);
    if (!ParseMode(row.Text(4), &c.mode))
      return Status::Corruption(path_ + ": conversation " + std::to_string(c.id) + " has an unknown mode");
    c.n_turns = int(row.Int(5));
    c.n_documents = int(row.Int(6));
    out.push_back(std::move(c));
    return Status::Ok();
  }));
  return out;
}

Result<int64_t> ChatDb::CreateConversation(const std::string& title, ConversationMode mode) {
  MutexLock lk(&mu_);
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin("creating a conversation"));
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO conversations(title, created, updated, mode, settings) "
                                             "VALUES(?, ?, ?, ?, '')"));
  const int64_t now = Now();
  s.Bind(1, title);
  s.Bind(2, now);
  s.Bind(3, now);
  s.Bind(4, std::string_view(ConversationModeName(mode)));
  IMPRESS_RETURN_IF_ERROR(db_->Run(s, "creating a conversation"));
  const int64_t id = db_->LastInsertRowid();
  IMPRESS_RETURN_IF_ERROR(t.Commit("creating a conversation"));
  return id;
}

Result<SavedConversation> ChatDb::Load(int64_t id) {
  MutexLock lk(&mu_);
  const std::string what = "loading conversation " + std::to_string(id);
  // One read transaction, so the three queries see the same state.
  sqlite::ReadTxn read(*db_);
  IMPRESS_RETURN_IF_ERROR(read.Begin(what));
  SavedConversation out;
  {
    IMPRESS_ASSIGN_OR_RETURN(
        Stmt s, db_->Prep("SELECT title, created, updated, mode, settings FROM conversations WHERE id = ?"));
    s.Bind(1, id);
    IMPRESS_ASSIGN_OR_RETURN(const bool found, s.Step(what));
    if (!found) return Status::NotFound(path_ + ": no conversation with id " + std::to_string(id));
    out.summary.id = id;
    out.summary.title = s.Text(0);
    out.summary.created = s.Int(1);
    out.summary.updated = s.Int(2);
    if (!ParseMode(s.Text(3), &out.summary.mode))
      return Status::Corruption(path_ + ": conversation " + std::to_string(id) + " has an unknown mode");
    out.settings = s.Text(4);
  }
  {
    IMPRESS_ASSIGN_OR_RETURN(
        Stmt s, db_->Prep("SELECT d.name, d.path, t.text, d.n_tokens, d.attached, t.n_bytes, t.key, d.private "
                          "FROM documents d JOIN texts t ON t.id = d.text_id "
                          "WHERE d.conversation = ? ORDER BY d.position"));
    s.Bind(1, id);
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, what + " (documents)", [&](const Stmt& row) -> Status {
      SavedDocument d;
      d.name = row.Text(0);
      d.path = row.Text(1);
      d.text = row.Text(2);
      d.n_tokens = row.Int(3);
      d.attached = row.Int(4) != 0;
      d.n_bytes = uint64_t(row.Int(5));
      d.text_key = row.Text(6);
      d.is_private = row.Int(7) != 0;
      if (d.n_bytes != d.text.size())
        return Status::Corruption(path_ + ": document \"" + d.name + "\" of conversation " + std::to_string(id) +
                                  " has " + std::to_string(d.text.size()) + " bytes, expected " +
                                  std::to_string(d.n_bytes));
      out.documents.push_back(std::move(d));
      return Status::Ok();
    }));
  }
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT role, content, meta, created FROM turns "
                                               "WHERE conversation = ? ORDER BY position"));
    s.Bind(1, id);
    IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, what + " (turns)", [&](const Stmt& row) {
      SavedTurn turn;
      turn.role = row.Text(0);
      turn.content = row.Text(1);
      turn.meta = row.Text(2);
      turn.created = row.Int(3);
      out.turns.push_back(std::move(turn));
    }));
  }
  out.summary.n_turns = int(out.turns.size());
  out.summary.n_documents = int(out.documents.size());
  return out;
}

Status ChatDb::WriteConversation(int64_t id, const std::string& what, const std::function<Status()>& body) {
  MutexLock lk(&mu_);
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin(what));
  IMPRESS_RETURN_IF_ERROR(CheckConversation(id));
  IMPRESS_RETURN_IF_ERROR(body());
  IMPRESS_RETURN_IF_ERROR(Touch(id));
  return t.Commit(what);
}

Status ChatDb::SetConversationColumn(int64_t id, const char* update_sql, std::string_view value,
                                     const std::string& what) {
  return WriteConversation(id, what, [&]() REQUIRES(mu_) -> Status {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep(update_sql));
    s.Bind(1, value);
    s.Bind(2, id);
    return db_->Run(s, what);
  });
}

Status ChatDb::RenameConversation(int64_t id, const std::string& title) {
  return SetConversationColumn(id, "UPDATE conversations SET title = ? WHERE id = ?", title,
                               "renaming conversation " + std::to_string(id));
}

Status ChatDb::SetMode(int64_t id, ConversationMode mode) {
  return SetConversationColumn(id, "UPDATE conversations SET mode = ? WHERE id = ?", ConversationModeName(mode),
                               "setting the mode of conversation " + std::to_string(id));
}

Status ChatDb::SetSettings(int64_t id, const std::string& settings_json) {
  return SetConversationColumn(id, "UPDATE conversations SET settings = ? WHERE id = ?", settings_json,
                               "saving the settings of conversation " + std::to_string(id));
}

Status ChatDb::DeleteConversation(int64_t id) {
  MutexLock lk(&mu_);
  const std::string what = "deleting conversation " + std::to_string(id);
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin(what));
  IMPRESS_RETURN_IF_ERROR(CheckConversation(id));
  {
    // Turns and documents go with it (ON DELETE CASCADE).
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM conversations WHERE id = ?"));
    s.Bind(1, id);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
  }
  IMPRESS_RETURN_IF_ERROR(RemoveOrphanTexts());
  return t.Commit(what);
}

Result<int> ChatDb::AppendTurn(int64_t id, const std::string& role, const std::string& content,
                               const std::string& meta) {
  IMPRESS_RETURN_IF_ERROR(CheckRole(role));
  const std::string what = "saving a turn of conversation " + std::to_string(id);
  int64_t position = 0;
  IMPRESS_RETURN_IF_ERROR(WriteConversation(id, what, [&]() REQUIRES(mu_) -> Status {
    {
      IMPRESS_ASSIGN_OR_RETURN(Stmt s,
                               db_->Prep("SELECT coalesce(max(position) + 1, 0) FROM turns WHERE conversation = ?"));
      s.Bind(1, id);
      IMPRESS_ASSIGN_OR_RETURN(const bool row, s.Step(what));
      if (!row) return Status::Internal(path_ + ": " + what + ": no row");
      position = s.Int(0);
    }
    IMPRESS_ASSIGN_OR_RETURN(Stmt s,
                             db_->Prep("INSERT INTO turns(conversation, position, role, content, meta, created) "
                                       "VALUES(?, ?, ?, ?, ?, ?)"));
    s.Bind(1, id);
    s.Bind(2, position);
    s.Bind(3, role);
    s.BindBlob(4, content);
    s.BindBlob(5, meta);
    s.Bind(6, Now());
    return db_->Run(s, what);
  }));
  return int(position);
}

Status ChatDb::PopTurns(int64_t id, int n) {
  if (n < 0) return Status::InvalidArgument("PopTurns: negative count " + std::to_string(n));
  MutexLock lk(&mu_);
  const std::string what = "removing turns of conversation " + std::to_string(id);
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin(what));
  IMPRESS_RETURN_IF_ERROR(CheckConversation(id));
  int64_t n_turns = 0;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT count(*) FROM turns WHERE conversation = ?"));
    s.Bind(1, id);
    IMPRESS_ASSIGN_OR_RETURN(const bool row, s.Step(what));
    if (!row) return Status::Internal(path_ + ": " + what + ": no row");
    n_turns = s.Int(0);
  }
  if (n > n_turns)
    return Status::OutOfRange(path_ + ": conversation " + std::to_string(id) + " has " + std::to_string(n_turns) +
                              " turns, cannot remove " + std::to_string(n));
  if (n == 0) return Status::Ok();
  {
    // Positions are 0..n_turns-1 (appends and pops only), so the last n are >= n_turns - n.
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM turns WHERE conversation = ? AND position >= ?"));
    s.Bind(1, id);
    s.Bind(2, n_turns - n);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
  }
  IMPRESS_RETURN_IF_ERROR(Touch(id));
  return t.Commit(what);
}

Status ChatDb::SetDocuments(int64_t id, const std::vector<SavedDocument>& docs) {
  const std::string what = "saving the documents of conversation " + std::to_string(id);
  return WriteConversation(id, what, [&]() REQUIRES(mu_) -> Status {
    {
      IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM documents WHERE conversation = ?"));
      s.Bind(1, id);
      IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
    }
    for (size_t i = 0; i < docs.size(); ++i) IMPRESS_RETURN_IF_ERROR(InsertDocument(id, int64_t(i), docs[i], what));
    return RemoveOrphanTexts();
  });
}

Status ChatDb::InsertDocument(int64_t id, int64_t position, const SavedDocument& d, const std::string& what) {
  const std::string key = TextKey(d.text);
  int64_t text_id = 0;
  {
    // Same key: verify the bytes too, so a hash collision can never swap a document's text.
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT id, text = ? FROM texts WHERE key = ?"));
    s.BindBlob(1, d.text);
    s.Bind(2, key);
    IMPRESS_ASSIGN_OR_RETURN(const bool found, s.Step(what));
    if (found) {
      if (s.Int(1) != 1)
        return Status::Internal(path_ + ": document \"" + d.name + "\": content hash " + key +
                                " collides with a different stored text");
      text_id = s.Int(0);
    }
  }
  if (text_id == 0) {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO texts(key, n_bytes, text) VALUES(?, ?, ?)"));
    s.Bind(1, key);
    s.Bind(2, int64_t(d.text.size()));
    s.BindBlob(3, d.text);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what + " (text of \"" + d.name + "\")"));
    text_id = db_->LastInsertRowid();
  }
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO documents(conversation, position, name, path, text_id, "
                                             "n_tokens, attached, private) VALUES(?, ?, ?, ?, ?, ?, ?, ?)"));
  s.Bind(1, id);
  s.Bind(2, position);
  s.Bind(3, d.name);
  s.Bind(4, d.path);
  s.Bind(5, text_id);
  s.Bind(6, d.n_tokens);
  s.Bind(7, int64_t(d.attached ? 1 : 0));
  s.Bind(8, int64_t(d.is_private ? 1 : 0));
  return db_->Run(s, what + " (\"" + d.name + "\")");
}

Result<int64_t> ChatDb::CountStoredTexts() {
  MutexLock lk(&mu_);
  return db_->QueryInt("SELECT count(*) FROM texts", "counting stored texts");
}

}  // namespace impress::persist
