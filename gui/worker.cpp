#include "gui/worker.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "gui/gui-config.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {
constexpr auto kStreamPublishInterval = std::chrono::milliseconds(33);
constexpr size_t kMaxMessages = 50;

uint64_t Mib(double mb) { return uint64_t(std::max(0.0, mb) * double(1 << 20)); }
}  // namespace

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {
  draft_.settings = options_.settings;
  draft_.store_dir = options_.session.store_dir;
  draft_.status = "starting";
  published_ = std::make_shared<const AppSnapshot>(draft_);
  thread_ = std::thread([this] { Run(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    queue_.clear();
  }
  cancel_.store(true);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Worker::Send(Command c) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(c));
    seq = ++n_sent_;
  }
  cv_.notify_one();
  return seq;
}

void Worker::Stop() { cancel_.store(true); }

std::shared_ptr<const AppSnapshot> Worker::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

uint64_t Worker::commands_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_sent_;
}

void Worker::Publish(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_publish_ < kStreamPublishInterval) return;
  last_publish_ = now;
  draft_.version++;
  auto snap = std::make_shared<const AppSnapshot>(draft_);
  std::lock_guard<std::mutex> lock(mu_);
  published_ = std::move(snap);
}

void Worker::Message(std::string m) {
  spdlog::info("gui: {}", m);
  draft_.messages.push_back(std::move(m));
  draft_.messages_total++;
  if (draft_.messages.size() > kMaxMessages) draft_.messages.erase(draft_.messages.begin());
}

void Worker::Run() {
  // Lower this thread's priority; threads it creates (the compute pool) inherit it, so the UI
  // thread wins the two cores when both want them.
  if (options_.worker_nice > 0) setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), options_.worker_nice);
  OpenSession();
  while (true) {
    Command c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_) break;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    cancel_.store(false);
    Execute(c);
    draft_.commands_done++;
    Publish();
  }
  session_.reset();  // waits for the background store write
}

void Worker::OpenSession() {
  draft_.phase = WorkerPhase::kLoading;
  draft_.status = "loading " + std::filesystem::path(options_.session.model_path).filename().string();
  draft_.progress = 0;
  Publish();
  ChatSessionOptions so = options_.session;
  so.device_bytes = Mib(draft_.settings.device_budget_mb);
  so.host_bytes = Mib(draft_.settings.host_budget_mb);
  so.ssd_bytes = Mib(draft_.settings.ssd_budget_mb);
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
  const ModelConfig& cfg = session_->context().config();
  draft_.model_name = cfg.name;
  draft_.n_layer = cfg.n_layer;
  draft_.n_ctx = cfg.n_ctx_train;
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready: " + cfg.name;
  RefreshStoreStats();
  Publish();
  for (const std::string& path : options_.documents) AddDocument(path);
  Publish();
}

void Worker::RefreshStoreStats() {
  if (session_ && session_->store()) draft_.store = session_->store()->Stats();
}

void Worker::Execute(const Command& c) {
  if (!session_) {
    Message("the model is not loaded: " + draft_.status);
    return;
  }
  using K = Command::Kind;
  switch (c.kind) {
    case K::kAddDocument: AddDocument(c.text); break;
    case K::kRemoveDocument:
      if (c.index >= 0 && size_t(c.index) < docs_.size()) {
        Message("removed " + draft_.documents[c.index].name);
        docs_.erase(docs_.begin() + c.index);
        draft_.documents.erase(draft_.documents.begin() + c.index);
        SyncConversationDocuments();
      }
      break;
    case K::kSetAttached:
      if (c.index >= 0 && size_t(c.index) < docs_.size()) {
        draft_.documents[c.index].attached = c.flag;
        SyncConversationDocuments();
      }
      break;
    case K::kAsk: Ask(c.text, false); break;
    case K::kRegenerate:
    case K::kAskAgain: {
      const auto& turns = session_->conversation().turns();
      if (turns.size() < 2 || turns[turns.size() - 2].role != "user") {
        Message("nothing to ask again yet: ask a question first");
        break;
      }
      const std::string question = turns[turns.size() - 2].content;
      std::vector<ChatMessage> keep(turns.begin(), turns.end() - 2);
      session_->conversation().ClearTurns();
      for (auto& m : keep) session_->conversation().AddTurn(m.role, m.content);
      if (c.kind == K::kRegenerate) {
        // The last answer is replaced: drop its chat entries.
        while (!draft_.chat.empty() && draft_.chat.back().role != "user") draft_.chat.pop_back();
        if (!draft_.chat.empty()) draft_.chat.pop_back();
      }
      Ask(question, c.kind == K::kAskAgain);
      break;
    }
    case K::kNewConversation:
      session_->conversation().ClearTurns();
      draft_.chat.clear();
      draft_.chat.push_back({"info", "new conversation (documents stay attached)", nullptr});
      break;
    case K::kSettings: ApplySettings(c.settings); break;
    case K::kReorderNow: {
      if (!session_->store()) {
        Message("no KV store: nothing to reorder");
        break;
      }
      draft_.status = "reordering";
      Publish();
      (void)session_->pipeline().WaitForStore();
      auto r = session_->store()->ReorderNow();
      if (!r.ok()) Message("reorder failed: " + r.status().ToString());
      else
        Message(fmt::format("reorder: {} of {} segments rewritten, {} written", r->segments_reordered,
                            r->segments_seen, FormatBytes(r->bytes_written)));
      RefreshStoreStats();
      draft_.status = "ready";
      break;
    }
    case K::kDropCache: {
      if (!session_->store()) break;
      (void)session_->pipeline().WaitForStore();
      auto r = session_->store()->EvictNodes(UINT64_MAX);
      if (!r.ok()) Message("dropping the cache failed: " + r.status().ToString());
      else Message(fmt::format("dropped {} cached prefix node(s)", *r));
      RefreshStoreStats();
      break;
    }
  }
}

void Worker::AddDocument(const std::string& path) {
  draft_.status = "reading " + path;
  Publish();
  auto doc = LoadDocument(path);
  if (!doc.ok()) {
    Message("cannot add document: " + doc.status().ToString());
    draft_.status = "ready";
    return;
  }
  draft_.status = "tokenizing " + doc->name;
  Publish();
  DocumentEntry e;
  e.path = doc->path;
  e.name = doc->name;
  e.bytes = doc->text.size();
  e.n_tokens = int(session_->context().tokenizer().Encode(doc->text, false, false).size());
  e.residency = "not cached";
  int attached_tokens = 0;
  for (const DocumentEntry& d : draft_.documents)
    if (d.attached) attached_tokens += d.n_tokens;
  const int room = draft_.n_ctx - draft_.settings.max_tokens - 64;  // the question and the template need some
  if (e.n_tokens > room) {
    e.attached = false;
    Message(fmt::format("{} has {} tokens: longer than the model's context ({} tokens, {} kept for the answer); "
                        "it is listed but not attached",
                        e.name, e.n_tokens, draft_.n_ctx, draft_.settings.max_tokens));
  } else if (attached_tokens + e.n_tokens > room) {
    e.attached = false;
    Message(fmt::format("{} ({} tokens) would overflow the context with the {} tokens already attached; "
                        "detach another document to use it",
                        e.name, e.n_tokens, attached_tokens));
  } else {
    Message(fmt::format("added {} ({} tokens)", e.name, e.n_tokens));
  }
  docs_.push_back(std::move(*doc));
  draft_.documents.push_back(std::move(e));
  SyncConversationDocuments();
  draft_.status = "ready";
}

void Worker::SyncConversationDocuments() {
  Conversation& conv = session_->conversation();
  conv.ClearDocuments();
  int n = 0;
  for (size_t i = 0; i < docs_.size(); ++i) {
    if (!draft_.documents[i].attached) continue;
    conv.AddDocument(docs_[i]);
    n += draft_.documents[i].n_tokens;
  }
  draft_.context_tokens = n;
}

void Worker::ApplySettings(const TuningSettings& s) {
  const TuningSettings old = draft_.settings;
  draft_.settings = s;
  if (store::PrefixStore* st = session_->store()) {
    if (s.device_budget_mb != old.device_budget_mb) st->SetTierBudget(store::Tier::kDevice, Mib(s.device_budget_mb));
    if (s.host_budget_mb != old.host_budget_mb) st->SetTierBudget(store::Tier::kHost, Mib(s.host_budget_mb));
    if (s.ssd_budget_mb != old.ssd_budget_mb)
      if (Status r = st->SetSsdBudget(Mib(s.ssd_budget_mb)); !r.ok()) Message("SSD budget: " + r.ToString());
    if (s.policy != old.policy) st->SetPolicy(s.policy);
    RefreshStoreStats();
  }
  if (!options_.settings_path.empty())
    if (Status r = SaveTuning(options_.settings_path, s); !r.ok()) Message("settings not saved: " + r.ToString());
}

void Worker::Ask(const std::string& question, bool again) {
  const TuningSettings& t = draft_.settings;
  AskOptions o;
  o.pipeline = t.pipeline;
  o.pipeline.record_importance = true;
  o.sampling.temperature = t.temperature;
  o.max_tokens = t.max_tokens;
  o.cancel = &cancel_;

  auto record = std::make_shared<RequestRecord>();
  record->id = next_request_id_++;
  record->question = question;
  record->label = fmt::format("#{} {} a={:.2f} r={:.2f}", record->id, SystemName(t.pipeline.system),
                              t.pipeline.alpha, t.pipeline.keep);
  if (again) draft_.chat.push_back({"info", "asked again with " + record->label, nullptr});
  else draft_.chat.push_back({"user", question, nullptr});

  if (again && t.fidelity_tokens > 0) {
    draft_.phase = WorkerPhase::kFidelity;
    draft_.status = "fidelity check against the full prefix KV";
    Publish();
    auto f = session_->Fidelity(question, o, t.fidelity_tokens);
    if (f.ok()) {
      record->has_fidelity = true;
      record->fidelity = std::move(*f);
      record->fidelity.report = {};  // the panels draw the answer's own report
      record->fidelity.report_full = {};
    } else {
      Message("fidelity check failed: " + f.status().ToString());
    }
  }

  draft_.chat.push_back({"assistant", "", nullptr, /*streaming=*/true});
  const size_t entry = draft_.chat.size() - 1;
  draft_.phase = WorkerPhase::kPrefill;
  draft_.status = "prefill";
  draft_.progress = 0;
  Publish();
  o.on_prefill_progress = [&](uint64_t done, uint64_t total, std::string_view) {
    draft_.progress = total ? double(done) / double(total) : -1;
    Publish(false);
    return !cancel_.load();
  };
  o.on_text = [&](const std::string& piece) {
    if (draft_.phase != WorkerPhase::kDecoding) {
      draft_.phase = WorkerPhase::kDecoding;
      draft_.status = "answering";
      draft_.progress = -1;
    }
    draft_.chat[entry].text += piece;
    Publish(false);
    return !cancel_.load();
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto a = session_->Ask(question, o);
  record->wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  draft_.progress = -1;
  if (!a.ok()) {
    draft_.chat[entry] = {"error", a.status().ToString(), nullptr};
    Message("the question failed: " + a.status().ToString());
    draft_.phase = WorkerPhase::kIdle;
    draft_.status = "ready";
    return;
  }
  // The store write runs in the background; wait for it so the tier and tree panels show it.
  draft_.phase = WorkerPhase::kStoring;
  draft_.status = "storing the new KV";
  draft_.chat[entry].streaming = false;
  draft_.chat[entry].stopped = a->stopped_by_user;
  Publish();
  if (auto w = session_->pipeline().WaitForStore(); !w.ok())
    Message("the answer's KV was not stored: " + w.status().ToString());

  record->report = std::move(a->report);
  record->tokens_per_s = record->report.decode_tok_s();
  const auto& seq = session_->pipeline().sequence();
  const Tokenizer& tok = session_->context().tokenizer();
  const int n_matched = std::min<int>(record->report.n_matched, int(seq.size()));
  record->prefix_pieces.reserve(n_matched);
  for (int i = 0; i < n_matched; ++i) record->prefix_pieces.push_back(tok.Decode({seq[i]}));
  if (session_->store()) record->chunk_tokens = session_->store()->options().chunk_tokens;
  RefreshStoreStats();
  record->store_after = draft_.store;
  draft_.chat[entry].text = a->text;
  draft_.chat[entry].request = record;
  // Documents are cached once the prefix they sit in was stored (approximate: the system block
  // holds them in order, so the first n tokens cover the first documents).
  const int stored = record->report.n_prompt;
  int at = 0;
  for (DocumentEntry& d : draft_.documents) {
    if (!d.attached) continue;
    at += d.n_tokens;
    if (!session_->store()) d.residency = "no store";
    else if (at <= record->report.n_matched)
      d.residency = fmt::format("reused (device {} / host {} / SSD {} chunks)", record->report.chunks_device,
                                record->report.chunks_host, record->report.chunks_ssd);
    else if (at <= stored) d.residency = "stored on SSD";
    else d.residency = "not cached";
  }
  draft_.requests.push_back(std::move(record));
  if (draft_.requests.size() > options_.max_requests) draft_.requests.erase(draft_.requests.begin());
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready";
}

}  // namespace impress::gui
