// TeamPublisher: the team tier's background publisher (store/team-tier.h): a bounded queue of
// KV copies and one thread that writes them, trying again later while Redis is unreachable.
#include <spdlog/spdlog.h>

#include <deque>
#include <random>
#include <thread>

#include "base/mutex.h"
#include "store/team-tier.h"

namespace impress::store {

class TeamPublisher::Impl {
 public:
  struct Job {
    std::vector<Token> tokens;
    uint64_t start = 0;
    std::vector<std::vector<f16_t>> k, v;  // [layer] (tokens.size() - start, n_head_kv, head_dim)
    TeamOrder order;
    uint64_t bytes = 0;
  };

  Impl(TeamTierOptions t, TeamPublisherOptions o) : tier_opt(std::move(t)), opt(o) {}

  void Loop();
  // One try at a job: connects when not connected, encodes once, writes.
  Status TryOnce(Job& job, std::unique_ptr<TeamTier>* tier, std::vector<TeamSpan>* spans);
  bool PauseBeforeRetry(std::chrono::milliseconds pause) EXCLUDES(mu);  // false: stopping

  const TeamTierOptions tier_opt;
  const TeamPublisherOptions opt;
  std::mt19937_64 rng{std::random_device{}()};  // publish ids; the thread's own
  Mutex mu;
  CondVar wake;  // a job came, or stop
  CondVar idle;  // the queue drained
  std::deque<Job> queue GUARDED_BY(mu);
  uint64_t queued_bytes GUARDED_BY(mu) = 0;  // also counts copies still being made
  int copying GUARDED_BY(mu) = 0;
  bool busy GUARDED_BY(mu) = false;
  bool stop GUARDED_BY(mu) = false;
  TeamTier* tier GUARDED_BY(mu) = nullptr;  // the thread's, for stats()
  TeamPublisherStats st GUARDED_BY(mu);
  std::thread thread;
};

Status TeamPublisher::Impl::TryOnce(Job& job, std::unique_ptr<TeamTier>* t, std::vector<TeamSpan>* spans) {
  if (!*t) {
    IMPRESS_ASSIGN_OR_RETURN(*t, TeamTier::Open(tier_opt));
    MutexLock lk(&mu);
    tier = t->get();
  }
  if (spans->empty()) {
    std::vector<LayerKV> layers(job.k.size());
    for (size_t l = 0; l < layers.size(); ++l) layers[l] = LayerKV{job.k[l].data(), job.v[l].data(), nullptr};
    IMPRESS_ASSIGN_OR_RETURN(*spans, (*t)->EncodeSpans(job.tokens, job.start, layers, rng(), job.order));
    if (spans->empty()) return Status::Ok();
  }
  return (*t)->Publish(*spans);
}

bool TeamPublisher::Impl::PauseBeforeRetry(std::chrono::milliseconds pause) {
  const auto until = std::chrono::steady_clock::now() + pause;
  MutexLock lk(&mu);
  ++st.retries;
  while (!stop && std::chrono::steady_clock::now() < until) wake.WaitUntil(&mu, until);
  return !stop;
}

void TeamPublisher::Impl::Loop() {
  std::unique_ptr<TeamTier> own;
  for (;;) {
    Job job;
    {
      MutexLock lk(&mu);
      while (!stop && queue.empty()) wake.Wait(&mu);
      if (stop) break;
      job = std::move(queue.front());
      queue.pop_front();
      busy = true;
    }
    std::vector<TeamSpan> spans;
    auto pause = opt.retry_min;
    Status s;
    for (;;) {
      s = TryOnce(job, &own, &spans);
      // The network and the server's state of the moment pass; anything else does not.
      if (s.ok() || s.code() != Status::Code::kIOError) break;
      spdlog::debug("team tier: publish failed, trying again in {} ms: {}", pause.count(), s.ToString());
      if (!PauseBeforeRetry(pause)) break;
      pause = std::min(pause * 2, opt.retry_max);
    }
    MutexLock lk(&mu);
    if (s.ok()) {
      ++st.jobs_done;
    } else if (!stop) {
      ++st.jobs_failed;
      spdlog::warn("team tier: publishing a document's KV failed: {}", s.ToString());
    }
    busy = false;
    queued_bytes -= job.bytes;
    idle.SignalAll();
  }
  MutexLock lk(&mu);
  tier = nullptr;
  idle.SignalAll();
}

TeamPublisher::TeamPublisher(TeamTierOptions tier, TeamPublisherOptions options) :
    impl_(std::make_unique<Impl>(std::move(tier), options)) {
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

TeamPublisher::~TeamPublisher() {
  {
    MutexLock lk(&impl_->mu);
    impl_->stop = true;
    impl_->wake.SignalAll();
  }
  impl_->thread.join();
}

bool TeamPublisher::Submit(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                           bool private_document, TeamOrder order) {
  Impl& m = *impl_;
  const TeamModel& model = m.tier_opt.model;
  const size_t rows = start <= tokens.size() ? tokens.size() - start : 0;
  const size_t elems = rows * size_t(model.n_head_kv) * size_t(model.head_dim);
  const uint64_t bytes = uint64_t(elems) * sizeof(f16_t) * 2 * layers.size() + tokens.size_bytes();
  {
    MutexLock lk(&m.mu);
    ++m.st.submitted;
    if (private_document) {
      ++m.st.refused_private;
      return false;
    }
    bool bad = layers.size() != size_t(model.n_layer) || start > tokens.size();
    for (const auto& l : layers) bad = bad || !l.k || !l.v;
    if (bad) {
      ++m.st.jobs_failed;
      return false;
    }
    if (m.stop || m.queue.size() + size_t(m.copying) >= m.opt.max_jobs ||
        m.queued_bytes + bytes > m.opt.max_queue_bytes) {
      ++m.st.refused_full;
      return false;
    }
    m.queued_bytes += bytes;  // reserved while the copy is made outside the lock
    ++m.copying;
  }
  Impl::Job job;
  job.tokens.assign(tokens.begin(), tokens.end());
  job.start = start;
  job.order = std::move(order);
  job.bytes = bytes;
  for (const auto& l : layers) {
    job.k.emplace_back(l.k, l.k + elems);
    job.v.emplace_back(l.v, l.v + elems);
  }
  MutexLock lk(&m.mu);
  --m.copying;
  m.queue.push_back(std::move(job));
  m.wake.SignalAll();
  return true;
}

bool TeamPublisher::WaitIdle(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lk(&m.mu);
  while (!m.queue.empty() || m.busy || m.copying > 0) {
    if (m.stop || std::chrono::steady_clock::now() >= until) return false;
    m.idle.WaitUntil(&m.mu, until);
  }
  return true;
}

TeamPublisherStats TeamPublisher::stats() const {
  Impl& m = *impl_;
  MutexLock lk(&m.mu);
  TeamPublisherStats s = m.st;
  s.queued_jobs = m.queue.size();
  s.queued_bytes = m.queued_bytes;
  if (m.tier) s.tier = m.tier->stats();
  return s;
}

}  // namespace impress::store
