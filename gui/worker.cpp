#include "gui/worker.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include "engine/model/model-loader.h"
#include "gui/gui-config.h"
#include "gui/model-info.h"

namespace impress::gui {

namespace {
// Streamed text is published as often as the window redraws while busy (10 Hz by default): a
// snapshot the window never draws would only be a copy made on the model's time.
constexpr auto kStreamPublishInterval = std::chrono::milliseconds(100);
// Progress alone (prefill, ingestion) redraws less often: each frame costs the model CPU time.
constexpr auto kProgressPublishInterval = std::chrono::milliseconds(100);
constexpr size_t kMaxMessages = 50;
}  // namespace

Worker::Worker(WorkerOptions options) : options_(std::move(options)), model_path_(options_.session.model_path) {
  draft_.settings = options_.settings;
  if (!options_.recent_models_path.empty()) draft_.recent_models = LoadRecentModels(options_.recent_models_path);
  draft_.store_dir = options_.session.store_dir;
  draft_.status = "starting";
  published_ = std::make_shared<const AppSnapshot>(draft_);
  thread_ = std::thread([this] { Run(); });
}

Worker::~Worker() {
  {
    MutexLock lock(&mu_);
    quit_ = true;
    queue_.clear();
  }
  cancel_.store(true);
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t Worker::Send(Command c) {
  uint64_t seq;
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(c));
    seq = ++n_sent_;
  }
  cv_.Signal();
  return seq;
}

void Worker::Stop() { cancel_.store(true); }

std::shared_ptr<const AppSnapshot> Worker::Snapshot() const {
  MutexLock lock(&mu_);
  return published_;
}

uint64_t Worker::commands_sent() const {
  MutexLock lock(&mu_);
  return n_sent_;
}

void Worker::Publish(bool force, bool progress_only) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_publish_ < (progress_only ? kProgressPublishInterval : kStreamPublishInterval)) return;
  last_publish_ = now;
  draft_.version++;
  auto snap = std::make_shared<const AppSnapshot>(draft_);
  MutexLock lock(&mu_);
  published_ = std::move(snap);
}

void Worker::Message(std::string m) {
  spdlog::info("gui: {}", m);
  draft_.messages.push_back(std::move(m));
  draft_.messages_total++;
  if (draft_.messages.size() > kMaxMessages) draft_.messages.erase(draft_.messages.begin());
}

void Worker::CutChat(size_t keep) {
  if (keep < draft_.chat.size()) draft_.chat.resize(keep);
  draft_.chat_epoch++;
  draft_.chat_kept = draft_.chat.size();
}

void Worker::Run() {
  // Lower this thread's priority; threads it creates (the compute pool) inherit it, so the UI
  // thread wins the two cores when both want them.
  if (options_.worker_nice > 0) setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), options_.worker_nice);
  OpenSession(options_.documents);
  while (true) {
    Command c;
    {
      MutexLock lock(&mu_);
      while (!quit_ && queue_.empty()) cv_.Wait(&mu_);
      if (quit_) break;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    cancel_.store(false);
    Execute(c);
    draft_.commands_done++;
    Publish();
  }
  chat_.reset();
  session_.reset();  // waits for the background store write
}

void Worker::OpenSession(const std::vector<std::string>& documents) {
  draft_.phase = WorkerPhase::kLoading;
  draft_.model_path = model_path_;
  draft_.status = "loading " + std::filesystem::path(model_path_).filename().string();
  draft_.progress = 0;
  Publish();
  ChatSessionOptions so = options_.session;
  so.model_path = model_path_;
  so.device_bytes = MibBytes(draft_.settings.device_budget_mb);
  so.host_bytes = MibBytes(draft_.settings.host_budget_mb);
  so.ssd_bytes = MibBytes(draft_.settings.ssd_budget_mb);
  so.reorder_interval = std::chrono::minutes(draft_.settings.reorder_interval_min);
  auto s = ChatSession::Open(so, [this](uint64_t done, uint64_t total, std::string_view) {
    draft_.progress = total ? double(done) / double(total) : -1;
    Publish(false);
    return true;
  });
  draft_.progress = -1;
  if (!s.ok()) {
    draft_.phase = WorkerPhase::kFailed;
    draft_.status = "cannot start: " + s.status().ToString();
    Message(draft_.status);
    Publish();
    return;
  }
  session_ = std::move(*s);
  if (session_->store()) session_->store()->SetPolicy(draft_.settings.policy);
  FollowModelSampling();
  const ModelConfig& cfg = session_->context().config();
  draft_.model_name = cfg.name;
  auto estimate = EstimateModel(model_path_);
  draft_.model_bytes = estimate.ok() ? estimate->total_bytes() : 0;
  draft_.n_layer = cfg.n_layer;
  draft_.n_ctx = cfg.n_ctx_train;
  draft_.kv_bytes_per_token = KvBytes(cfg, 1);
  // Idle only once the saved conversation and the start documents are in (a script's first
  // `wait` waits for that).
  draft_.phase = WorkerPhase::kIngesting;
  draft_.status = "loaded " + cfg.name;
  RefreshStoreStats();
  Publish();
  chat_ = std::make_unique<ChatController>(*session_, MakeChatEvents());
  chat_->set_max_tokens(draft_.settings.max_tokens);
  if (!options_.db_path.empty()) {
    draft_.db_path = options_.db_path;
    if (!chat_->OpenDatabase(options_.db_path).ok()) draft_.db_path.clear();  // noticed
  }
  for (const std::string& path : documents) {
    AddDocument(path);
    draft_.phase = WorkerPhase::kIngesting;  // still starting (AddDocument ends idle)
  }
  SyncChatState();
  RefreshConversationList();
  RefreshCacheViews();
  Ready();
  draft_.status = "ready: " + cfg.name;
  Publish();
}

ChatEvents Worker::MakeChatEvents() {
  ChatEvents e;
  e.notice = [this](const std::string& m) { Message(m); };
  e.activity = [this](const std::string& what) {
    draft_.status = what;
    draft_.progress = -1;
    Publish();
  };
  e.progress = [this](uint64_t done, uint64_t total, std::string_view) {
    draft_.progress = total ? double(done) / double(total) : -1;
    Publish(false, /*progress_only=*/true);
    return true;
  };
  e.conversation_changed = [this](const persist::SavedConversation& saved, ConversationChange change) {
    ShowConversation(saved, change);
  };
  return e;
}

void Worker::SyncChatState() {
  if (!chat_) return;
  draft_.conversation_id = chat_->conversation_id();
  draft_.conversation_title = chat_->title();
  draft_.retrieval = chat_->retrieval();
  draft_.context_tokens = chat_->context_tokens();
}

void Worker::Ready() {
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready";
  draft_.progress = -1;
}

void Worker::Execute(const Command& c) {
  if (c.kind == Command::Kind::kLoadModel) {  // also when no model is loaded (another may load)
    LoadModel(c.text);
    return;
  }
  if (!session_) {
    Message("the model is not loaded: " + draft_.status);
    return;
  }
  using K = Command::Kind;
  switch (c.kind) {
    case K::kAddDocument: AddDocument(c.text); break;
    case K::kRemoveDocument: RemoveDocument(c.index); break;
    case K::kSetAttached: SetAttached(c.index, c.flag); break;
    case K::kSetPrivate: SetPrivate(c.index, c.flag); break;
    case K::kAsk: Ask(c.text, false); break;
    case K::kRegenerate: AskAgain(/*with_fidelity=*/false); break;
    case K::kAskAgain: AskAgain(/*with_fidelity=*/true); break;
    case K::kNewConversation:
      chat_->NewConversation(/*keep_documents=*/true);
      RefreshCacheViews();
      RefreshConversationList();
      break;
    case K::kOpenConversation: OpenConversation(c.id); break;
    case K::kDeleteConversation:
      if (chat_->DeleteConversation(c.id).ok()) RefreshCacheViews();
      RefreshConversationList();
      break;
    case K::kRenameConversation:
      (void)chat_->RenameConversation(c.id, c.text);  // a failure is noticed
      RefreshConversationList();
      break;
    case K::kSetRetrieval: SetRetrieval(c.flag); break;
    case K::kPinDocument:
    case K::kDropDocumentCache: CacheDocument(c.index, c.kind, c.flag); break;
    case K::kSettings: ApplySettings(c.settings); break;
    case K::kReorderNow: ReorderNow(); break;
    case K::kDropCache: DropCache(); break;
    case K::kLoadModel: break;  // above
  }
  SyncChatState();
}

}  // namespace impress::gui
