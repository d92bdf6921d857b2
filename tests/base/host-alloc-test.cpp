#include "base/host-alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

namespace impress {
namespace {

TEST(HostAlloc, LargeBuffersAreHugePageAlignedAndSmallOnesAsAsked) {
  void* small = AllocHostBuffer(1000, 256);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 256, 0u);
  void* large = AllocHostBuffer(kHugePageMin + 1);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % kHugePageMin, 0u);
  std::free(small);
  std::free(large);
}

// A scratch array moved between sizes keeps its buffer and what its user wrote there: nothing
// is zeroed behind the kernels' backs (and nothing is paid for it).
TEST(ScratchArray, GrowKeepsTheBufferAndItsValuesWhileLargeEnough) {
  ScratchArray<float> a;
  EXPECT_EQ(a.data(), nullptr);
  float* p = a.Grow(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  for (int i = 0; i < 1000; ++i) p[i] = float(i) + 0.5f;
  EXPECT_EQ(a.Grow(10), p);    // smaller: the same buffer
  EXPECT_EQ(a.Grow(1000), p);  // back to the size before: still the same, values intact
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a[size_t(i)], float(i) + 0.5f) << i;
  a[7] = -1.0f;
  EXPECT_EQ(p[7], -1.0f);
}

TEST(ScratchArray, GrowsByHalvesSoAContextGrowingATokenACallRarelyReallocates) {
  ScratchArray<int32_t> a;
  a.Grow(1000);
  int moves = 0;
  const int32_t* last = a.data();
  for (size_t n = 1001; n <= 4000; ++n) {
    const int32_t* p = a.Grow(n);
    ASSERT_NE(p, nullptr);
    p = a.Grow(n);  // asked again, the same
    EXPECT_EQ(a.data(), p);
    if (p != last) ++moves;
    last = p;
  }
  // 1000 -> 1500 -> 2250 -> 3375 -> 5062: four moves where growing to fit would take 3000.
  EXPECT_EQ(moves, 4);
}

}  // namespace
}  // namespace impress
