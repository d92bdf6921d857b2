// ChatDb: the app's saved conversations in one SQLite file (WAL, synchronous=FULL, foreign keys).
//
// Owns: conversations (title, created/updated unix seconds, mode, the GUI's settings JSON kept as
// opaque text), their documents (name, original path, byte size, token count, attached flag,
// order; the exact text is stored once per distinct content, keyed by an XXH3-128 hash plus size
// and verified byte for byte, so two conversations attaching the same file share one copy), and
// their turns (role, content, order, an optional opaque JSON meta string such as the request
// label or TTFT).
//
// Every write is one transaction: a crash, a full disk or any failed statement leaves the previous
// state, and the error comes back as a Status naming the file. Opening a file that is not an
// IMPRESS chat database (another SQLite file, garbage, a damaged file) or that a newer build wrote
// fails with a clear message and does not modify the file; older schema versions are migrated in
// one transaction on open (see kChatSchemaVersion in chat-db.cpp for the history).
//
// Internally synchronized (one mutex): any thread may call. The GUI's intended use is one worker
// thread issuing writes after each turn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "chat/conversation.h"

namespace impress::sqlite {
class SqliteDb;
}  // namespace impress::sqlite

namespace impress::persist {

enum class ConversationMode { kDocuments, kRetrieval };
const char* ConversationModeName(ConversationMode m);  // "documents" / "retrieval"

struct ConversationSummary {
  int64_t id = 0;
  std::string title;
  int64_t created = 0;  // unix seconds
  int64_t updated = 0;  // unix seconds: last write to the conversation
  ConversationMode mode = ConversationMode::kDocuments;
  int n_turns = 0;
  int n_documents = 0;
};

struct SavedDocument {
  std::string name;         // for prompts and the UI
  std::string path;         // where it was loaded from (may no longer exist)
  std::string text;         // the exact text (what the prompt was built from)
  int64_t n_tokens = -1;    // token count under the model it was measured with; -1 = unknown
  bool attached = true;     // part of the conversation's context (documents mode)
  bool is_private = false;  // never shared through the team KV tier
  // Filled by Load(): byte size of `text` and its content key (hex XXH3-128 + ":" + size).
  uint64_t n_bytes = 0;
  std::string text_key;
};

struct SavedTurn {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  std::string meta;     // opaque (JSON by convention), may be empty
  int64_t created = 0;  // unix seconds; filled by Load()
};

struct SavedConversation {
  ConversationSummary summary;
  std::string settings;                  // opaque JSON text from the GUI ("" when never set)
  std::vector<SavedDocument> documents;  // in order
  std::vector<SavedTurn> turns;          // in order
};

struct ChatDbOptions {
  // Refuse writes that would grow the file beyond this many bytes (0 = no limit). The writes
  // fail like on a full disk: tests use it to check that a failed write keeps the old state.
  uint64_t max_file_bytes = 0;
  // The clock for created/updated (unix seconds); empty = the system clock.
  std::function<int64_t()> now;
};

// The prompt-side Conversation for a saved one: its attached documents (in order) and turns.
// Rebuilding from the exact saved texts reproduces the same prompt tokens, so the KV store's
// cached prefix of an earlier session is found again.
Conversation ToConversation(const SavedConversation& saved);

class ChatDb {
 public:
  static constexpr int kSchemaVersion = 2;

  // Opens `path`, creating it when missing or empty. Fails (without writing) on a file that is
  // not an IMPRESS chat database, a damaged file, or one with a newer schema version.
  static Result<std::unique_ptr<ChatDb>> Open(const std::string& path, ChatDbOptions options = {});
  ~ChatDb();
  ChatDb(const ChatDb&) = delete;
  ChatDb& operator=(const ChatDb&) = delete;

  const std::string& path() const;

  // All conversations, most recently updated first (ties: newest id first).
  Result<std::vector<ConversationSummary>> ListConversations();
  // A new, empty conversation; returns its id.
  Result<int64_t> CreateConversation(const std::string& title, ConversationMode mode = ConversationMode::kDocuments);
  // Everything about one conversation; NotFound for an unknown id.
  Result<SavedConversation> Load(int64_t id);

  Status RenameConversation(int64_t id, const std::string& title);
  Status SetMode(int64_t id, ConversationMode mode);
  // Stores the GUI's settings text as given (not parsed).
  Status SetSettings(int64_t id, const std::string& settings_json);
  // Deletes the conversation, its turns and documents, and document texts no other
  // conversation uses.
  Status DeleteConversation(int64_t id);

  // Appends a turn; returns its position (0-based). Role must be system, user or assistant.
  Result<int> AppendTurn(int64_t id, const std::string& role, const std::string& content, const std::string& meta = "");
  // Removes the last `n` turns (regenerate). OutOfRange, and nothing changes, when the
  // conversation has fewer than `n` turns.
  Status PopTurns(int64_t id, int n);

  // Replaces the conversation's document list with `docs` (in order). Texts not yet stored
  // are added; texts no conversation uses any more are removed. n_bytes/text_key are ignored.
  Status SetDocuments(int64_t id, const std::vector<SavedDocument>& docs);

  // Number of distinct document texts stored (for tests and the UI's storage view).
  Result<int64_t> CountStoredTexts();

 private:
  ChatDb(std::unique_ptr<sqlite::SqliteDb> db, ChatDbOptions options);
  int64_t Now() const;
  Status CheckConversation(int64_t id) REQUIRES(mu_);  // NotFound unless it exists
  Status Touch(int64_t id) REQUIRES(mu_);              // updated = now
  Status RemoveOrphanTexts() REQUIRES(mu_);
  // The skeleton of every write to one conversation: under mu_, one transaction that checks the
  // conversation exists (NotFound), runs `body`, marks it updated and commits; any failure
  // rolls the whole write back. `what` names the write in errors.
  // `body` runs with mu_ held.
  Status WriteConversation(int64_t id, const std::string& what, const std::function<Status()>& body) EXCLUDES(mu_);
  // One column of the conversation's row (`update_sql` binds the value as 1 and the id as 2).
  Status SetConversationColumn(int64_t id, const char* update_sql, std::string_view value, const std::string& what);
  // One document row (and its text, stored once per content); inside a write, mu_ held.
  Status InsertDocument(int64_t id, int64_t position, const SavedDocument& d, const std::string& what) REQUIRES(mu_);

  Mutex mu_;
  const std::unique_ptr<sqlite::SqliteDb> db_ PT_GUARDED_BY(mu_);
  // Constant after construction.
  const std::string path_;
  const ChatDbOptions options_;
};

}  // namespace impress::persist
