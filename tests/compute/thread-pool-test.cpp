// ThreadPool: every task of every job runs exactly once, jobs back to back (the decode pattern:
// hundreds of small jobs, workers that may wake after the caller has moved on), uneven tasks.
#include "engine/compute/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace impress {
namespace {

TEST(ThreadPool, EveryTaskOfEveryJobRunsOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int job = 0; job < 2000; ++job) {
      const int64_t n = 1 + job % 37;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      const std::function<void(int64_t)> fn = [&](int64_t i) { hits[size_t(i)].fetch_add(1); };
      pool.ParallelFor(n, fn);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads " << threads << " job " << job;
    }
  }
}

// A task that sleeps keeps its worker busy while the caller runs the rest; the job still ends
// only when every task has finished.
TEST(ThreadPool, WaitsForSlowTasks) {
  ThreadPool pool(3);
  for (int job = 0; job < 20; ++job) {
    std::atomic<int> finished{0};
    const std::function<void(int64_t)> fn = [&](int64_t i) {
      if (i % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      finished.fetch_add(1);
    };
    pool.ParallelFor(16, fn);
    EXPECT_EQ(finished.load(), 16);
  }
}

TEST(ThreadPool, EmptyJobRunsNothing) {
  ThreadPool pool(2);
  int calls = 0;
  const std::function<void(int64_t)> fn = [&](int64_t) { ++calls; };
  pool.ParallelFor(0, fn);
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace impress
