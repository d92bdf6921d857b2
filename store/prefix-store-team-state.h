// The team tier's state inside the store, shared by prefix-store-team.cpp (publishing, filling)
// and prefix-store-remote.cpp (remote matches read per layer). Internal to store/.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "base/mutex.h"
#include "store/prefix-store-impl.h"
#include "store/team-tier.h"

namespace impress::store {

using TeamClock = std::chrono::steady_clock;

// A prefix the team tier holds and the local tiers do not, staged by FillFromTeam for the next
// Match (TeamOptions::selective).
struct RemotePrefix {
  std::vector<Token> tokens;  // whole spans of the query, as the team tier matched them
  std::vector<TeamDescriptor> spans;
  std::shared_ptr<TeamTier> tier;
  // A read of it failed: the reads still queued fail at once (a stalled server would otherwise
  // cost every one of them its request timeout) and the background fill is not started.
  mutable std::atomic<bool> failed{false};
};

// One layer's read of a remote match: planned under the store's mutex, run on the team worker,
// handed over through `done` (everything else is written before it is set, read after).
struct RemoteRead {
  bool probe = false, want_k = false, want_v = false;
  std::vector<uint32_t> positions;  // KV reads: in the caller's order
  std::vector<uint8_t> k, v;        // records as stored (probe: k, one per matched position)
  uint64_t bytes = 0;               // received from the team tier
  uint32_t spans = 0;               // spans it touched
  TeamClock::time_point submitted{}, completed{};
  std::promise<Status> done;
  std::future<Status> result = done.get_future();
};

// An Insert past a staged prefix, waiting for the background fill to bring the prefix.
struct DeferredInsert {
  std::vector<Token> tokens;
  uint64_t start = 0;
  std::vector<std::vector<f16_t>> k, v;
  std::vector<std::vector<float>> importance;  // empty: none given
  InsertOptions io;
};

struct PrefixStore::Impl::TeamState {
  TeamOptions opt;
  TeamTierOptions tier_opt;
  std::unique_ptr<TeamPublisher> publisher;  // null: read only

  Mutex fill_mu;  // one fill at a time

  Mutex mu;
  std::shared_ptr<TeamTier> tier GUARDED_BY(mu);  // the fills' connection; null until connected
  TeamClock::time_point next_try GUARDED_BY(mu){};
  static constexpr size_t kMaxDeferred = 8;
  bool connected GUARDED_BY(mu) = false;
  std::string status GUARDED_BY(mu) = "not contacted yet";
  TeamTierInfo counts GUARDED_BY(mu);                         // fills, hits, tokens, bytes, errors, corrupt, latency
  std::shared_ptr<const RemotePrefix> staged GUARDED_BY(mu);  // for the next Match
  std::vector<DeferredInsert> deferred GUARDED_BY(mu);        // at most kMaxDeferred

  // The worker: remote reads and background fills, one at a time in the order posted. Stopping
  // runs what is still queued (reads: their callers wait for them; fills: so a one-shot command
  // leaves the prefix it read from the team in its store) and then ends.
  Mutex q_mu;
  CondVar q_cv;                                                           // waits under q_mu: a job posted, or stopping
  std::deque<std::pair<bool, std::function<void()>>> q GUARDED_BY(q_mu);  // (is a fill, job)
  bool q_stop GUARDED_BY(q_mu) = false;
  std::thread q_thread;

  // After StopWorker (the store is closing) a read runs on the caller's thread and a fill is
  // dropped: no thread is started that nobody would join.
  void Post(bool fill, std::function<void()> job) EXCLUDES(q_mu) {
    {
      MutexLock lk(&q_mu);
      if (!q_stop) {
        q.emplace_back(fill, std::move(job));
        if (!q_thread.joinable()) q_thread = std::thread([this] { WorkLoop(); });
        job = nullptr;
      }
    }
    if (job && !fill) job();
    q_cv.SignalAll();
  }
  ~TeamState() { StopWorker(); }
  void WorkLoop() EXCLUDES(q_mu) {
    for (;;) {
      std::pair<bool, std::function<void()>> job;
      {
        MutexLock lk(&q_mu);
        while (!q_stop && q.empty()) q_cv.Wait(&q_mu);
        if (q.empty()) return;
        job = std::move(q.front());
        q.pop_front();
        if (q_stop && job.first) spdlog::info("team tier: finishing a background fill before closing the store");
      }
      job.second();
    }
  }
  void StopWorker() EXCLUDES(q_mu) {
    std::thread t;
    {
      MutexLock lk(&q_mu);
      q_stop = true;
      t = std::move(q_thread);
    }
    q_cv.SignalAll();
    if (t.joinable()) t.join();
  }

  // The fills' connection, connecting when due; null (and `why`) when the tier is unreachable.
  std::shared_ptr<TeamTier> Connect(Status* why) EXCLUDES(mu) {
    {
      MutexLock lk(&mu);
      if (tier) return tier;
      if (TeamClock::now() < next_try) {
        *why = Status::IOError("team tier unreachable (" + status + "), not asked again yet");
        return nullptr;
      }
    }
    auto t = TeamTier::Open(tier_opt);
    if (!t.ok()) {
      Failed(t.status());
      *why = t.status();
      return nullptr;
    }
    MutexLock lk(&mu);
    tier = std::move(*t);
    return tier;
  }

  // A request failed: the network (or an unusable server) drops the connection for retry_pause.
  void Failed(const Status& s) EXCLUDES(mu) {
    MutexLock lk(&mu);
    ++counts.errors;
    if (s.code() != Status::Code::kIOError && s.code() != Status::Code::kInvalidArgument) return;
    tier.reset();
    connected = false;
    next_try = TeamClock::now() + opt.retry_pause;
    const std::string now = "unreachable: " + s.message();
    if (now != status) spdlog::warn("team tier {}: {}; prefixes are computed here meanwhile", opt.url, s.ToString());
    status = now;
  }

  void Reached() EXCLUDES(mu) {
    MutexLock lk(&mu);
    if (!connected) spdlog::info("team tier {} (team {}): connected", opt.url, opt.team);
    connected = true;
    status = "connected";
  }

  void NoteRequest(TeamClock::time_point t0) EXCLUDES(mu) {
    MutexLock lk(&mu);
    ++counts.requests;
    counts.request_us += uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(TeamClock::now() - t0).count());
  }
};

}  // namespace impress::store
