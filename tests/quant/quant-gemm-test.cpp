// engine/quant's int8 GEMM (prefill) on every path it has that this CPU runs (a type a path lacks
// is refused with kUnsupported):
//  - its activation blocks are QuantizeRow32's, bit for bit (the AVX-512 quantizer included);
//  - the unsigned bytes, scales and offsets it packs are the weights DequantizeRow gives (which
//    is bit-exact against the gguf package), to fp32 rounding;
//  - every path's output equals the scalar reference's bit for bit (same integer block sums,
//    same fp32 operations in the same order), including partial panels, odd row counts,
//    sub-ranges of weight rows and beta = 1;
//  - the output is within fp32 rounding of an fp64 dot of the dequantized weights with the
//    dequantized int8 activations (bound below), so the reference itself computes the product;
//  - the arguments are checked.
// Rounding bound: each output adds n_groups blocks (Q6_K: 2 n_groups half blocks), each
// (dw * da) * I + mw * (da * S) with |I| <= umax * sum|qa| and |S| <= sum|qa|; every rounding is
// a factor (1 + e), |e| <= 2^-24, on a partial sum no larger than
// M = sum_g (|dw| umax + |mw|) |da| sum|qa|; no value passes through more than 4 n_groups + 4
// roundings, and the packed dw, mw carry one rounding each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/gemm-decode-inl.h"
#include "engine/quant/gemm.h"
#include "tests/quant/random-blocks.h"

namespace impress::quant {
namespace {

constexpr double kU = 1.0 / (1 << 24);
constexpr WeightType kGemmTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                                     WeightType::kQ5_1, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};

int Halves(WeightType t) { return t == WeightType::kQ6_K ? 2 : 1; }

// Group g of a row through the packer's decoder.
void Decode(WeightType t, const uint8_t* row, int64_t g, uint8_t* u, float* dw, float* mw) {
  using gemm_internal::DecodeGroup;
  switch (t) {
    case WeightType::kQ8_0: DecodeGroup<WeightType::kQ8_0>(row, g, u, dw, mw); break;
    case WeightType::kQ4_0: DecodeGroup<WeightType::kQ4_0>(row, g, u, dw, mw); break;
    case WeightType::kQ4_1: DecodeGroup<WeightType::kQ4_1>(row, g, u, dw, mw); break;
    case WeightType::kQ5_0: DecodeGroup<WeightType::kQ5_0>(row, g, u, dw, mw); break;
    case WeightType::kQ5_1: DecodeGroup<WeightType::kQ5_1>(row, g, u, dw, mw); break;
    case WeightType::kQ4_K: DecodeGroup<WeightType::kQ4_K>(row, g, u, dw, mw); break;
    case WeightType::kQ5_K: DecodeGroup<WeightType::kQ5_K>(row, g, u, dw, mw); break;
    case WeightType::kQ6_K: DecodeGroup<WeightType::kQ6_K>(row, g, u, dw, mw); break;
    default: FAIL() << "not a GEMM type";
  }
}

// A random matrix of n_rows x n_cols of type t (block cases mixed, see random-blocks.h).
std::vector<uint8_t> RandomMatrix(WeightType t, int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  std::vector<uint8_t> m;
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::vector<uint8_t> row = test::RandomRow(t, n_cols, rng);
    m.insert(m.end(), row.begin(), row.end());
  }
  return m;
}

TEST(QuantGemm, PackedBytesAreTheDequantizedWeights) {
  std::mt19937 rng(7);
  constexpr int64_t n = 1024;
  for (WeightType t : kGemmTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    for (int rep = 0; rep < 8; ++rep) {
      const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
      std::vector<float> ref(n);
      DequantizeRow(t, row.data(), ref.data(), n);
      for (int64_t g = 0; g < n / 32; ++g) {
        uint8_t u[32];
        float dws[2] = {}, mws[2] = {};
        Decode(t, row.data(), g, u, dws, mws);
        for (int e = 0; e < 32; ++e) {
          const float dw = dws[e * Halves(t) / 32], mw = mws[e * Halves(t) / 32];
          const double v = double(dw) * u[e] + double(mw);
          const double tol = 4 * kU * (std::fabs(double(dw) * u[e]) + std::fabs(mw)) + 1e-45;
          ASSERT_LE(std::fabs(v - ref[size_t(32 * g + e)]), tol) << "group " << g << " element " << e;
        }
      }
    }
  }
}

// The small-batch path's row decoder (AVX2, the baseline) against the packer's, bit for bit.
TEST(QuantGemm, RowDecoderEqualsDecodeGroup) {
  std::mt19937 rng(9);
  constexpr int64_t n = 1024, n_groups = n / 32;
  for (WeightType t : kGemmTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    for (int rep = 0; rep < 8; ++rep) {
      const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
      std::vector<uint8_t> u(n, 0xee);
      std::vector<float> dw(size_t(n_groups * Halves(t)), -1.0f), mw(dw.size(), -1.0f);
      gemm_internal::DecodeRowAvx2(t, row.data(), n_groups, u.data(), dw.data(), mw.data());
      for (int64_t g = 0; g < n_groups; ++g) {
        uint8_t want_u[32];
        float want_dw[2] = {}, want_mw[2] = {};
        Decode(t, row.data(), g, want_u, want_dw, want_mw);
        ASSERT_EQ(std::memcmp(u.data() + 32 * g, want_u, 32), 0) << "group " << g;
        for (int h = 0; h < Halves(t); ++h) {
          const size_t s = size_t(g * Halves(t) + h);
          ASSERT_EQ(std::memcmp(&dw[s], &want_dw[h], 4), 0) << "group " << g << " half " << h;
          ASSERT_EQ(std::memcmp(&mw[s], &want_mw[h], 4), 0) << "group " << g << " half " << h;
        }
      }
    }
  }
}

TEST(QuantGemm, ActivationBlocksAreQuantizeRow32s) {
  std::mt19937 rng(5);
  constexpr int kM = 5;
  constexpr int64_t kCols = 2048;
  std::vector<float> xf;
  for (int i = 0; i < kM; ++i) {
    const std::vector<float> row = test::RandomActivations(kCols, rng);
    xf.insert(xf.end(), row.begin(), row.end());
  }
  xf[100] = -1e4f;  // a negative spike; then a block whose scale is 1 and values are ties (k + 0.5)
  for (int e = 0; e < 31; ++e) xf[size_t(kCols + e)] = float(e) - 15.5f;
  xf[size_t(kCols + 31)] = 127.0f;
  GemmActivations x;
  ASSERT_TRUE(x.Reset(kM, kCols).ok());
  x.QuantizeRows(xf.data(), kCols, 0, kM);
  std::vector<ActBlock32> want(kCols / 32);
  for (int i = 0; i < kM; ++i) {
    QuantizeRow32(xf.data() + i * kCols, kCols, want.data());
    for (int64_t b = 0; b < kCols / 32; ++b) {
      const ActBlock32& got = x.Row(i)[b];
      ASSERT_EQ(got.d, want[size_t(b)].d) << "row " << i << " block " << b;
      ASSERT_EQ(got.sum, want[size_t(b)].sum) << "row " << i << " block " << b;
      ASSERT_EQ(std::memcmp(got.qs, want[size_t(b)].qs, 32), 0) << "row " << i << " block " << b;
      ASSERT_EQ(x.DSum(i)[b], got.d * float(got.sum));
      for (int h = 0; h < 2; ++h) {
        int32_t half = 0;
        for (int e = 16 * h; e < 16 * h + 16; ++e) half += got.qs[e];
        ASSERT_EQ(x.DSum16(i)[2 * b + h], got.d * float(half));
      }
    }
  }
}

class QuantGemm : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    if (const char* missing = MissingCpuFeature(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the " << KernelPathName(GetParam()) << " path)";
  }
};

TEST_P(QuantGemm, EqualsScalarBitForBitAndTheFp64ProductWithinRounding) {
  const KernelPath path = GetParam();
  std::mt19937 rng(31);
  constexpr int64_t kRows = 45, kCols = 512;  // a full panel and a partial one
  constexpr int kM = kGemmLaneRows + 7;       // packed panels (past the small-batch path): groups of 4 and a tail of 3
  for (WeightType t : kGemmTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    const std::vector<uint8_t> wbytes = RandomMatrix(t, kRows, kCols, rng);
    if (!GemmSupports(t, path)) {  // AVX2 has no Q8_0: refused, the caller falls back
      GemmActivations x;
      ASSERT_TRUE(x.Reset(1, kCols).ok());
      std::vector<float> y(kRows);
      EXPECT_EQ(GemmRows(WeightMatrix{t, wbytes.data(), kRows, kCols}, x, 0, kRows, 0.0f, y.data(), kRows, path).code(),
                Status::Code::kUnsupported);
      continue;
    }
    const WeightMatrix w{t, wbytes.data(), kRows, kCols};
    std::vector<float> xf;
    for (int i = 0; i < kM; ++i) {
      const std::vector<float> row = test::RandomActivations(kCols, rng);
      xf.insert(xf.end(), row.begin(), row.end());
    }
    GemmActivations x;
    ASSERT_TRUE(x.Reset(kM, kCols).ok());
    x.QuantizeRows(xf.data(), kCols, 0, 3);  // in two ranges, as threads would
    x.QuantizeRows(xf.data(), kCols, 3, kM);

    // Whole matrix, beta = 0: y is never read (NaN must not leak in).
    std::vector<float> y(size_t(kM * kRows), std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(GemmRows(w, x, 0, kRows, 0.0f, y.data(), kRows, path).ok());
    std::vector<float> ref(y.size(), std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(GemmRows(w, x, 0, kRows, 0.0f, ref.data(), kRows, KernelPath::kScalar).ok());
    ASSERT_EQ(std::memcmp(y.data(), ref.data(), sizeof(float) * y.size()), 0) << "differs from the scalar reference";
    if (!GemmUsesLanes(kM, path)) {  // the same rows prepared without the small-batch layout, as the backend does
      GemmActivations bare;
      ASSERT_TRUE(bare.Reset(kM, kCols, false, false).ok());
      bare.QuantizeRows(xf.data(), kCols, 0, kM);
      std::vector<float> yb(y.size(), std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(GemmRows(w, bare, 0, kRows, 0.0f, yb.data(), kRows, path).ok());
      ASSERT_EQ(std::memcmp(yb.data(), ref.data(), sizeof(float) * y.size()), 0) << "without the lane layout";
    }

    // Against fp64 over the dequantized weights and activations.
    std::vector<float> wf(static_cast<size_t>(kCols));
    for (int64_t r = 0; r < kRows; ++r) {
      const uint8_t* row = wbytes.data() + r * w.RowBytes();
      DequantizeRow(t, row, wf.data(), kCols);
      for (int i = 0; i < kM; ++i) {
        const ActBlock32* a = x.Row(i);
        double exact = 0, magnitude = 0;
        for (int64_t g = 0; g < kCols / 32; ++g) {
          uint8_t u[32];
          float dw[2] = {}, mw[2] = {};
          Decode(t, row, g, u, dw, mw);
          for (int e = 0; e < 32; ++e) {
            exact += double(wf[size_t(32 * g + e)]) * a[g].d * a[g].qs[e];
            const int h = e * Halves(t) / 32;
            magnitude += (std::fabs(dw[h]) * 255 + std::fabs(mw[h])) * std::fabs(a[g].d) * std::abs(a[g].qs[e]);
          }
        }
        const double bound = (4.0 * kCols / 32 + 8) * kU * magnitude + 1e-30;
        ASSERT_LE(std::fabs(y[size_t(i * kRows + r)] - exact), bound) << "row " << r << " activation " << i;
      }
    }

    // A sub-range of weight rows, beta = 1: other entries untouched, the range accumulates.
    std::vector<float> acc(y.size());
    for (size_t e = 0; e < acc.size(); ++e) acc[e] = float(e % 13) - 6.0f;
    std::vector<float> acc_ref = acc;
    const std::vector<float> before = acc;
    ASSERT_TRUE(GemmRows(w, x, 5, 40, 1.0f, acc.data(), kRows, path).ok());
    ASSERT_TRUE(GemmRows(w, x, 5, 40, 1.0f, acc_ref.data(), kRows, KernelPath::kScalar).ok());
    ASSERT_EQ(std::memcmp(acc.data(), acc_ref.data(), sizeof(float) * acc.size()), 0);
    for (int i = 0; i < kM; ++i) {
      for (int64_t r = 0; r < kRows; ++r) {
        const size_t e = size_t(i * kRows + r);
        if (r < 5 || r >= 40) {
          ASSERT_EQ(acc[e], before[e]) << "row " << r << " outside the range was written";
        } else {
          ASSERT_EQ(acc[e], std::fma(1.0f, before[e], y[e]));
        }
      }
    }
  }
}

// Small batches (1..kGemmLaneRows activation rows) take the interleaved-activation path: every
// row count, every type, with and without the residual set, beta 0 and 1, a partial strip at the
// end and a range that starts inside the matrix; bit for bit the scalar reference.
TEST_P(QuantGemm, SmallBatchesEqualScalarBitForBit) {
  const KernelPath path = GetParam();
  std::mt19937 rng(41);
  constexpr int64_t kRows = 21, kCols = 1280;  // strips of 8: two whole, one partial; chunks of 16 groups: 2.5
  for (WeightType t : kGemmTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    if (!GemmSupports(t, path)) continue;  // refused: covered above
    const std::vector<uint8_t> wbytes = RandomMatrix(t, kRows, kCols, rng);
    const WeightMatrix w{t, wbytes.data(), kRows, kCols};
    std::vector<float> xf;
    for (int i = 0; i < kGemmLaneRows; ++i) {
      const std::vector<float> row = test::RandomActivations(kCols, rng);
      xf.insert(xf.end(), row.begin(), row.end());
    }
    // One set of activations for every size, largest first: each Reset leaves the rows of the
    // larger batch before it in the buffers, and no output may depend on them.
    GemmActivations x;
    for (int m = kGemmLaneRows; m >= 1; --m) {
      SCOPED_TRACE("rows " + std::to_string(m));
      const bool residual = m % 5 == 0;
      ASSERT_TRUE(x.Reset(m, kCols, residual).ok());
      x.QuantizeRows(xf.data(), kCols, 0, m);
      const float beta = m % 2 == 0 ? 0.0f : 1.0f;
      const int64_t r0 = m % 3 == 0 ? 3 : 0;
      std::vector<float> y(size_t(m * kRows));
      for (size_t e = 0; e < y.size(); ++e)
        y[e] = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : float(e % 7);
      std::vector<float> ref = y;
      ASSERT_TRUE(GemmRows(w, x, r0, kRows, beta, y.data(), kRows, path).ok());
      ASSERT_TRUE(GemmRows(w, x, r0, kRows, beta, ref.data(), kRows, KernelPath::kScalar).ok());
      for (size_t e = 0; e < y.size(); ++e) {
        if (int64_t(e) % kRows < r0) {
          ASSERT_TRUE(std::isnan(y[e]) || beta != 0.0f) << "row outside the range was written";
          continue;
        }
        ASSERT_EQ(std::memcmp(&y[e], &ref[e], sizeof(float)), 0)
            << "activation " << e / kRows << " weight row " << e % kRows << ": " << y[e] << " vs " << ref[e];
      }
    }
  }
}

// The largest sums a kernel can meet: every decoded weight at its type's largest value (all
// quantized bits set) against activations that quantize to +-127 everywhere, rows of either sign,
// batches of 1 row to past kGemmLaneRows (every tile shape and tail). The AVX2 kernel adds several quads' 16-bit pair
// sums before widening them (as many as its bound allows per width); one more would overflow here.
TEST_P(QuantGemm, LargestWeightsAndActivationsEqualScalarBitForBit) {
  const KernelPath path = GetParam();
  std::mt19937 rng(53);
  constexpr int64_t kRows = 16, kCols = 512;
  for (WeightType t : kGemmTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    if (!GemmSupports(t, path)) continue;
    std::vector<uint8_t> wbytes(size_t(kRows * kCols / BlockElements(t) * BlockBytes(t)), 0xff);
    for (size_t off = 0; off < wbytes.size(); off += size_t(BlockBytes(t))) {
      if (t == WeightType::kQ8_0) std::memset(wbytes.data() + off + 2, 0x7f, 32);  // q = 127: u = 255
      for (int f : test::HalfFieldOffsets(t))
        test::PutHalf(wbytes.data() + off + f, test::RandomScale(test::BlockCase::kRealistic, rng));
    }
    const int top = (1 << gemm_internal::DecodedBits(t)) - 1;
    for (int64_t g = 0; g < kCols / kQK32; ++g) {  // the case is what it claims to be
      uint8_t u[32];
      float dw[2], mw[2];
      Decode(t, wbytes.data(), g, u, dw, mw);
      for (uint8_t e : u) ASSERT_EQ(int(e), top);
    }
    const WeightMatrix w{t, wbytes.data(), kRows, kCols};
    for (int m : {1, 3, 4, 5, 8, 9, 16, 17, 24, 31, 32, 33, kGemmLaneRows, 2 * kGemmLaneRows + 3}) {
      SCOPED_TRACE("rows " + std::to_string(m));
      std::vector<float> xf(size_t(m * kCols));
      for (int i = 0; i < m; ++i) std::fill_n(xf.begin() + i * kCols, kCols, i % 3 == 1 ? -0.5f - i : 0.25f + i);
      GemmActivations x;
      ASSERT_TRUE(x.Reset(m, kCols, false, GemmUsesLanes(m, path)).ok());
      x.QuantizeRows(xf.data(), kCols, 0, m);
      ASSERT_EQ(std::abs(int(x.Row(0)[0].qs[0])), 127);
      std::vector<float> y(size_t(m * kRows)), ref(y.size());
      ASSERT_TRUE(GemmRows(w, x, 0, kRows, 0.0f, y.data(), kRows, path).ok());
      ASSERT_TRUE(GemmRows(w, x, 0, kRows, 0.0f, ref.data(), kRows, KernelPath::kScalar).ok());
      for (size_t e = 0; e < y.size(); ++e)
        ASSERT_EQ(std::memcmp(&y[e], &ref[e], sizeof(float)), 0)
            << "activation " << e / kRows << " weight row " << e % kRows << ": " << y[e] << " vs " << ref[e];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GemmPaths, QuantGemm,
                         ::testing::Values(KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512),
                         [](const ::testing::TestParamInfo<KernelPath>& p) { return KernelPathName(p.param); });

TEST(QuantGemm, ChecksItsArguments) {
  std::mt19937 rng(3);
  const std::vector<uint8_t> wbytes = RandomMatrix(WeightType::kQ4_1, 8, 64, rng);
  const WeightMatrix w{WeightType::kQ4_1, wbytes.data(), 8, 64};
  GemmActivations x;
  EXPECT_EQ(x.Reset(2, 48).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(x.Reset(-1, 64).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(x.Reset(2, 64).ok());
  const std::vector<float> xf = test::RandomActivations(128, rng);
  x.QuantizeRows(xf.data(), 64, 0, 2);
  std::vector<float> y(16);
  EXPECT_TRUE(GemmRows(w, x, 0, 8, 0.0f, y.data(), 8, KernelPath::kScalar).ok());
  EXPECT_EQ(GemmRows(w, x, 0, 9, 0.0f, y.data(), 9, KernelPath::kScalar).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GemmRows(w, x, 4, 2, 0.0f, y.data(), 8, KernelPath::kScalar).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(GemmRows(w, x, 0, 8, 0.0f, y.data(), 4, KernelPath::kScalar).code(), Status::Code::kInvalidArgument);
  // Rows prepared without the small-batch layout: fine for the scalar path, refused by the strips.
  GemmActivations bare;
  ASSERT_TRUE(bare.Reset(2, 64, false, false).ok());
  bare.QuantizeRows(xf.data(), 64, 0, 2);
  EXPECT_FALSE(bare.has_lanes());
  EXPECT_TRUE(GemmRows(w, bare, 0, 8, 0.0f, y.data(), 8, KernelPath::kScalar).ok());
  EXPECT_EQ(GemmRows(w, bare, 0, 8, 0.0f, y.data(), 8, KernelPath::kAvx2).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(GemmUsesLanes(64, KernelPath::kAvx512));
  EXPECT_FALSE(GemmUsesLanes(65, KernelPath::kAvx512));
  EXPECT_TRUE(GemmUsesLanes(512, KernelPath::kAvx2));
  EXPECT_FALSE(GemmUsesLanes(4, KernelPath::kScalar));
  const WeightMatrix wide{WeightType::kQ4_1, wbytes.data(), 4, 128};
  EXPECT_EQ(GemmRows(wide, x, 0, 4, 0.0f, y.data(), 4, KernelPath::kScalar).code(), Status::Code::kInvalidArgument);
  const WeightMatrix f16{WeightType::kF16, wbytes.data(), 1, 64};
  EXPECT_FALSE(GemmSupports(WeightType::kF16, KernelPath::kScalar));
  EXPECT_EQ(GemmRows(f16, x, 0, 1, 0.0f, y.data(), 1, KernelPath::kScalar).code(), Status::Code::kUnsupported);
  EXPECT_FALSE(GemmSupports(WeightType::kQ8_0, KernelPath::kAvx2));
  EXPECT_TRUE(GemmSupports(WeightType::kQ4_1, KernelPath::kAvx2));
}

}  // namespace
}  // namespace impress::quant
