#include "engine/compute/thread-pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace impress {

namespace {

// Spins until done() or about kSpinMicros have passed; whether done() became true.
constexpr int kSpinMicros = 50;
template <class Done>
bool SpinUntil(Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() > until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_.store(true);
  }
  cv_start_.SignalAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(uint64_t gen) {
  // Read before claiming; a successful claim proves they belong to `gen` (the caller re-tags
  // next_ before it replaces them).
  const std::function<void(int64_t)>* fn = fn_.load();
  const int64_t n = n_tasks_.load();
  const uint64_t tag = uint64_t(uint32_t(gen)) << 32;
  uint64_t cur = next_.load();
  for (;;) {
    if ((cur & ~uint64_t(0xffffffff)) != tag) return;
    const int64_t i = int64_t(cur & 0xffffffff);
    if (i >= n) return;
    if (!next_.compare_exchange_weak(cur, cur + 1)) continue;
    (*fn)(i);
    if (done_.fetch_add(1) + 1 == n) {
      MutexLock lock(&mu_);  // the caller is spinning, or waiting with mu_ released
      cv_done_.Signal();
    }
    cur = next_.load();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  auto started = [&] { return stop_.load() || generation_.load() != seen; };
  for (;;) {
    if (!SpinUntil(started)) {
      MutexLock lock(&mu_);
      while (!started()) cv_start_.Wait(&mu_);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    RunTasks(seen);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const uint64_t gen = generation_.load() + 1;
  next_.store(uint64_t(uint32_t(gen)) << 32);  // first: late workers of the last job now claim nothing
  fn_.store(&fn);
  n_tasks_.store(n);
  done_.store(0);
  {
    // Under mu_ so that a worker between its check and its sleep cannot miss the start.
    MutexLock lock(&mu_);
    generation_.store(gen);
  }
  cv_start_.SignalAll();
  RunTasks(gen);
  auto done = [&] { return done_.load() == n; };
  if (!SpinUntil(done)) {
    MutexLock lock(&mu_);
    while (!done()) cv_done_.Wait(&mu_);
  }
}

}  // namespace impress
