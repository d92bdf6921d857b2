// RowArrivals: which rows of a buffer another thread has filled so far, so that a reader can start
// on the rows that are there while the rest is still on its way. A layer's selected KV comes from
// the store chunk by chunk (its completion thread copies each chunk's rows into the layer's buffers
// as the chunk arrives); the question's attention takes its blocks of keys as they are complete
// instead of waiting for the whole layer.
//
// Rows are counted per bucket of kBucketRows; each row must be reported at most once. The filler
// also says, when asked, whether it has finished (no row will come any more): a wait for rows that
// never come ends then, with false, instead of blocking forever (a read that failed).
//
// Thread contract: internally synchronized. Reset while no one waits or reports.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace impress {

class RowArrivals {
 public:
  static constexpr uint32_t kBucketRows = 64;

  // n rows [0, n) expected, none arrived yet, no filler known.
  void Reset(uint32_t n_rows);
  // Polled while a wait lacks rows (every kPollInterval, or at once when rows arrive): true once
  // the filler has finished.
  void SetFinishedProbe(std::function<bool()> finished);
  // These rows are in the buffer now (each < n_rows, each reported once); wakes the waiters.
  void Arrived(std::span<const uint32_t> rows);
  void ArrivedRange(uint32_t begin, uint32_t end);

  // Blocks until every row of [begin, end) (clamped to n_rows) arrived: true; or until the filler
  // finished without them: false.
  bool Wait(uint32_t begin, uint32_t end);
  bool WaitAll() { return Wait(0, UINT32_MAX); }
  // Without waiting: whether every row of [begin, end) arrived.
  bool Ready(uint32_t begin, uint32_t end) const;
  // Without waiting: the first i with !skip(i) whose rows ranges[i] all arrived, or -1; one look.
  int FirstReady(std::span<const std::pair<uint32_t, uint32_t>> ranges, const std::function<bool(int)>& skip) const;
  // How many reports came so far; WaitForMore(seen) blocks until more than `seen` came (true) or
  // the filler finished (false). For a reader that takes whatever range is complete first.
  uint64_t reports() const;
  bool WaitForMore(uint64_t seen);

  // The readers that may wait at once (the attention's threads): the time during which all of
  // them waited is the read's unhidden time (stalled_ms).
  void SetReaders(int n);
  double stalled_ms() const;

  static constexpr std::chrono::milliseconds kPollInterval{2};

 private:
  bool CompleteLocked(uint32_t begin, uint32_t end) const REQUIRES(mu_);
  // Waits (counted as a reader waiting) until done() or the filler finished; done()'s last answer.
  template <class Done>
  bool WaitLocked(Done done) REQUIRES(mu_);
  uint32_t ExpectedLocked(size_t bucket) const REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar cv_;
  uint32_t n_rows_ GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> arrived_ GUARDED_BY(mu_);  // per bucket
  uint64_t reports_ GUARDED_BY(mu_) = 0;
  std::function<bool()> finished_ GUARDED_BY(mu_);
  int readers_ GUARDED_BY(mu_) = 1;
  int waiting_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point stall_begin_ GUARDED_BY(mu_);
  std::chrono::steady_clock::duration stalled_ GUARDED_BY(mu_){};
};

}  // namespace impress
