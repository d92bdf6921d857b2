#include "base/fp16.h"
#include "base/status.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace impress {
namespace {

TEST(Fp16, SoftwareAndHardwareAgreeOnAllHalfValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = Fp16ToFp32Soft(uint16_t(h));
    const float b = Fp16ToFp32(uint16_t(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b));
      continue;
    }
    ASSERT_EQ(a, b) << h;
    // Every finite half round-trips exactly.
    EXPECT_EQ(Fp32ToFp16Soft(a), uint16_t(h)) << h;
    EXPECT_EQ(Fp32ToFp16(a), uint16_t(h)) << h;
  }
}

TEST(Fp16, RoundsToNearestEvenLikeHardware) {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    uint32_t bits = state & 0xbfffffffu;  // keep magnitudes mostly in range
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16Soft(f), Fp32ToFp16(f)) << f;
  }
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status st = Status::Corruption("bad magic").WithContext("model.gguf");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_EQ(st.ToString(), "corruption: model.gguf: bad magic");
  Result<int> r = Status::NotFound("x");
  EXPECT_FALSE(r.ok());
  Result<int> v = 3;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 3);
}

}  // namespace
}  // namespace impress
