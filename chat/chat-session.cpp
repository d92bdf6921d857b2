#include "chat/chat-session.h"
#include "pipeline/system-policy.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

namespace impress {

ChatSession::~ChatSession() {
  if (pipeline_) (void)pipeline_->WaitForStore();
  pipeline_.reset();
  store_.reset();
}

Result<std::unique_ptr<ChatSession>> ChatSession::Open(const ChatSessionOptions& o, const ProgressFn& load_progress) {
  std::unique_ptr<ChatSession> s(new ChatSession());
  IMPRESS_ASSIGN_OR_RETURN(s->ctx_, ModelContext::Load(o.model_path, o.model, load_progress));
  if (!o.store_dir.empty()) {
    store::PrefixStoreOptions so = StoreOptionsFor(s->ctx_->config(), o.probe_heads_stored);
    so.dir = o.store_dir;
    so.probe_encoding = o.probe_encoding;
    so.device_bytes = o.device_bytes;
    so.host_bytes = o.host_bytes;
    so.ssd_bytes = o.ssd_bytes;
    so.reorder_interval = o.reorder_interval;
    so.lock_wait = o.store_lock_wait;
    so.team = o.team;
    auto st = store::PrefixStore::Open(so);
    if (!st.ok()) return st.status().WithContext("opening the KV store in " + o.store_dir);
    s->store_ = std::move(*st);
  }
  s->pipeline_ = std::make_unique<ImpressPipeline>(*s->ctx_, s->store_.get());
  return s;
}

Result<ChatAnswer> ChatSession::Ask(const std::string& question, const AskOptions& o) {
  const PromptTokens prompt = conversation_.Build(question, ctx_->tokenizer(), ctx_->chat_template(), o.raw);
  AskOptions ask = o;
  for (const Document& d : conversation_.documents()) ask.private_documents = ask.private_documents || d.is_private;
  IMPRESS_ASSIGN_OR_RETURN(ChatAnswer answer, AskPrompt(prompt, ask));
  if (o.remember) {
    conversation_.AddTurn("user", question);
    conversation_.AddTurn("assistant", answer.text);
  }
  return answer;
}

Result<ChatAnswer> ChatSession::AskPrompt(const PromptTokens& prompt, const AskOptions& o) {
  std::vector<float> logits;
  ChatAnswer answer;
  // A local miss is filled from the team KV tier first (when one is configured), so the
  // pipeline's match finds the team's prefix in the local tiers. Never fails the request.
  uint64_t team_tokens = 0, team_bytes = 0;
  double team_ms = 0;
  if (store_ && !o.private_documents && System(o.pipeline.system).reuses()) {
    const size_t n_prefix = std::min(prompt.tokens.size(), size_t(std::max(prompt.n_prefix, 0)));
    const auto t_fill = std::chrono::steady_clock::now();
    const store::TeamFill fill = store_->FillFromTeam(std::span<const int32_t>(prompt.tokens).subspan(0, n_prefix));
    team_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_fill).count();
    team_tokens = fill.n_team;
    team_bytes = fill.bytes;
    if (!fill.status.ok()) spdlog::debug("team tier: fill stopped: {}", fill.status.ToString());
  }
  IMPRESS_ASSIGN_OR_RETURN(answer.report, pipeline_->Prefill({prompt.tokens, prompt.n_prefix}, o.pipeline, o.max_tokens,
                                                             &logits, o.on_prefill_progress, o.cancel));
  Sampler sampler(o.sampling);
  RepetitionGuard loop_guard(o.repetition);
  std::vector<int32_t> history = prompt.tokens;
  StreamDecoder decoder(ctx_->tokenizer());
  const auto& stops = ctx_->stop_tokens();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.max_tokens; ++i) {
    const int32_t tok = sampler.Sample(logits, history);
    answer.tokens.push_back(tok);
    history.push_back(tok);
    const bool stop =
        std::find(stops.begin(), stops.end(), tok) != stops.end() || ctx_->tokenizer().IsEndOfGeneration(tok);
    if (!stop) {
      std::string piece = decoder.Push(tok);
      answer.text += piece;
      if (o.on_text && !piece.empty() && !o.on_text(piece)) answer.stopped_by_user = true;
    }
    if (o.cancel && o.cancel->load()) answer.stopped_by_user = true;
    const bool looping = !stop && loop_guard.Push(tok);
    const bool last = stop || answer.stopped_by_user || looping || i + 1 == o.max_tokens;
    // Feed the token so its KV exists (stored with the answer) even when it ends the turn.
    if (!last || o.feed_last) {
      Status st = pipeline_->Decode(tok, &logits);
      if (!st.ok()) {
        if (st.code() != Status::Code::kOutOfRange) return st;
        answer.stop_reason = "context";  // context full: the answer ends here
        break;
      }
    }
    if (stop || answer.stopped_by_user || looping) {
      answer.stop_reason = stop ? "end" : answer.stopped_by_user ? "user" : "repetition";
      break;
    }
  }
  const std::string rest = decoder.Flush();
  answer.text += rest;
  if (o.on_text && !rest.empty()) o.on_text(rest);
  answer.report.team_tokens = team_tokens + (answer.report.team_remote ? uint64_t(answer.report.n_matched) : 0);
  answer.report.team_bytes = team_bytes + answer.report.team_read_bytes;
  answer.report.team_ms = team_ms;
  answer.report.n_generated = int(answer.tokens.size());
  answer.report.decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The reusable prefix (the documents) is written in an order of its own, the team tier gets it
  // with that order (InsertOptions::shared_prefix).
  if (o.store && store_)
    pipeline_->StoreAsync(0, nullptr,
                          {.private_document = o.private_documents,
                           .publish = true,
                           .shared_prefix = uint64_t(std::max(prompt.n_prefix, 0))});
  return answer;
}

Result<FidelityReport> ChatSession::Fidelity(const std::string& question, const AskOptions& o, int n_continue) {
  const PromptTokens prompt = conversation_.Build(question, ctx_->tokenizer(), ctx_->chat_template(), o.raw);
  return CheckFidelity(*pipeline_, {prompt.tokens, prompt.n_prefix}, o.pipeline, n_continue, o.cancel);
}

}  // namespace impress
