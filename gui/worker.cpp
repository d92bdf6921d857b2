#include "gui/worker.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "gui/gui-config.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {
constexpr auto kStreamPublishInterval = std::chrono::milliseconds(33);
// Progress alone (prefill, ingestion) redraws less often: each frame costs the model CPU time.
constexpr auto kProgressPublishInterval = std::chrono::milliseconds(100);
constexpr size_t kMaxMessages = 50;

constexpr const char* kUntitled = "New conversation";
constexpr int kRetrievalTokens = 2048;  // most passage tokens a retrieval-mode prompt carries

uint64_t Mib(double mb) { return uint64_t(std::max(0.0, mb) * double(1 << 20)); }

// Token text for labels: one line, control characters shown.
std::string OneLine(const std::string& s, size_t max_bytes) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += ' ';
    else if (uint8_t(c) >= 0x20 || c < 0) out += c;
  }
  return out;
}

// A document's key in the passage index: its path and a hash of its text, so a changed file is
// indexed again and an unchanged one (reopened conversations) is not.
std::string PassageKey(const Document& d) {
  return fmt::format("{}#{:016x}", d.path, XXH3_64bits(d.text.data(), d.text.size()));
}

// A conversation's title from its first question.
std::string TitleFrom(const std::string& question) {
  std::string t = OneLine(question, 60);
  return t.empty() ? std::string(kUntitled) : t;
}
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

void Worker::Publish(bool force, bool progress_only) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_publish_ < (progress_only ? kProgressPublishInterval : kStreamPublishInterval)) return;
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

void Worker::CutChat(size_t keep) {
  if (keep < draft_.chat.size()) draft_.chat.resize(keep);
  draft_.chat_epoch++;
  draft_.chat_kept = draft_.chat.size();
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
  OpenDb();
  for (const std::string& path : options_.documents) AddDocument(path);
  RefreshCacheViews();
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
        if (passages_) (void)passages_->Remove(PassageKey(docs_[c.index]));
        docs_.erase(docs_.begin() + c.index);
        draft_.documents.erase(draft_.documents.begin() + c.index);
        SyncConversationDocuments();
        SaveDocuments();
        RefreshCacheViews();
      }
      break;
    case K::kSetAttached:
      if (c.index >= 0 && size_t(c.index) < docs_.size()) {
        DocumentEntry& d = draft_.documents[c.index];
        if (c.flag && !draft_.retrieval) {
          int attached_tokens = 0;
          for (const DocumentEntry& o : draft_.documents)
            if (o.attached && &o != &d) attached_tokens += o.n_tokens;
          const int room = draft_.n_ctx - draft_.settings.max_tokens - 64;
          if (attached_tokens + d.n_tokens > room) {
            Message(fmt::format("{} ({} tokens) would overflow the context ({} tokens, {} attached, {} kept for the "
                                "answer); detach another document or use retrieval mode",
                                d.name, d.n_tokens, draft_.n_ctx, attached_tokens, draft_.settings.max_tokens));
            break;
          }
        }
        d.attached = c.flag;
        SyncConversationDocuments();
        SaveDocuments();
        RefreshCacheViews();
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
      session_->conversation().PopTurns(2);
      if (db_ && conv_id_)
        if (Status st = db_->PopTurns(conv_id_, 2); !st.ok()) Message("the saved conversation was not updated: " + st.ToString());
      if (c.kind == K::kRegenerate) {
        // The last answer is replaced: drop its chat entries.
        size_t keep = draft_.chat.size();
        while (keep > 0 && draft_.chat[keep - 1].role != "user") --keep;
        CutChat(keep > 0 ? keep - 1 : 0);
      }
      Ask(question, c.kind == K::kAskAgain);
      break;
    }
    case K::kNewConversation: NewConversation(/*keep_documents=*/true); break;
    case K::kOpenConversation:
      if (c.id != conv_id_) LoadConversation(c.id);
      break;
    case K::kDeleteConversation: {
      if (!db_) break;
      if (Status st = db_->DeleteConversation(c.id); !st.ok()) {
        Message("cannot delete the conversation: " + st.ToString());
        break;
      }
      Message("deleted a saved conversation");
      if (c.id == conv_id_) {
        conv_id_ = 0;
        RefreshConversationList();
        if (!draft_.conversations.empty()) LoadConversation(draft_.conversations.front().id);
        else NewConversation(/*keep_documents=*/false);
      }
      RefreshConversationList();
      break;
    }
    case K::kRenameConversation:
      if (db_) {
        if (Status st = db_->RenameConversation(c.id, c.text); !st.ok()) Message("cannot rename: " + st.ToString());
        if (c.id == conv_id_) draft_.conversation_title = c.text;
        RefreshConversationList();
      }
      break;
    case K::kSetRetrieval: SetRetrieval(c.flag); break;
    case K::kPinDocument:
    case K::kDropDocumentCache: CacheDocument(c.index, c.kind, c.flag); break;
    case K::kSettings: ApplySettings(c.settings); break;
    case K::kReorderNow: {
      if (!session_->store()) {
        Message("no KV store: nothing to reorder");
        break;
      }
      draft_.status = "reordering";
      Publish();
      (void)session_->pipeline().WaitForStore();
      (void)session_->pipeline().ReleaseMatch();
      auto r = session_->store()->ReorderNow();
      if (!r.ok()) Message("reorder failed: " + r.status().ToString());
      else
        Message(fmt::format("reorder: {} of {} segments rewritten, {} written", r->segments_reordered,
                            r->segments_seen, FormatBytes(r->bytes_written)));
      RefreshStoreStats();
      RefreshCacheViews();
      draft_.status = "ready";
      break;
    }
    case K::kDropCache: {
      if (!session_->store()) break;
      (void)session_->pipeline().WaitForStore();
      (void)session_->pipeline().ReleaseMatch();
      auto r = session_->store()->EvictNodes(UINT64_MAX);
      if (!r.ok()) Message("dropping the cache failed: " + r.status().ToString());
      else Message(fmt::format("dropped {} cached prefix node(s) (pinned ones stay)", *r));
      RefreshStoreStats();
      RefreshCacheViews();
      break;
    }
  }
}

void Worker::AddDocument(const std::string& path) {
  draft_.phase = WorkerPhase::kIngesting;
  draft_.status = "reading " + path;
  Publish();
  auto doc = LoadDocument(path);
  if (!doc.ok()) {
    Message("cannot add document: " + doc.status().ToString());
    draft_.phase = WorkerPhase::kIdle;
    draft_.status = "ready";
    return;
  }
  for (size_t i = 0; i < docs_.size(); ++i) {
    if (docs_[i].path == doc->path && docs_[i].text == doc->text) {
      Message(fmt::format("{} is already in this conversation", doc->name));
      draft_.phase = WorkerPhase::kIdle;
      draft_.status = "ready";
      return;
    }
  }
  draft_.status = "tokenizing " + doc->name;
  draft_.progress = 0;
  Publish();
  DocumentEntry e;
  e.path = doc->path;
  e.name = doc->name;
  e.bytes = doc->text.size();
  e.n_tokens = int(session_->context()
                       .tokenizer()
                       .Encode(doc->text, false, false,
                               [this](uint64_t done, uint64_t total, std::string_view) {
                                 draft_.progress = total ? double(done) / double(total) : -1;
                                 Publish(false, /*progress_only=*/true);
                                 return true;
                               })
                       .size());
  draft_.progress = -1;
  e.residency = "not cached";
  IndexPassages(*doc);
  int attached_tokens = 0;
  for (const DocumentEntry& d : draft_.documents)
    if (d.attached) attached_tokens += d.n_tokens;
  const int room = draft_.n_ctx - draft_.settings.max_tokens - 64;  // the question and the template need some
  if (draft_.retrieval) {
    Message(fmt::format("added {} ({} tokens) to the collection; questions retrieve its best passages", e.name,
                        e.n_tokens));
  } else if (e.n_tokens > room) {
    e.attached = false;
    Message(fmt::format("{} has {} tokens: longer than the model's context ({} tokens, {} kept for the answer); "
                        "it is listed but not attached (retrieval mode can use it)",
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
  SaveDocuments();
  RefreshCacheViews();
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready";
}

void Worker::SyncConversationDocuments() {
  Conversation& conv = session_->conversation();
  conv.ClearDocuments();
  int n = 0;
  for (size_t i = 0; i < docs_.size(); ++i) {
    if (!draft_.documents[i].attached || draft_.retrieval) continue;
    conv.AddDocument(docs_[i]);
    n += draft_.documents[i].n_tokens;
  }
  draft_.context_tokens = n;
  // Where each attached document sits in the prompt (for residency, pin and drop).
  context_tokens_.clear();
  spans_.clear();
  if (conv.documents().empty()) return;
  const Tokenizer& tok = session_->context().tokenizer();
  const ChatTemplate& chat = session_->context().chat_template();
  spans_ = conv.DocumentSpans(tok, chat, /*raw=*/false, &context_tokens_);
  if (spans_.size() != conv.documents().size()) spans_.clear();
}

void Worker::RefreshCacheViews() {
  store::PrefixStore* st = session_ ? session_->store() : nullptr;
  size_t k = 0;  // index among attached documents (spans_)
  for (DocumentEntry& d : draft_.documents) {
    d.span_begin = d.span_end = -1;
    d.tokens_cached = d.tokens_device = d.tokens_host = 0;
    d.pinned = false;
    if (!st) {
      d.residency = "no KV store";
      continue;
    }
    if (draft_.retrieval) {
      d.residency = "retrieval mode: its passages are cached per question";
      continue;
    }
    if (!d.attached) {
      d.residency = "detached";
      continue;
    }
    if (k >= spans_.size()) {
      d.residency = "unknown";
      continue;
    }
    const Conversation::TokenSpan sp = spans_[k++];
    d.span_begin = sp.begin;
    d.span_end = sp.end;
    const std::span<const store::Token> all(context_tokens_);
    const store::PrefixResidency to_end = st->Residency(all.first(size_t(sp.end)));
    const store::PrefixResidency to_begin = st->Residency(all.first(size_t(sp.begin)));
    auto part = [&](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
    d.tokens_cached = part(std::min<uint64_t>(to_end.n_matched, uint64_t(sp.end)), uint64_t(sp.begin));
    d.tokens_device = part(to_end.tokens_device, to_begin.tokens_device);
    d.tokens_host = part(to_end.tokens_host, to_begin.tokens_host);
    d.pinned = to_end.pinned && to_end.n_matched >= uint64_t(sp.end);
    const uint64_t n = uint64_t(sp.end - sp.begin);
    if (d.tokens_cached == 0) d.residency = "not cached";
    else
      d.residency = fmt::format("{}{} of {} tokens cached: device {}, host {}, SSD {}", d.pinned ? "pinned, " : "",
                                d.tokens_cached, n, d.tokens_device, d.tokens_host, d.tokens_cached);
  }
  if (!st) {
    draft_.tree.reset();
    return;
  }
  const store::TreeSnapshot snap = st->SnapshotTree(2000);
  auto view = std::make_shared<TreeView>();
  view->truncated = snap.truncated;
  view->rows.reserve(snap.nodes.size());
  const Tokenizer& tok = session_->context().tokenizer();
  for (const store::TreeNodeInfo& n : snap.nodes) {
    TreeRow r;
    r.parent = n.parent;
    r.depth = n.parent >= 0 && size_t(n.parent) < view->rows.size() ? view->rows[n.parent].depth + 1 : 0;
    r.start = n.start;
    r.n_tokens = n.n_tokens;
    r.kv_bytes = n.kv_bytes;
    r.hits = n.hits;
    r.score = n.score;
    r.importance = n.importance;
    r.chunks_device = n.chunks_device;
    r.chunks_host = n.chunks_host;
    r.chunks_ssd = n.chunks_ssd_only;
    r.pinned = n.pinned;
    r.locked = n.locked;
    r.label = OneLine(tok.Decode(std::vector<int32_t>(n.head.begin(), n.head.end())), 80);
    view->rows.push_back(std::move(r));
  }
  draft_.tree = std::move(view);
}

void Worker::CacheDocument(int index, Command::Kind kind, bool flag) {
  store::PrefixStore* st = session_->store();
  if (!st || index < 0 || size_t(index) >= draft_.documents.size()) return;
  const DocumentEntry& d = draft_.documents[index];
  if (d.span_begin < 0) {
    Message(fmt::format("{}: only an attached document's cache can be pinned or dropped", d.name));
    return;
  }
  (void)session_->pipeline().WaitForStore();
  (void)session_->pipeline().ReleaseMatch();
  const std::span<const store::Token> prefix = std::span<const store::Token>(context_tokens_).first(size_t(d.span_end));
  if (kind == Command::Kind::kPinDocument) {
    const Status r = flag ? st->Pin(prefix) : st->Unpin(prefix);
    if (!r.ok()) Message(fmt::format("{} {}: {}", flag ? "cannot pin" : "cannot unpin", d.name, r.ToString()));
    else if (flag && d.tokens_cached < uint64_t(d.span_end - d.span_begin))
      Message(fmt::format("pinned the cached part of {} ({} of {} tokens; ask a question to cache the rest)", d.name,
                          d.tokens_cached, d.span_end - d.span_begin));
    else Message(fmt::format("{} {}", flag ? "pinned the cache of" : "unpinned", d.name));
  } else {
    auto r = st->DropFrom(prefix, uint64_t(d.span_begin));
    if (!r.ok()) Message(fmt::format("cannot drop the cache of {}: {}", d.name, r.status().ToString()));
    else
      Message(fmt::format("dropped {} cached tokens from {} on (what follows it in the prompt went too)", *r,
                          d.name));
  }
  RefreshStoreStats();
  RefreshCacheViews();
}

void Worker::IndexPassages(const Document& doc) {
  if (!passages_) return;
  const std::string key = PassageKey(doc);
  if (auto have = passages_->Contains(key); have.ok() && *have) return;
  draft_.status = "indexing " + doc.name + " for retrieval";
  Publish();
  if (Status st = passages_->Add(key, doc.name, doc.text); !st.ok()) Message("retrieval index: " + st.ToString());
}

void Worker::OpenDb() {
  if (options_.db_path.empty()) return;
  draft_.db_path = options_.db_path;
  auto db = persist::ChatDb::Open(options_.db_path);
  if (!db.ok()) {
    Message("conversations are not saved this time: " + db.status().ToString());
    draft_.db_path.clear();
    return;
  }
  db_ = std::move(*db);
  auto idx = persist::PassageIndex::Open(options_.db_path + ".passages");
  if (!idx.ok()) Message("retrieval mode is unavailable: " + idx.status().ToString());
  else passages_ = std::move(*idx);
  RefreshConversationList();
  if (!draft_.conversations.empty()) LoadConversation(draft_.conversations.front().id);
  else NewConversation(/*keep_documents=*/false);
}

void Worker::RefreshConversationList() {
  if (!db_) return;
  auto list = db_->ListConversations();
  if (!list.ok()) {
    Message("cannot list saved conversations: " + list.status().ToString());
    return;
  }
  draft_.conversations.clear();
  for (const persist::ConversationSummary& c : *list)
    draft_.conversations.push_back({c.id, c.title, c.updated, c.n_turns, c.n_documents,
                                    c.mode == persist::ConversationMode::kRetrieval});
}

void Worker::LoadConversation(int64_t id) {
  if (!db_) return;
  auto c = db_->Load(id);
  if (!c.ok()) {
    Message("cannot open the conversation: " + c.status().ToString());
    return;
  }
  draft_.phase = WorkerPhase::kIngesting;
  draft_.status = "opening " + c->summary.title;
  Publish();
  conv_id_ = id;
  draft_.conversation_id = id;
  draft_.conversation_title = c->summary.title;
  draft_.retrieval = c->summary.mode == persist::ConversationMode::kRetrieval;
  docs_.clear();
  draft_.documents.clear();
  CutChat(0);
  Conversation& conv = session_->conversation();
  conv.ClearTurns();
  const Tokenizer& tok = session_->context().tokenizer();
  for (const persist::SavedDocument& d : c->documents) {
    DocumentEntry e;
    e.path = d.path;
    e.name = d.name;
    e.bytes = d.text.size();
    e.attached = d.attached;
    // Counted again: the saved count may be another model's.
    draft_.status = "tokenizing " + d.name;
    e.n_tokens = int(tok.Encode(d.text, false, false, [this](uint64_t done, uint64_t total, std::string_view) {
                          draft_.progress = total ? double(done) / double(total) : -1;
                          Publish(false, /*progress_only=*/true);
                          return true;
                        }).size());
    draft_.progress = -1;
    docs_.push_back({d.path, d.name, d.text});
    IndexPassages(docs_.back());
    draft_.documents.push_back(std::move(e));
  }
  for (const persist::SavedTurn& t : c->turns) {
    conv.AddTurn(t.role, t.content);
    ChatEntry e{t.role, t.content, nullptr};
    e.saved = true;
    draft_.chat.push_back(std::move(e));
    if (t.role == "assistant" && !t.meta.empty()) {
      const auto meta = nlohmann::json::parse(t.meta, nullptr, /*allow_exceptions=*/false);
      if (meta.is_object() && meta.contains("label") && meta["label"].is_string())
        draft_.chat.push_back({"info", "earlier answer: " + meta["label"].get<std::string>() +
                                           (meta.contains("ttft_ms") && meta["ttft_ms"].is_number()
                                                ? fmt::format(", TTFT {:.0f} ms", meta["ttft_ms"].get<double>())
                                                : std::string()),
                               nullptr});
    }
  }
  SyncConversationDocuments();
  RefreshCacheViews();
  RefreshConversationList();
  Message(fmt::format("opened \"{}\": {} turns, {} documents", c->summary.title, c->turns.size(), c->documents.size()));
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready";
}

void Worker::NewConversation(bool keep_documents) {
  session_->conversation().ClearTurns();
  CutChat(0);
  if (!keep_documents) {
    docs_.clear();
    draft_.documents.clear();
  }
  draft_.conversation_title = kUntitled;
  if (db_) {
    auto id = db_->CreateConversation(kUntitled, draft_.retrieval ? persist::ConversationMode::kRetrieval
                                                                  : persist::ConversationMode::kDocuments);
    if (!id.ok()) {
      Message("the new conversation is not saved: " + id.status().ToString());
      conv_id_ = 0;
    } else {
      conv_id_ = *id;
    }
  }
  draft_.conversation_id = conv_id_;
  draft_.chat.push_back({"info", keep_documents ? "new conversation (documents stay attached)" : "new conversation",
                         nullptr});
  SyncConversationDocuments();
  SaveDocuments();
  RefreshCacheViews();
  RefreshConversationList();
}

void Worker::SaveDocuments() {
  if (!db_ || !conv_id_) return;
  std::vector<persist::SavedDocument> saved;
  for (size_t i = 0; i < docs_.size(); ++i) {
    persist::SavedDocument d;
    d.name = docs_[i].name;
    d.path = docs_[i].path;
    d.text = docs_[i].text;
    d.n_tokens = draft_.documents[i].n_tokens;
    d.attached = draft_.documents[i].attached;
    saved.push_back(std::move(d));
  }
  if (Status st = db_->SetDocuments(conv_id_, saved); !st.ok()) Message("documents not saved: " + st.ToString());
  RefreshConversationList();
}

void Worker::SetRetrieval(bool on) {
  if (on && !passages_) {
    Message("retrieval mode is unavailable (no passage index)");
    return;
  }
  if (on == draft_.retrieval) return;
  draft_.retrieval = on;
  if (db_ && conv_id_)
    (void)db_->SetMode(conv_id_, on ? persist::ConversationMode::kRetrieval : persist::ConversationMode::kDocuments);
  if (!on) {
    // Whole documents again: attach what fits, in order.
    int used = 0;
    const int room = draft_.n_ctx - draft_.settings.max_tokens - 64;
    for (DocumentEntry& d : draft_.documents) {
      if (!d.attached) continue;
      if (used + d.n_tokens > room) {
        d.attached = false;
        Message(fmt::format("{} ({} tokens) does not fit the context with the others: detached", d.name, d.n_tokens));
        continue;
      }
      used += d.n_tokens;
    }
    SaveDocuments();
  }
  Message(on ? "retrieval mode: each question carries the best passages (FTS5 bm25) of the documents"
             : "documents mode: attached documents are the context");
  SyncConversationDocuments();
  RefreshCacheViews();
  RefreshConversationList();
}

Status Worker::UseRetrievedPassages(const std::string& question, RequestRecord* record) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < docs_.size(); ++i)
    if (draft_.documents[i].attached) keys.push_back(PassageKey(docs_[i]));
  const Tokenizer& tok = session_->context().tokenizer();
  const int room = draft_.n_ctx - draft_.settings.max_tokens - 256;
  const int budget = std::max(0, std::min(kRetrievalTokens, room));
  IMPRESS_ASSIGN_OR_RETURN(persist::BudgetSelection picked,
                           passages_->SelectForBudget(question, budget, [&](std::string_view text) {
                             return int(tok.Encode(text, false, false).size());
                           }));
  Conversation& conv = session_->conversation();
  conv.ClearDocuments();
  for (const persist::Passage& p : picked.passages) {
    if (std::find(keys.begin(), keys.end(), p.doc_key) == keys.end()) continue;  // a detached document
    const std::string name = fmt::format("{} (passage {})", p.name, p.index + 1);
    conv.AddDocument({p.doc_key, name, p.text});
    record->passages.push_back(name);
  }
  if (record->passages.empty()) draft_.chat.push_back({"info", "no passage matched the question's words", nullptr});
  return Status::Ok();
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
    if (s.reorder_interval_min != old.reorder_interval_min)
      st->SetReorderInterval(std::chrono::minutes(s.reorder_interval_min));
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
  if (draft_.retrieval) {
    // The context of this question: the best passages of the collection.
    if (!passages_) {
      draft_.chat.push_back({"error", "retrieval mode needs the passage index, which is unavailable", nullptr});
      return;
    }
    if (Status st = UseRetrievedPassages(question, record.get()); !st.ok()) {
      draft_.chat.push_back({"error", "passage retrieval failed: " + st.ToString(), nullptr});
      return;
    }
    if (!record->passages.empty()) {
      std::string names;
      for (const std::string& n : record->passages) names += (names.empty() ? "" : ", ") + n;
      draft_.chat.push_back({"info", fmt::format("retrieved {} passage(s): {}", record->passages.size(), names), nullptr});
    }
  }

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
    } else if (cancel_.load()) {
      draft_.chat.push_back({"info", "stopped during the fidelity check", nullptr});
      draft_.phase = WorkerPhase::kIdle;
      draft_.status = "ready";
      return;
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
    Publish(false, /*progress_only=*/true);
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
  const size_t n_turns_before = session_->conversation().turns().size();
  auto a = session_->Ask(question, o);
  record->wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  draft_.progress = -1;
  if (draft_.retrieval) SyncConversationDocuments();  // the passages were this question's only
  if (!a.ok()) {
    (void)session_->pipeline().ReleaseMatch();
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
  (void)session_->pipeline().ReleaseMatch();  // the store may now evict, drop or reorder it

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
  // Save the turns the session remembered.
  const auto& turns = session_->conversation().turns();
  if (db_ && conv_id_ && turns.size() == n_turns_before + 2) {
    nlohmann::json meta = {{"label", record->label}, {"ttft_ms", record->report.ttft_ms},
                           {"n_matched", record->report.n_matched}};
    Status st = Status::Ok();
    if (auto r = db_->AppendTurn(conv_id_, "user", turns[turns.size() - 2].content); !r.ok()) st = r.status();
    else if (auto r2 = db_->AppendTurn(conv_id_, "assistant", turns.back().content, meta.dump()); !r2.ok()) st = r2.status();
    if (st.ok() && draft_.conversation_title == kUntitled) {
      draft_.conversation_title = TitleFrom(question);
      st = db_->RenameConversation(conv_id_, draft_.conversation_title);
    }
    if (!st.ok()) Message("the conversation was not saved: " + st.ToString());
    RefreshConversationList();
  }
  RefreshCacheViews();
  draft_.requests.push_back(std::move(record));
  if (draft_.requests.size() > options_.max_requests) draft_.requests.erase(draft_.requests.begin());
  draft_.phase = WorkerPhase::kIdle;
  draft_.status = "ready";
}

}  // namespace impress::gui
