// engine/quant block decoding and activation quantization: DequantizeRow is bit for bit the
// model loader's Dequantize (F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) and the gguf Python
// package's dequantize (every quantized type, Q5_0/Q5_1/Q5_K included); activation blocks keep
// every value within half a step and carry exact sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/model/dequant.h"
#include "engine/quant/quant-kernels.h"
#include "tests/model/gguf-builder.h"
#include "tests/model/python-ref.h"
#include "tests/quant/random-blocks.h"

namespace impress::quant {
namespace {

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Number of elements whose bits differ; *first = index of the first.
int64_t BitDifferences(const float* a, const float* b, int64_t n, int64_t* first) {
  int64_t n_diff = 0;
  *first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, 4) != 0) {
      if (n_diff++ == 0) *first = i;
    }
  }
  return n_diff;
}

TEST(QuantDecode, EqualsModelDequantBitForBit) {
  std::mt19937 rng(11);
  const WeightType types[] = {WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
                              WeightType::kQ4_1, WeightType::kQ4_K, WeightType::kQ6_K};
  for (WeightType t : types) {
    SCOPED_TRACE(WeightTypeName(t));
    const int64_t n = 256 * 64;
    const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
    // One byte off alignment: rows are read in place from a file.
    std::vector<uint8_t> shifted(row.size() + 1);
    std::memcpy(shifted.data() + 1, row.data(), row.size());
    std::vector<float> ours(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    DequantizeRow(t, shifted.data() + 1, ours.data(), n);
    ASSERT_TRUE(Dequantize(uint32_t(t), row.data(), row.size(), theirs.data(), uint64_t(n), "row").ok());
    int64_t first = 0;
    EXPECT_EQ(BitDifferences(ours.data(), theirs.data(), n, &first), 0) << "first at " << first;
  }
}

TEST(QuantDecode, MatchesGgufPythonBitForBit) {
  const std::string dir = impress::test::MakeTempDir("quant-ref");
  ASSERT_FALSE(dir.empty());
  const std::string py = impress::test::ReferencePython();
  if (py.empty() || !std::filesystem::exists(py)) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  const std::string cmd =
      "'" + py + "' '" + impress::test::SourceDir() + "/tests/quant/quant-reference.py' '" + dir + "' > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (WeightType t : test::kQuantizedTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    const auto raw = ReadAll(dir + "/" + WeightTypeName(t) + ".bin");
    const auto ref = ReadAll(dir + "/" + WeightTypeName(t) + ".f32");
    ASSERT_FALSE(raw.empty());
    const int64_t n = int64_t(ref.size() / 4);
    ASSERT_EQ(int64_t(raw.size()), n / BlockElements(t) * BlockBytes(t));
    std::vector<float> ours(static_cast<size_t>(n));
    DequantizeRow(t, raw.data(), ours.data(), n);
    int64_t first = 0;
    EXPECT_EQ(BitDifferences(ours.data(), reinterpret_cast<const float*>(ref.data()), n, &first), 0)
        << "first at " << first;
  }
  std::filesystem::remove_all(dir);
}

// |x - d q| <= d / 2 up to the rounding of d and of x * (127 / amax): a few ulps of amax, so
// 0.5001 d (the error the dot-product bounds build on).
void ExpectWithinHalfStep(const float* x, float d, const int8_t* qs, int len) {
  float amax = 0.0f;
  int imax = 0;
  for (int i = 0; i < len; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), imax = i;
  }
  if (amax == 0.0f) {
    EXPECT_EQ(d, 0.0f);
    for (int i = 0; i < len; ++i) EXPECT_EQ(qs[i], 0);
    return;
  }
  EXPECT_EQ(std::abs(int(qs[imax])), 127);
  for (int i = 0; i < len; ++i) {
    ASSERT_GE(qs[i], -127);
    ASSERT_LE(std::fabs(double(x[i]) - double(d) * qs[i]), 0.5001 * double(d)) << i;
  }
}

TEST(QuantActivations, BlocksStayWithinHalfAStepAndCarryExactSums) {
  std::mt19937 rng(5);
  const int64_t n = 256 * 24;
  std::vector<float> x = test::RandomActivations(n, rng);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // one all-zero K block
  std::vector<ActBlock32> b32(size_t(n / 32));
  std::vector<ActBlock256> b256(size_t(n / 256));
  QuantizeRow32(x.data(), n, b32.data());
  QuantizeRow256(x.data(), n, b256.data());
  for (size_t ib = 0; ib < b32.size(); ++ib) {
    ExpectWithinHalfStep(x.data() + 32 * ib, b32[ib].d, b32[ib].qs, 32);
    int sum = 0;
    for (int8_t q : b32[ib].qs) sum += q;
    EXPECT_EQ(b32[ib].sum, sum);
  }
  for (size_t ib = 0; ib < b256.size(); ++ib) {
    ExpectWithinHalfStep(x.data() + 256 * ib, b256[ib].d, b256[ib].qs, 256);
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b256[ib].qs[16 * k + i];
      EXPECT_EQ(b256[ib].bsums[k], sum);
    }
  }
}

TEST(QuantActivations, RowPreparesEachFormatAndRejectsPartialBlocks) {
  std::vector<float> x(512, 0.5f);
  ActivationRow row;
  ASSERT_TRUE(row.Prepare(ActFormat::kQ8x256, x.data(), 512).ok());
  EXPECT_EQ(row.n(), 512);
  const auto* k = static_cast<const ActBlock256*>(row.data());
  EXPECT_EQ(k[1].qs[255], 127);
  ASSERT_TRUE(row.Prepare(ActFormat::kF32, x.data(), 7).ok());  // fp32 rows take any length
  EXPECT_EQ(static_cast<const float*>(row.data())[6], 0.5f);
  EXPECT_EQ(row.Prepare(ActFormat::kQ8x32, x.data(), 48).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(row.Prepare(ActFormat::kQ8x256, x.data(), 288).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(row.Prepare(ActFormat::kF32, x.data(), -1).code(), Status::Code::kInvalidArgument);
}

TEST(QuantTypes, GeometryAndIdsFollowGguf) {
  EXPECT_EQ(BlockBytes(WeightType::kQ5_K), 176);
  EXPECT_EQ(BlockElements(WeightType::kQ5_0), 32);
  EXPECT_EQ(BlockElements(WeightType::kBF16), 1);
  EXPECT_TRUE(IsSupportedWeightType(13));   // Q5_K
  EXPECT_FALSE(IsSupportedWeightType(0));   // F32: rows stay with the fp32 backend
  EXPECT_FALSE(IsSupportedWeightType(16));  // IQ2_XXS
  EXPECT_STREQ(WeightTypeName(static_cast<WeightType>(16)), "unsupported");
  EXPECT_EQ(ActivationFormatFor(WeightType::kQ6_K), ActFormat::kQ8x256);
  EXPECT_EQ(ActivationFormatFor(WeightType::kQ5_1), ActFormat::kQ8x32);
  EXPECT_EQ(ActivationFormatFor(WeightType::kBF16), ActFormat::kF32);
}

}  // namespace
}  // namespace impress::quant
