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
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks() {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks_) return;
    (*fn_)(i);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  auto started = [&] {
    return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (!SpinUntil(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunTasks();
    if (n_busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller is spinning, or waiting with mu_ released
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n;
  next_.store(0, std::memory_order_relaxed);
  n_busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under mu_ so that a worker between its check and its sleep cannot miss the start.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);  // publishes fn_, n_tasks_, next_
  }
  cv_start_.notify_all();
  RunTasks();
  auto done = [&] { return n_busy_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, done);
  }
  fn_ = nullptr;
}

}  // namespace impress
