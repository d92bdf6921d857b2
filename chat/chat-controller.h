// ChatController: the rules of one chat over a collection of documents, shared by every front
// end (the GUI's worker, the terminal chat, a local server):
//   - which documents the conversation's context carries, within the model's context budget
//     (chat/context-budget.h), and where each sits in the prompt's tokens;
//   - retrieval mode: each question carries the best passages (FTS5) of the attached documents
//     instead of the whole documents;
//   - asking, and asking again (the last question and its answer are popped first);
//   - the saved copy (ChatDb) kept in step with the in-memory conversation after every change;
//   - each attached document's cached KV in the store (residency, pin, drop), with the store
//     quiesced (background write finished, the last request's match released) before it changes.
//
// It drives a ChatSession it does not own (the session outlives it). What the user should read
// about an outcome (a document too long to attach, a save that failed, a pin of a partly cached
// document) goes to ChatEvents::notice, with the same words for every front end; the returned
// Status tells the caller what happened. Errors of Ask/Answer/PrepareQuestion are not noticed:
// the caller shows them where the answer would be.
//
// Thread contract: requires external synchronization, like the session (one thread, e.g. the
// GUI's worker). Events run on that thread, inside the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "chat/chat-db.h"
#include "chat/chat-session.h"
#include "chat/context-budget.h"
#include "chat/document.h"
#include "chat/passage-index.h"

namespace impress {

// One document of the conversation's collection.
struct ChatDocument {
  Document doc;
  int n_tokens = 0;      // under the session's tokenizer
  bool attached = true;  // part of the context (documents mode); in retrieval mode: searched
};

// Where one document's KV is, from the store. Tokens are of [span_begin, span_end) of the
// context prefix; device and host tokens are also on SSD.
struct DocumentCacheState {
  int span_begin = -1, span_end = -1;  // -1: not attached, retrieval mode, no store, or unknown
  uint64_t tokens_cached = 0, tokens_device = 0, tokens_host = 0;
  bool pinned = false;
  std::string residency;  // one line: "not cached", "120 of 300 tokens cached: ...", ...
};

// How the open conversation changed (ChatEvents::conversation_changed).
enum class ConversationChange {
  kOpened,               // a saved conversation was opened: its turns are the conversation's
  kNew,                  // a new, empty conversation without documents
  kNewKeepingDocuments,  // a new, empty conversation; the documents stayed
};

struct ChatEvents {
  std::function<void(const std::string&)> notice;    // a message for the user
  std::function<void(const std::string&)> activity;  // what runs now ("tokenizing a.md")
  ProgressFn progress;                               // tokenizing progress (its result is ignored)
  // After the open conversation was replaced: `saved` is what was opened (for kNew*: its id
  // and title, no turns). Front ends redraw their transcript from it.
  std::function<void(const persist::SavedConversation& saved, ConversationChange change)> conversation_changed;
};

// A document's key in the passage index: its path and a hash of its text, so a changed file is
// indexed again and an unchanged one (a reopened conversation) is not.
std::string PassageKey(const Document& doc);

// A conversation's title from its first question (one line, at most 60 bytes).
std::string TitleFromQuestion(const std::string& question);

// The opaque meta saved with an answer turn (JSON: label, ttft_ms, n_matched).
std::string AnswerMeta(const std::string& label, const RequestReport& report);

class ChatController {
 public:
  static constexpr const char* kUntitled = "New conversation";

  ChatController(ChatSession& session, ChatEvents events);
  ~ChatController();
  ChatController(const ChatController&) = delete;
  ChatController& operator=(const ChatController&) = delete;

  // ---- Saved conversations (chat-controller-saved.cpp) ----
  // Opens the database at `path` (and the passage index at path + ".passages"), then the most
  // recent conversation, or a new one when there is none. An error (nothing is saved this run)
  // when the database cannot be opened; without the passage index only retrieval is unavailable.
  Status OpenDatabase(const std::string& path);
  bool saving() const { return db_ != nullptr; }
  bool has_passage_index() const { return passages_ != nullptr; }
  Result<std::vector<persist::ConversationSummary>> ListConversations();
  // Replaces the conversation with saved one `id`: its documents (counted again with this
  // model's tokenizer) and turns. Returns what was loaded (the front end shows the turns).
  Result<persist::SavedConversation> OpenConversation(int64_t id);
  // Forgets the turns (and the documents unless keep_documents); saved as a new conversation
  // when a database is open.
  void NewConversation(bool keep_documents);
  // Deletes saved conversation `id`; when it is the open one, the most recent other opens (or a new one).
  Status DeleteConversation(int64_t id);
  Status RenameConversation(int64_t id, const std::string& title);
  int64_t conversation_id() const { return conv_id_; }  // 0: not saved
  const std::string& title() const { return title_; }

  // ---- Documents and modes (chat-controller.cpp) ----
  // Answer tokens set aside in the budget (the front end's max_tokens setting).
  void set_max_tokens(int n) { max_tokens_ = n; }
  ContextBudget budget() const;
  // Loads and tokenizes `path` and adds it to the collection; in documents mode it is attached
  // only when it fits the budget. Returns its index. Errors: unreadable or not text
  // (LoadDocument's); InvalidArgument when the same file with the same text is already there.
  Result<size_t> AddDocument(const std::string& path);
  // The same for a document already loaded (LoadDocument's checks passed).
  Result<size_t> AddDocument(Document doc);
  Status RemoveDocument(size_t index);  // OutOfRange for a bad index
  // Attaching is refused (ResourceExhausted) in documents mode when the document would
  // overflow the context beside those attached.
  Status SetAttached(size_t index, bool attached);
  // A private document never leaves the machine: a question whose prompt holds it (or, in
  // retrieval mode, a passage of it) neither asks the team KV tier nor publishes to it. Saved
  // with the conversation.
  Status SetPrivate(size_t index, bool is_private);
  // Retrieval on needs the passage index (Unsupported without it). Off: the attached documents are
  // kept in order while they fit; the others are detached.
  Status SetRetrieval(bool on);
  const std::vector<ChatDocument>& documents() const { return docs_; }
  bool retrieval() const { return retrieval_; }
  int context_tokens() const { return n_context_tokens_; }  // tokens of the documents the context carries

  // ---- Questions (chat-controller.cpp) ----
  // Makes the conversation's context ready for `question`: in retrieval mode its documents
  // become the best passages of the attached documents within budget().RetrievalTokens();
  // returns their names ("a.md (passage 2)"). Documents mode: nothing to do, no names.
  Result<std::vector<std::string>> PrepareQuestion(const std::string& question);
  // Answers `question` over the prepared context (session Ask), restores the context after a
  // retrieval question, and saves the exchange (meta: AnswerMeta(label, ...)); the first saved
  // question names an untitled conversation. On failure the pipeline's match is released.
  Result<ChatAnswer> Answer(const std::string& question, const AskOptions& options, const std::string& label);
  // PrepareQuestion then Answer; `passages` (optional) receives the passage names.
  Result<ChatAnswer> Ask(const std::string& question, const AskOptions& options, const std::string& label,
                         std::vector<std::string>* passages = nullptr);
  // Removes the last question and its answer from the conversation and the saved copy, for
  // regenerate / ask again; returns the question. OutOfRange (nothing changes) unless the last
  // two turns are a question and its answer.
  Result<std::string> PopLastExchange();

  // ---- The store (chat-controller-cache.cpp) ----
  // Waits for the background store write and releases the last request's match, so the store
  // may evict, drop or reorder what that request used. Ok without a store.
  Status QuiesceStore();
  // Per document (parallel to documents()).
  std::vector<DocumentCacheState> DocumentCaches() const;
  // Pins (or unpins) the cached KV of document `index`'s prefix. InvalidArgument unless the
  // document is attached in documents mode with a store.
  Status PinDocument(size_t index, bool pin);
  // Drops the cached KV from document `index` on (and what extends it); returns the tokens dropped.
  Result<uint64_t> DropDocumentCache(size_t index);
  // The prompt prefix the attached documents form (what the spans index); empty when none.
  std::span<const int32_t> context_prefix() const { return context_prefix_; }

 private:
  void Notice(const std::string& text) const;
  void Activity(const std::string& text) const;
  int CountTokens(const std::string& text) const;  // with progress events
  void IndexPassages(const Document& doc);         // unless already indexed
  void ReindexSavedDocuments();                    // every saved conversation's documents
  // The conversation's documents from the collection (attached ones, none in retrieval mode),
  // and where each sits in the prompt.
  void SyncConversationDocuments();
  void SaveDocuments();
  void SaveExchange(const std::string& question, const std::string& meta);
  // Document `index`'s cache state when its cache may be pinned or dropped (attached, its place
  // in the prompt known, a store); otherwise the error (noticed when it is the user's doing).
  Result<DocumentCacheState> CacheTarget(size_t index) const;

  ChatSession& session_;
  const ChatEvents events_;
  int max_tokens_ = 256;
  std::vector<ChatDocument> docs_;
  bool retrieval_ = false;
  int n_context_tokens_ = 0;
  std::vector<int32_t> context_prefix_;         // the attached documents' prompt prefix
  std::vector<Conversation::TokenSpan> spans_;  // parallel to the attached documents
  std::unique_ptr<persist::ChatDb> db_;
  std::unique_ptr<persist::PassageIndex> passages_;
  int64_t conv_id_ = 0;
  std::string title_ = kUntitled;
};

}  // namespace impress
