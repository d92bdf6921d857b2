// Worker: questions. ChatController prepares the context (retrieval passages), answers and saves
// the exchange, and pops the last one for regenerate / ask again; the worker streams the answer
// into the chat, runs the fidelity check, and builds the request record the panels draw.
#include <fmt/format.h>

#include "gui/worker.h"

namespace impress::gui {

AskOptions Worker::MakeAskOptions() {
  const TuningSettings& t = draft_.settings;
  AskOptions o;
  o.pipeline = t.pipeline;
  o.pipeline.record_importance = true;
  o.sampling = ToSamplerOptions(t.sampling);
  o.max_tokens = t.max_tokens;
  o.cancel = &cancel_;
  return o;
}

void Worker::AskAgain(bool with_fidelity) {
  auto question = chat_->PopLastExchange();
  if (!question.ok()) return;  // noticed: nothing to ask again
  if (!with_fidelity) {
    // Regenerate replaces the last answer: drop its chat entries.
    size_t keep = draft_.chat.size();
    while (keep > 0 && draft_.chat[keep - 1].role != "user") --keep;
    CutChat(keep > 0 ? keep - 1 : 0);
  }
  Ask(*question, with_fidelity);
}

bool Worker::RunFidelity(const std::string& question, const AskOptions& o, RequestRecord* record) {
  draft_.phase = WorkerPhase::kFidelity;
  draft_.status = "fidelity check against the full prefix KV";
  Publish();
  auto f = session_->Fidelity(question, o, draft_.settings.fidelity_tokens);
  if (f.ok()) {
    record->has_fidelity = true;
    record->fidelity = std::move(*f);
    record->fidelity.report = {};  // the panels draw the answer's own report
    record->fidelity.report_full = {};
  } else if (cancel_.load()) {
    draft_.chat.push_back({"info", "stopped during the fidelity check", nullptr});
    Ready();
    return false;
  } else {
    Message("fidelity check failed: " + f.status().ToString());
  }
  return true;
}

void Worker::Ask(const std::string& question, bool again) {
  const TuningSettings& t = draft_.settings;
  AskOptions o = MakeAskOptions();
  auto record = std::make_shared<RequestRecord>();
  record->id = next_request_id_++;
  record->question = question;
  record->label = fmt::format("#{} {} a={:.2f} r={:.2f}", record->id, SystemName(t.pipeline.system), t.pipeline.alpha,
                              t.pipeline.keep);
  if (again) draft_.chat.push_back({"info", "asked again with " + record->label, nullptr});
  else draft_.chat.push_back({"user", question, nullptr});
  // Retrieval mode: the context of this question is the best passages of the collection.
  auto passages = chat_->PrepareQuestion(question);
  if (!passages.ok()) {
    draft_.chat.push_back({"error", "passage retrieval failed: " + passages.status().ToString(), nullptr});
    return;
  }
  record->passages = std::move(*passages);
  if (chat_->retrieval() && record->passages.empty())
    draft_.chat.push_back({"info", "no passage matched the question's words", nullptr});
  if (!record->passages.empty()) {
    std::string names;
    for (const std::string& n : record->passages) names += (names.empty() ? "" : ", ") + n;
    draft_.chat.push_back(
        {"info", fmt::format("retrieved {} passage(s): {}", record->passages.size(), names), nullptr});
  }
  if (again && t.fidelity_tokens > 0 && !RunFidelity(question, o, record.get())) return;

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
  auto a = chat_->Answer(question, o, record->label);
  record->wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  draft_.progress = -1;
  if (!a.ok()) {
    draft_.chat[entry] = {"error", a.status().ToString(), nullptr};
    Message("the question failed: " + a.status().ToString());
    Ready();
    return;
  }
  FinishRequest(*a, entry, std::move(record));
}

void Worker::FinishRequest(ChatAnswer& answer, size_t entry, std::shared_ptr<RequestRecord> record) {
  // The store write runs in the background; wait for it so the tier and tree panels show it.
  draft_.phase = WorkerPhase::kStoring;
  draft_.status = "storing the new KV";
  draft_.chat[entry].streaming = false;
  draft_.chat[entry].stopped = answer.stopped_by_user;
  Publish();
  if (auto w = session_->pipeline().WaitForStore(); !w.ok())
    Message("the answer's KV was not stored: " + w.status().ToString());
  (void)session_->pipeline().ReleaseMatch();  // the store may now evict, drop or reorder it

  record->report = std::move(answer.report);
  record->tokens_per_s = record->report.decode_tok_s();
  record->stop_reason = answer.stop_reason;
  const auto& seq = session_->pipeline().sequence();
  const Tokenizer& tok = session_->context().tokenizer();
  const int n_matched = std::min<int>(record->report.n_matched, int(seq.size()));
  record->prefix_pieces.reserve(n_matched);
  for (int i = 0; i < n_matched; ++i) record->prefix_pieces.push_back(tok.Decode({seq[i]}));
  if (session_->store()) record->chunk_tokens = session_->store()->options().chunk_tokens;
  RefreshStoreStats();
  record->store_after = draft_.store;
  draft_.chat[entry].text = answer.text;
  draft_.chat[entry].request = record;
  RefreshConversationList();
  RefreshCacheViews();
  draft_.requests.push_back(std::move(record));
  if (draft_.requests.size() > options_.max_requests) draft_.requests.erase(draft_.requests.begin());
  Ready();
}

}  // namespace impress::gui
