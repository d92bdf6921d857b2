// Worker: the ONE thread that owns the ChatSession (model, tokenizer, KV store) for the GUI.
// The UI thread sends commands (a queue) and reads the latest AppSnapshot; it never waits for
// inference. Stop() is the one direct call: it raises the cancel flag the running request polls.
// The chat's rules (context budget, saved conversations, retrieval, the documents' cache) are
// ChatController's; the worker runs them on its thread and turns their outcomes into snapshots.
// Its methods live in files by topic: worker.cpp (thread, queue, publishing, dispatch),
// worker-documents.cpp, worker-conversations.cpp, worker-ask.cpp, worker-store.cpp, worker-model.cpp.
//
// Thread contract: Send, Stop and Snapshot are internally synchronized and never block on
// inference (they take a mutex held only for a queue push or a pointer swap). The ChatSession
// lives and dies on the worker thread. The destructor cancels the running request and joins.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "chat/chat-controller.h"
#include "chat/chat-session.h"
#include "gui/app-snapshot.h"

namespace impress::gui {

struct WorkerOptions {
  ChatSessionOptions session;          // model path, store dir, threads (budgets come from settings)
  TuningSettings settings;             // the knobs at start
  std::vector<std::string> documents;  // attached at start
  std::string settings_path;           // where kSettings commands save the knobs; empty: not saved
  std::string db_path;                 // saved conversations (SQLite); empty: not saved
  std::string recent_models_path;      // recently loaded models (JSON); empty: not remembered
  int worker_nice = 10;                // the worker (and the compute threads it starts) yield to the UI
  size_t max_requests = 64;            // request history kept for the panels
};

struct Command {
  enum class Kind {
    kAddDocument,      // text = path
    kRemoveDocument,   // index
    kSetAttached,      // index, flag
    kSetPrivate,       // index, flag: never share the document through the team KV tier
    kAsk,              // text = question
    kRegenerate,       // the last question again (the last answer is replaced)
    kAskAgain,         // the last question again with the current settings, plus the fidelity check
    kNewConversation,  // forget the turns (documents stay)
    kSettings,         // settings (budgets and policy applied to the store at once)
    kReorderNow,
    kDropCache,           // evict every unlocked cached prefix from the store
    kPinDocument,         // index, flag: keep (or stop keeping) the document's cached prefix
    kDropDocumentCache,   // index: drop the cached KV from the document on (and what extends it)
    kOpenConversation,    // id
    kDeleteConversation,  // id
    kRenameConversation,  // id, text
    kSetRetrieval,        // flag: retrieve passages per question instead of attaching documents
    kLoadModel,           // text = a .gguf file or a Hugging Face folder: replaces the model when it fits
  };
  Kind kind = Kind::kAsk;
  std::string text;
  int index = -1;
  bool flag = false;
  int64_t id = 0;
  TuningSettings settings;
};

// Command builders (designated initializers would leave members out under -Wextra).
inline Command MakeCommand(Command::Kind kind, std::string text = {}, int index = -1, bool flag = false) {
  Command c;
  c.kind = kind;
  c.text = std::move(text);
  c.index = index;
  c.flag = flag;
  return c;
}
inline Command ConversationCommand(Command::Kind kind, int64_t id, std::string text = {}) {
  Command c;
  c.kind = kind;
  c.id = id;
  c.text = std::move(text);
  return c;
}
inline Command SettingsCommand(const TuningSettings& s) {
  Command c;
  c.kind = Command::Kind::kSettings;
  c.settings = s;
  return c;
}

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Queues a command; returns its sequence number (1, 2, ...). Done when
  // Snapshot()->commands_done >= that number.
  uint64_t Send(Command c);
  // Cancels the request in flight (tokens stop within one decode step, a prefill within a layer batch).
  void Stop();
  std::shared_ptr<const AppSnapshot> Snapshot() const;
  uint64_t commands_sent() const;

 private:
  // worker.cpp: the thread, publishing, the dispatch.
  void Run();
  void Execute(const Command& c);
  // Loads model_path_ with the store and saved conversations; then attaches `documents`.
  void OpenSession(const std::vector<std::string>& documents);
  ChatEvents MakeChatEvents();
  void SyncChatState();  // the controller's ids, title, mode and context size into the draft
  void Message(std::string m);
  void CutChat(size_t keep);  // keeps the first `keep` chat entries (see AppSnapshot::chat_epoch)
  void Publish(bool force = true, bool progress_only = false);
  void Ready();  // phase idle, status "ready"
  // worker-documents.cpp: documents and modes.
  void AddDocument(const std::string& path);
  void RemoveDocument(int index);
  void SetAttached(int index, bool attached);
  void SetPrivate(int index, bool is_private);
  void SetRetrieval(bool on);
  // worker-model.cpp: switching the model (refused before unloading when it will not fit).
  void LoadModel(const std::string& path);
  // worker-conversations.cpp: saved conversations and the transcript they show.
  void ShowConversation(const persist::SavedConversation& saved, ConversationChange change);
  void OpenConversation(int64_t id);
  void RefreshConversationList();
  // worker-ask.cpp: questions.
  void Ask(const std::string& question, bool again);
  void AskAgain(bool with_fidelity);  // regenerate (false) / ask again with the fidelity check (true)
  AskOptions MakeAskOptions();
  // The fidelity check before an "ask again"; false when the user stopped it (the ask ends).
  bool RunFidelity(const std::string& question, const AskOptions& o, RequestRecord* record);
  void FinishRequest(ChatAnswer& answer, size_t entry, std::shared_ptr<RequestRecord> record);
  // worker-store.cpp: the store's knobs, commands and views.
  void ApplySettings(const TuningSettings& s);
  // Unless the user set the sampling knobs, answers sample as the loaded model recommends.
  void FollowModelSampling();
  void ReorderNow();
  void DropCache();
  void CacheDocument(int index, Command::Kind kind, bool flag);
  void RefreshStoreStats();
  // The documents' entries with the store's view of them (residency, pins) and its tree; after
  // requests and commands that change documents or the cache.
  void RefreshCacheViews();

  // Constant after construction.
  const WorkerOptions options_;

  // Shared with the UI thread.
  mutable Mutex mu_;
  CondVar cv_;  // a command was queued, or quit_ was set
  std::deque<Command> queue_ GUARDED_BY(mu_);
  uint64_t n_sent_ GUARDED_BY(mu_) = 0;
  bool quit_ GUARDED_BY(mu_) = false;
  std::shared_ptr<const AppSnapshot> published_ GUARDED_BY(mu_);
  std::atomic<bool> cancel_{false};

  // Worker thread only.
  std::string model_path_;  // the model loaded (or being loaded)
  std::unique_ptr<ChatSession> session_;
  std::unique_ptr<ChatController> chat_;  // the chat's rules over session_ (destroyed first)
  AppSnapshot draft_;                     // the next snapshot, edited in place
  std::chrono::steady_clock::time_point last_publish_;
  int next_request_id_ = 1;

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace impress::gui
