// ModelWorker: the one thread that owns the chat session of `impress serve` and runs its
// generations one at a time, from a bounded queue. HTTP handler threads submit a Job and read
// its streamed text and result; a job's `cancel` stops it (client gone, time limit, shutdown)
// within a layer batch or a decode step. Every generation goes through ChatSession::AskPrompt:
// the pipeline matches the prefix store, runs IMPRESS, decodes and stores the KV.
//
// Thread contract: internally synchronized. Submit/Shutdown/queue_depth from any thread; the
// session is touched only by the worker thread (after construction, until Shutdown returns).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "chat/chat-session.h"

namespace impress::serve {

class ServeMetrics;
class PrefixScopes;

// Why a job was stopped before its answer ended by itself.
enum class CancelReason { kNone, kClientGone, kTimeout, kShutdown };

// One request for the worker and what comes back.
class Job {
 public:
  enum class Kind { kGenerate, kCheckStore };
  // Constant after Submit.
  Kind kind = Kind::kGenerate;
  PromptTokens prompt;
  AskOptions ask;  // on_text, cancel and remember are set by the worker
  std::vector<std::string> stop;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Whose prompt this is (PrefixScopes): its reusable prefix is capped to what this scope sent
  // before. Ignored when the worker has no scopes (one cache shared by all).
  std::string scope;

  // Set by anyone (through Cancel): the generation stops at its next check.
  std::atomic<bool> cancel{false};
  // Stops the job; the first reason given is the one its outcome reports.
  void Cancel(CancelReason why);
  CancelReason cancel_reason() const { return CancelReason(cancel_reason_.load()); }
  // Set by the worker when the first answer token came (the prompt's prefill is done).
  std::atomic<bool> decoding{false};

  // Waits until text is pending, the job is done, or `until`; moves the pending text into *text.
  // Returns true once the job is done (and all its text taken).
  bool Wait(std::string* text, std::chrono::steady_clock::time_point until) EXCLUDES(mu_);

  // The outcome, valid once Wait returned true.
  struct Outcome {
    Status status;
    ChatAnswer answer;
    bool ended_by_model = false;                       // a stop token ended the answer
    bool stop_string = false;                          // a stop string cut it
    bool timed_out = false;                            // the time limit cancelled it
    bool cancelled = false;                            // cancel (client gone, time limit, shutdown) stopped the answer
    CancelReason cancel_reason = CancelReason::kNone;  // why, when cancelled or failed Cancelled
  };
  const Outcome& outcome() const { return outcome_; }

 private:
  friend class ModelWorker;
  void Append(const std::string& text) EXCLUDES(mu_);
  void Finish(Outcome outcome) EXCLUDES(mu_);

  std::atomic<int> cancel_reason_{int(CancelReason::kNone)};
  Mutex mu_;
  CondVar cv_;
  std::string pending_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  Outcome outcome_;  // written once before done_ is set, read after
};

// Points where a test may hold the worker thread (to make a queue full, or a client leave, at
// a known moment). Unset in the product.
struct WorkerHooks {
  std::function<void(Job&)> on_prefill;      // after the prompt's first prefill batch
  std::function<void(Job&)> on_first_token;  // after the answer's first token was passed on
};

class ModelWorker {
 public:
  // `session`, `metrics` and `scopes` (may be null: every prompt may reuse every stored prefix)
  // outlive the worker. max_queue: jobs waiting beside the running one.
  ModelWorker(ChatSession& session, size_t max_queue, ServeMetrics* metrics, PrefixScopes* scopes = nullptr,
              WorkerHooks hooks = {});
  ~ModelWorker();  // Shutdown()
  ModelWorker(const ModelWorker&) = delete;
  ModelWorker& operator=(const ModelWorker&) = delete;

  // Queues a job. ResourceExhausted when the queue is full; Cancelled after Shutdown began.
  Status Submit(std::shared_ptr<Job> job) EXCLUDES(mu_);
  // Stops taking jobs, cancels the queued and running ones (each finishes with Cancelled or its
  // partial answer), waits for the store write, joins the thread. Idempotent.
  void Shutdown() EXCLUDES(mu_);
  int queue_depth() EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);
  void Run(Job& job);  // worker thread

  ChatSession& session_;
  const size_t max_queue_;
  ServeMetrics* const metrics_;
  PrefixScopes* const scopes_;
  const WorkerHooks hooks_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<Job>> queue_ GUARDED_BY(mu_);
  std::shared_ptr<Job> running_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace impress::serve
