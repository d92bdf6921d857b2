#include "base/row-arrivals.h"

#include <algorithm>

namespace impress {

void RowArrivals::Reset(uint32_t n_rows) {
  MutexLock lk(&mu_);
  n_rows_ = n_rows;
  arrived_.assign((size_t(n_rows) + kBucketRows - 1) / kBucketRows, 0);
  reports_ = 0;
  finished_ = nullptr;
  readers_ = 1;
  waiting_ = 0;
  stalled_ = {};
}

void RowArrivals::SetFinishedProbe(std::function<bool()> finished) {
  MutexLock lk(&mu_);
  finished_ = std::move(finished);
}

void RowArrivals::Arrived(std::span<const uint32_t> rows) {
  if (rows.empty()) return;
  {
    MutexLock lk(&mu_);
    for (uint32_t r : rows)
      if (r < n_rows_) ++arrived_[r / kBucketRows];
    ++reports_;
  }
  cv_.SignalAll();
}

void RowArrivals::ArrivedRange(uint32_t begin, uint32_t end) {
  {
    MutexLock lk(&mu_);
    ++reports_;
    end = std::min(end, n_rows_);
    for (uint32_t r = begin; r < end;) {
      const uint32_t bucket_end = std::min(end, (r / kBucketRows + 1) * kBucketRows);
      arrived_[r / kBucketRows] += bucket_end - r;
      r = bucket_end;
    }
  }
  cv_.SignalAll();
}

uint32_t RowArrivals::ExpectedLocked(size_t bucket) const {
  return std::min<uint32_t>(kBucketRows, n_rows_ - uint32_t(bucket) * kBucketRows);
}

bool RowArrivals::CompleteLocked(uint32_t begin, uint32_t end) const {
  if (begin >= end) return true;
  for (size_t b = begin / kBucketRows; b <= (end - 1) / kBucketRows; ++b)
    if (arrived_[b] < ExpectedLocked(b)) return false;
  return true;
}

template <class Done>
bool RowArrivals::WaitLocked(Done done) {
  using Clock = std::chrono::steady_clock;
  if (done()) return true;
  if (++waiting_ == readers_) stall_begin_ = Clock::now();
  bool ok = true;
  for (;;) {
    if (done()) break;
    if (cv_.WaitUntil(&mu_, Clock::now() + kPollInterval)) continue;
    // Nothing arrived for a while: whether the filler is done, asked without the lock (the filler
    // takes its own locks). Rows reported before it finished are counted by then.
    std::function<bool()> finished = finished_;
    mu_.Unlock();
    const bool over = finished && finished();
    mu_.Lock();
    if (over) {
      ok = done();
      break;
    }
  }
  if (waiting_-- == readers_) stalled_ += Clock::now() - stall_begin_;
  return ok;
}

bool RowArrivals::Wait(uint32_t begin, uint32_t end) {
  MutexLock lk(&mu_);
  end = std::min(end, n_rows_);
  return WaitLocked([&]() REQUIRES(mu_) { return CompleteLocked(begin, end); });
}

bool RowArrivals::Ready(uint32_t begin, uint32_t end) const {
  MutexLock lk(&mu_);
  return CompleteLocked(begin, std::min(end, n_rows_));
}

int RowArrivals::FirstReady(std::span<const std::pair<uint32_t, uint32_t>> ranges,
                            const std::function<bool(int)>& skip) const {
  MutexLock lk(&mu_);
  for (size_t i = 0; i < ranges.size(); ++i)
    if (!skip(int(i)) && CompleteLocked(ranges[i].first, std::min(ranges[i].second, n_rows_))) return int(i);
  return -1;
}

uint64_t RowArrivals::reports() const {
  MutexLock lk(&mu_);
  return reports_;
}

bool RowArrivals::WaitForMore(uint64_t seen) {
  MutexLock lk(&mu_);
  return WaitLocked([&]() REQUIRES(mu_) { return reports_ > seen; });
}

void RowArrivals::SetReaders(int n) {
  MutexLock lk(&mu_);
  readers_ = std::max(1, n);
}

double RowArrivals::stalled_ms() const {
  MutexLock lk(&mu_);
  return std::chrono::duration<double, std::milli>(stalled_).count();
}

}  // namespace impress
