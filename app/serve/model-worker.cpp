#include "app/serve/model-worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "app/serve/metrics.h"
#include "app/serve/openai-api.h"
#include "app/serve/prefix-scopes.h"
#include "engine/tokenizer/tokenizer.h"

namespace impress::serve {

bool Job::Wait(std::string* text, std::chrono::steady_clock::time_point until) {
  MutexLock lock(&mu_);
  while (pending_.empty() && !done_) {
    if (!cv_.WaitUntil(&mu_, until)) break;
  }
  text->append(pending_);
  pending_.clear();
  return done_;
}

void Job::Cancel(CancelReason why) {
  int none = int(CancelReason::kNone);
  cancel_reason_.compare_exchange_strong(none, int(why));
  cancel.store(true);
}

void Job::Append(const std::string& text) {
  if (text.empty()) return;
  MutexLock lock(&mu_);
  pending_ += text;
  cv_.SignalAll();
}

void Job::Finish(Outcome outcome) {
  MutexLock lock(&mu_);
  outcome_ = std::move(outcome);
  done_ = true;
  cv_.SignalAll();
}

ModelWorker::ModelWorker(ChatSession& session, size_t max_queue, ServeMetrics* metrics, PrefixScopes* scopes,
                         WorkerHooks hooks) :
    session_(session), max_queue_(max_queue), metrics_(metrics), scopes_(scopes), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { Loop(); });
}

ModelWorker::~ModelWorker() { Shutdown(); }

Status ModelWorker::Submit(std::shared_ptr<Job> job) {
  MutexLock lock(&mu_);
  if (stopping_) return Status::Cancelled("the server is shutting down");
  if (queue_.size() >= max_queue_) {
    return Status::ResourceExhausted(fmt::format("{} requests are waiting for the model", queue_.size()));
  }
  queue_.push_back(std::move(job));
  if (metrics_) metrics_->SetQueueDepth(int(queue_.size()));
  cv_.Signal();
  return Status::Ok();
}

void ModelWorker::Shutdown() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
    if (running_) running_->Cancel(CancelReason::kShutdown);
    cv_.SignalAll();
  }
  for (auto& job : dropped) {
    job->Cancel(CancelReason::kShutdown);
    Job::Outcome out;
    out.status = Status::Cancelled("the server is shutting down");
    out.cancel_reason = CancelReason::kShutdown;
    job->Finish(std::move(out));
  }
  if (thread_.joinable()) thread_.join();
}

int ModelWorker::queue_depth() {
  MutexLock lock(&mu_);
  return int(queue_.size());
}

void ModelWorker::Loop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (stopping_) break;
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
      if (metrics_) metrics_->SetQueueDepth(int(queue_.size()));
    }
    Run(*job);
    MutexLock lock(&mu_);
    running_.reset();
  }
  // The last answer's KV reaches the store before the session closes.
  if (auto w = session_.pipeline().WaitForStore(); !w.ok()) {
    spdlog::warn("the last answer's KV was not stored: {}", w.status().ToString());
  }
}

void ModelWorker::Run(Job& job) {
  Job::Outcome out;
  if (job.kind == Job::Kind::kCheckStore) {
    // Quiesce first: the background write and the last request's lock on its prefix.
    out.status = session_.pipeline().ReleaseMatch();
    if (out.status.ok() && session_.store()) out.status = session_.store()->CheckConsistency();
    job.Finish(std::move(out));
    return;
  }
  if (std::chrono::steady_clock::now() >= job.deadline) job.Cancel(CancelReason::kTimeout);
  if (job.cancel.load()) {
    out.cancel_reason = job.cancel_reason();
    out.timed_out = out.cancel_reason == CancelReason::kTimeout;
    if (metrics_) metrics_->CountCancelled();
    out.status =
        Status::Cancelled(out.timed_out ? "the request's time limit passed in the queue" : "the client went away");
    job.Finish(std::move(out));
    return;
  }
  // Reuse only what this prompt's scope sent before (the store itself matches anyone's).
  PromptTokens prompt = job.prompt;
  if (scopes_) prompt.n_prefix = scopes_->Reusable(job.scope, prompt.tokens, prompt.n_prefix);
  StopMatcher stops(job.stop);
  AskOptions ask = job.ask;
  ask.remember = false;
  ask.cancel = &job.cancel;
  bool prefill_reported = false;
  ask.on_prefill_progress = [&](uint64_t, uint64_t, std::string_view) {
    if (!prefill_reported && hooks_.on_prefill) hooks_.on_prefill(job);
    prefill_reported = true;
    if (std::chrono::steady_clock::now() >= job.deadline) job.Cancel(CancelReason::kTimeout);
    return !job.cancel.load();
  };
  ask.on_text = [&](const std::string& piece) {
    const bool first = !job.decoding.exchange(true);
    job.Append(stops.Push(piece));
    if (first && hooks_.on_first_token) hooks_.on_first_token(job);
    if (std::chrono::steady_clock::now() >= job.deadline) job.Cancel(CancelReason::kTimeout);
    return !stops.stopped();
  };
  auto answer = session_.AskPrompt(prompt, ask);
  out.cancel_reason = job.cancel_reason();
  out.timed_out = out.cancel_reason == CancelReason::kTimeout;
  if (!answer.ok()) {
    out.status = answer.status();
    if (metrics_ && out.status.code() == Status::Code::kCancelled) metrics_->CountCancelled();
    job.Finish(std::move(out));
    return;
  }
  if (scopes_) {
    std::vector<int32_t> seen = prompt.tokens;
    seen.insert(seen.end(), answer->tokens.begin(), answer->tokens.end());
    scopes_->Record(job.scope, seen);
  }
  job.Append(stops.Flush());
  out.stop_string = stops.stopped();
  out.cancelled = answer->stopped_by_user && !out.stop_string;
  if (!out.cancelled) out.cancel_reason = CancelReason::kNone;
  if (!answer->tokens.empty()) {
    const int32_t last = answer->tokens.back();
    const auto& eog = session_.context().stop_tokens();
    out.ended_by_model =
        std::find(eog.begin(), eog.end(), last) != eog.end() || session_.context().tokenizer().IsEndOfGeneration(last);
  }
  if (metrics_) metrics_->RecordGeneration(answer->report, int(answer->tokens.size()), out.cancelled);
  out.answer = std::move(*answer);
  job.Finish(std::move(out));
  // The answer's KV goes to the store in the background; the next prefill would wait for it
  // anyway, so waiting here (after the client has its answer) costs nothing and counts it.
  if (metrics_ && session_.store()) {
    auto written = session_.pipeline().WaitForStore();
    if (written.ok()) {
      const ModelConfig& c = session_.context().config();
      const uint64_t kv_bytes_per_token = uint64_t(c.n_layer) * uint64_t(c.n_head_kv) * uint64_t(c.head_dim) * 2 * 2;
      metrics_->RecordStored(*written, *written * kv_bytes_per_token);
    }
  }
}

}  // namespace impress::serve
