// RowArrivals: a wait returns once every row of its range was reported (never before), and, when
// the filler finished without some, returns false instead of blocking.
#include "base/row-arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace impress {
namespace {

TEST(RowArrivals, RangesOfReportedRowsAreCompleteAtOnce) {
  RowArrivals a;
  a.Reset(100);  // buckets of 64: the second holds 36 rows
  EXPECT_TRUE(a.Wait(5, 5));
  a.ArrivedRange(64, 100);
  EXPECT_TRUE(a.Wait(64, 100));
  EXPECT_TRUE(a.Wait(70, 1000));  // clamped to the rows there are
  const std::vector<uint32_t> first = {0, 1, 2};
  a.Arrived(first);
  a.SetFinishedProbe([] { return true; });
  EXPECT_FALSE(a.Wait(0, 64)) << "rows 3..63 never came";
  std::vector<uint32_t> rest(61);
  std::iota(rest.begin(), rest.end(), 3u);
  a.Arrived(rest);
  EXPECT_TRUE(a.WaitAll());
  a.Reset(10);
  a.SetFinishedProbe([] { return true; });
  EXPECT_FALSE(a.WaitAll()) << "a reset forgets what arrived";
}

// Another thread reports rows one at a time in a random order; each waiter, once let go, finds
// every row of its range marked as written before it was reported.
TEST(RowArrivals, AWaitEndsOnlyOnceItsRowsArrived) {
  constexpr uint32_t kRows = 1000;
  for (int round = 0; round < 20; ++round) {
    RowArrivals a;
    a.Reset(kRows);
    std::vector<std::atomic<uint8_t>> written(kRows);
    std::vector<uint32_t> order(kRows);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(round)));
    std::atomic<bool> done{false};
    a.SetFinishedProbe([&] { return done.load(); });
    std::thread filler([&] {
      for (uint32_t r : order) {
        written[r].store(1);
        a.Arrived(std::span<const uint32_t>(&r, 1));
      }
      done.store(true);
    });
    a.SetReaders(2);
    auto reader = [&](uint32_t begin, uint32_t end, bool* ok) {
      *ok = a.Wait(begin, end);
      for (uint32_t r = begin; r < end; ++r) *ok = *ok && written[r].load() == 1;
    };
    bool ok0 = false, ok1 = false;
    std::thread r0(reader, 0u, 300u, &ok0);
    reader(300, kRows, &ok1);
    r0.join();
    filler.join();
    EXPECT_TRUE(ok0) << "round " << round;
    EXPECT_TRUE(ok1) << "round " << round;
  }
}

// A reader that takes whichever range is complete first: FirstReady finds it without waiting (and
// skips what the reader took), WaitForMore wakes on the next report, or, once the filler is done,
// says no more will come.
TEST(RowArrivals, AReaderTakesWhicheverRangeIsCompleteFirst) {
  RowArrivals a;
  a.Reset(192);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {{0, 64}, {64, 128}, {128, 192}};
  const auto none = [](int) { return false; };
  EXPECT_EQ(a.FirstReady(ranges, none), -1);
  a.ArrivedRange(128, 192);
  EXPECT_EQ(a.FirstReady(ranges, none), 2);
  EXPECT_EQ(a.FirstReady(ranges, [](int i) { return i == 2; }), -1);
  const uint64_t seen = a.reports();
  std::atomic<bool> done{false};
  a.SetFinishedProbe([&] { return done.load(); });
  std::thread filler([&] {
    a.ArrivedRange(0, 64);
    done.store(true);
  });
  EXPECT_TRUE(a.WaitForMore(seen));
  filler.join();
  EXPECT_EQ(a.FirstReady(ranges, [](int i) { return i == 2; }), 0);
  EXPECT_FALSE(a.WaitForMore(a.reports())) << "the filler is done: nothing more will come";
}

// A filler that stops short: the waiter for the rows it never sent is let go with false, a waiter
// for rows it sent is not.
TEST(RowArrivals, AFillerThatStopsShortLetsItsWaitersGo) {
  RowArrivals a;
  a.Reset(256);
  std::atomic<bool> done{false};
  a.SetFinishedProbe([&] { return done.load(); });
  std::thread filler([&] {
    a.ArrivedRange(0, 128);
    done.store(true);
  });
  EXPECT_FALSE(a.Wait(100, 200));
  EXPECT_TRUE(a.Wait(0, 128));
  filler.join();
}

}  // namespace
}  // namespace impress
