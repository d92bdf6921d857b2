// Worker: the store's knobs (Settings panel), its commands (reorder, drop, a document's pin or
// drop) and the views the panels draw of it (the documents' residency, the radix tree).
#include <fmt/format.h>

#include "gui/gui-config.h"
#include "gui/snapshot-math.h"
#include "gui/worker.h"

namespace impress::gui {

void Worker::RefreshStoreStats() {
  if (session_ && session_->store()) draft_.store = session_->store()->Stats();
}

void Worker::ApplySettings(const TuningSettings& s) {
  const TuningSettings old = draft_.settings;
  draft_.settings = s;
  FollowModelSampling();
  chat_->set_max_tokens(s.max_tokens);
  if (store::PrefixStore* st = session_->store()) {
    if (s.device_budget_mb != old.device_budget_mb)
      st->SetTierBudget(store::Tier::kDevice, MibBytes(s.device_budget_mb));
    if (s.host_budget_mb != old.host_budget_mb) st->SetTierBudget(store::Tier::kHost, MibBytes(s.host_budget_mb));
    if (s.ssd_budget_mb != old.ssd_budget_mb)
      if (Status r = st->SetSsdBudget(MibBytes(s.ssd_budget_mb)); !r.ok()) Message("SSD budget: " + r.ToString());
    if (s.policy != old.policy) st->SetPolicy(s.policy);
    if (s.reorder_interval_min != old.reorder_interval_min)
      st->SetReorderInterval(std::chrono::minutes(s.reorder_interval_min));
    RefreshStoreStats();
  }
  if (!options_.settings_path.empty())
    if (Status r = SaveTuning(options_.settings_path, s); !r.ok()) Message("settings not saved: " + r.ToString());
}

void Worker::FollowModelSampling() {
  if (draft_.settings.sampling.user_set || !session_) return;
  draft_.settings.sampling = ModelSampling(session_->context().tokenizer().generation_defaults());
}

void Worker::ReorderNow() {
  if (!session_->store()) {
    Message("no KV store: nothing to reorder");
    return;
  }
  draft_.status = "reordering";
  Publish();
  (void)chat_->QuiesceStore();
  auto r = session_->store()->ReorderNow();
  if (!r.ok()) Message("reorder failed: " + r.status().ToString());
  else
    Message(fmt::format("reorder: {} of {} segments rewritten, {} written", r->segments_reordered, r->segments_seen,
                        FormatBytes(r->bytes_written)));
  RefreshStoreStats();
  RefreshCacheViews();
  draft_.status = "ready";
}

void Worker::DropCache() {
  if (!session_->store()) return;
  (void)chat_->QuiesceStore();
  auto r = session_->store()->EvictNodes(UINT64_MAX);
  if (!r.ok()) Message("dropping the cache failed: " + r.status().ToString());
  else Message(fmt::format("dropped {} cached prefix node(s) (pinned ones stay)", *r));
  RefreshStoreStats();
  RefreshCacheViews();
}

void Worker::CacheDocument(int index, Command::Kind kind, bool flag) {
  if (index < 0) return;
  // Outcomes, failures included, are noticed by the controller.
  if (kind == Command::Kind::kPinDocument) (void)chat_->PinDocument(size_t(index), flag);
  else (void)chat_->DropDocumentCache(size_t(index));
  RefreshStoreStats();
  RefreshCacheViews();
}

void Worker::RefreshCacheViews() {
  if (!chat_) return;
  const std::vector<ChatDocument>& docs = chat_->documents();
  const std::vector<DocumentCacheState> caches = chat_->DocumentCaches();
  draft_.documents.clear();
  for (size_t i = 0; i < docs.size(); ++i) {
    DocumentEntry e;
    e.path = docs[i].doc.path;
    e.name = docs[i].doc.name;
    e.bytes = docs[i].doc.text.size();
    e.n_tokens = docs[i].n_tokens;
    e.attached = docs[i].attached;
    e.is_private = docs[i].doc.is_private;
    e.residency = caches[i].residency;
    e.span_begin = caches[i].span_begin;
    e.span_end = caches[i].span_end;
    e.tokens_cached = caches[i].tokens_cached;
    e.tokens_device = caches[i].tokens_device;
    e.tokens_host = caches[i].tokens_host;
    e.pinned = caches[i].pinned;
    draft_.documents.push_back(std::move(e));
  }
  store::PrefixStore* st = session_->store();
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

}  // namespace impress::gui
