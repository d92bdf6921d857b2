// ThreadPool: a small fork-join pool for the CPU backend's element-wise ops and attention.
//
// ParallelFor(n, fn) runs fn(i) for i in [0, n) on the pool's workers plus the calling thread
// and returns when all are done. Tasks are claimed dynamically (one atomic counter), so uneven
// tasks balance. fn must not throw and must not call ParallelFor on the same pool.
//
// Workers (and the caller, waiting for them) spin for a few tens of microseconds before they
// sleep: decode issues hundreds of small jobs per token back to back, and waking a sleeping
// thread costs about as much as one of those jobs.
//
// Thread contract: one caller at a time (the backend's single issuing thread). The pool owns
// its n_threads - 1 worker threads and joins them on destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace impress {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();
  // Claims and runs tasks of job `gen` until none is left (or a newer job replaced it).
  void RunTasks(uint64_t gen);

  const int n_threads_;
  std::vector<std::thread> workers_;
  // Guards no member: the job's state is atomic. It orders sleeping on the condition variables
  // with the changes below, so that a wake-up between a check and a sleep is not lost.
  Mutex mu_;
  CondVar cv_start_, cv_done_;
  std::atomic<uint64_t> generation_{0};  // advanced (under mu_) to start a job
  std::atomic<bool> stop_{false};        // set (under mu_) to end the workers
  // The current job. next_ holds the job's generation (low 32 bits) in its high half and the
  // next task index in its low half: a worker that wakes late, holding an older generation,
  // can claim nothing, so the caller waits for the tasks to be done, never for a worker to be
  // scheduled (which matters when the cores are shared).
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> done_{0};  // tasks of the current job finished
};

}  // namespace impress
