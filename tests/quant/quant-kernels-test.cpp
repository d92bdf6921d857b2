// engine/quant dot products and GEMV on every code path this CPU runs (scalar, AVX2, AVX-512):
//  - integer parts equal the scalar reference's exactly, block by block;
//  - the fp32 dot is within fp32 rounding of the exact value of those parts (bound below);
//  - the quantized dot is within the activation quantization error of an fp32 dot over the
//    dequantized weights (bound below);
//  - GEMV and batched GEMV are the row dots, and check their arguments.
// Paths the CPU lacks are skipped, naming the missing feature.
//
// fp32 rounding bound. Each block contributes (dw * da) * I (+ a min term), where the paths
// split I into int32 lanes, convert them to fp32 and accumulate them in chains of at most
// n_blocks fused or plain adds, then add up 8 lanes and the min terms. Every rounding is a factor
// (1 + e), |e| <= u = 2^-24, applied to a partial sum no larger than
//   M = sum_b |dw * da| * F * sum_i |qa_i|  +  sum_b |min scale * da| * G * sum_i |qa_i|,
// where F bounds |weight integer| times its offset as any path multiplies it (Q8_0: 255 + 128
// for the unsigned-offset VNNI form; Q4_0: 15 + 8; Q4_1: 15; Q5_0: 31 + 16; Q5_1: 31; Q4_K:
// 15 * 63; Q5_K: 31 * 63; Q6_K: (63 + 32) * 128) and G is 1 (Q4_1/Q5_1) or 63 (Q4_K/Q5_K). No
// value passes through more than n_blocks + 10 roundings, so |dot - exact| <= (n_blocks + 10) u M
// (standard summation bound, first order; u * (n_blocks + 10) << 1 here). For F16/BF16 rows,
// M = sum |w_i x_i| and chains are at most n / 8 + 10 long on every path.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "engine/quant/quant-kernels.h"
#include "tests/quant/random-blocks.h"

namespace impress::quant {
namespace {

constexpr double kU = 1.0 / (1 << 24);

// Per-type factors of the bound above.
double WeightIntFactor(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0: return 255 + 128;
    case WeightType::kQ4_0: return 15 + 8;
    case WeightType::kQ4_1: return 15;
    case WeightType::kQ5_0: return 31 + 16;
    case WeightType::kQ5_1: return 31;
    case WeightType::kQ4_K: return 15 * 63;
    case WeightType::kQ5_K: return 31 * 63;
    case WeightType::kQ6_K: return (63 + 32) * 128;
    default: return 0;
  }
}
double MinFactor(WeightType t) {
  switch (t) {
    case WeightType::kQ4_1:
    case WeightType::kQ5_1: return 1;
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return 63;
    default: return 0;
  }
}

float HalfAt(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// The scale fields of block ib of a row: d and (where the type has one) m / dmin.
void BlockScales(WeightType t, const uint8_t* row, int64_t ib, double* d, double* m) {
  const uint8_t* b = row + ib * BlockBytes(t);
  const auto offsets = test::HalfFieldOffsets(t);
  *d = HalfAt(b + offsets[0]);
  *m = offsets.size() > 1 ? HalfAt(b + offsets[1]) : 0.0;
}

struct ActView {  // one activation block's scale, ints and sum, whatever the format
  double d;
  const int8_t* qs;
  int len;
  int32_t sum;
};

ActView ActBlock(const ActivationRow& x, int64_t ib) {
  if (x.format() == ActFormat::kQ8x32) {
    const auto& b = static_cast<const ActBlock32*>(x.data())[ib];
    return {b.d, b.qs, 32, b.sum};
  }
  const auto& b = static_cast<const ActBlock256*>(x.data())[ib];
  return {b.d, b.qs, 256, 0};
}

// The exact dot (in double) from the verified integer parts, and M of the fp32 bound.
void ExactFromParts(WeightType t, const uint8_t* row, const ActivationRow& x, const std::vector<int32_t>& parts,
                    double* exact, double* magnitude) {
  const int64_t nb = x.n() / BlockElements(t);
  const int np = IntegerPartsPerBlock(t);
  *exact = 0;
  *magnitude = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    double dw, m;
    BlockScales(t, row, ib, &dw, &m);
    const ActView a = ActBlock(x, ib);
    double abs_q = 0;
    for (int i = 0; i < a.len; ++i) abs_q += std::abs(a.qs[i]);
    *exact += dw * a.d * parts[size_t(np * ib)];
    if (t == WeightType::kQ4_1 || t == WeightType::kQ5_1) *exact += m * a.d * a.sum;
    if (np == 2) *exact -= m * a.d * parts[size_t(np * ib + 1)];
    *magnitude += std::fabs(dw * a.d) * WeightIntFactor(t) * abs_q + std::fabs(m * a.d) * MinFactor(t) * abs_q;
  }
}

class QuantPath : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    if (const char* missing = MissingCpuFeature(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the " << KernelPathName(GetParam()) << " path)";
    }
  }
};

constexpr int64_t kLengths[] = {256, 1536, 4096};

TEST_P(QuantPath, IntegerPartsEqualScalarExactlyAndDotIsWithinRounding) {
  std::mt19937 rng(101);
  for (WeightType t : test::kQuantizedTypes) {
    for (int64_t n : kLengths) {
      for (int rep = 0; rep < 8; ++rep) {
        SCOPED_TRACE(std::string(WeightTypeName(t)) + " n=" + std::to_string(n) + " rep=" + std::to_string(rep));
        const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
        const std::vector<float> xf = test::RandomActivations(n, rng);
        ActivationRow x;
        ASSERT_TRUE(x.Prepare(ActivationFormatFor(t), xf.data(), n).ok());
        const size_t n_parts = size_t(n / BlockElements(t) * IntegerPartsPerBlock(t));
        std::vector<int32_t> ref(n_parts, -1), got(n_parts, -2);
        DotIntegerParts(KernelPath::kScalar, t, row.data(), x, ref.data());
        DotIntegerParts(GetParam(), t, row.data(), x, got.data());
        ASSERT_EQ(got, ref);

        double exact = 0, magnitude = 0;
        ExactFromParts(t, row.data(), x, ref, &exact, &magnitude);
        const double bound = double(n / BlockElements(t) + 10) * kU * magnitude;
        const float dot = DotRow(GetParam(), t, row.data(), x);
        ASSERT_TRUE(std::isfinite(dot));
        EXPECT_LE(std::fabs(double(dot) - exact), bound) << "dot " << dot << " exact " << exact;
        const float scalar = DotRow(KernelPath::kScalar, t, row.data(), x);
        EXPECT_LE(std::fabs(double(dot) - double(scalar)), 2 * bound);
      }
    }
  }
}

TEST_P(QuantPath, HalfRowsAreWithinRoundingOfExact) {
  std::mt19937 rng(202);
  for (WeightType t : test::kHalfTypes) {
    for (int64_t n : {int64_t(7), int64_t(576), int64_t(1536), int64_t(4096) + 13}) {
      SCOPED_TRACE(std::string(WeightTypeName(t)) + " n=" + std::to_string(n));
      const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
      const std::vector<float> xf = test::RandomActivations(n, rng);
      std::vector<float> w(static_cast<size_t>(n));
      DequantizeRow(t, row.data(), w.data(), n);
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(w[size_t(i)]) * xf[size_t(i)];
        magnitude += std::fabs(double(w[size_t(i)]) * xf[size_t(i)]);
      }
      ActivationRow x;
      ASSERT_TRUE(x.Prepare(ActFormat::kF32, xf.data(), n).ok());
      const float dot = DotRow(GetParam(), t, row.data(), x);
      EXPECT_LE(std::fabs(double(dot) - exact), double(n / 8 + 10) * kU * magnitude) << dot << " vs " << exact;
    }
  }
}

// Quantized dot vs an fp32 dot of the dequantized weights with the original activations:
//   |sum w x - sum w x^| <= sum_b 0.5001 da_b sum_{i in b} |w_i|          (x^ = da q, half a step)
//   + the dequantized weights' own rounding: <= 3u sum_i (|w_i| + 2 min_b) |x_i|
//   + the quantized dot's fp32 rounding (the bound above).
TEST_P(QuantPath, QuantizedDotIsWithinActivationQuantizationErrorOfFp32Dot) {
  std::mt19937 rng(303);
  for (WeightType t : test::kQuantizedTypes) {
    for (int rep = 0; rep < 6; ++rep) {
      const int64_t n = 2048;
      SCOPED_TRACE(std::string(WeightTypeName(t)) + " rep=" + std::to_string(rep));
      const std::vector<uint8_t> row = test::RandomRow(t, n, rng);
      const std::vector<float> xf = test::RandomActivations(n, rng);
      std::vector<float> w(static_cast<size_t>(n));
      DequantizeRow(t, row.data(), w.data(), n);
      ActivationRow x;
      ASSERT_TRUE(x.Prepare(ActivationFormatFor(t), xf.data(), n).ok());
      const int64_t block = BlockElements(t), act_block = x.format() == ActFormat::kQ8x32 ? 32 : 256;
      double ref = 0, quant_err = 0, weight_err = 0;
      for (int64_t i = 0; i < n; ++i) {
        double dw, m;
        BlockScales(t, row.data(), i / block, &dw, &m);
        const double wi = w[size_t(i)], xi = xf[size_t(i)];
        ref += wi * xi;
        quant_err += 0.5001 * ActBlock(x, i / act_block).d * std::fabs(wi);
        weight_err += 3 * kU * (std::fabs(wi) + 2 * std::fabs(m) * MinFactor(t)) * std::fabs(xi);
      }
      std::vector<int32_t> parts(size_t(n / block * IntegerPartsPerBlock(t)));
      DotIntegerParts(KernelPath::kScalar, t, row.data(), x, parts.data());
      double exact = 0, magnitude = 0;
      ExactFromParts(t, row.data(), x, parts, &exact, &magnitude);
      const double bound = quant_err + weight_err + double(n / block + 10) * kU * magnitude;
      const float dot = DotRow(GetParam(), t, row.data(), x);
      EXPECT_LE(std::fabs(double(dot) - ref), bound) << "dot " << dot << " fp32 " << ref;
    }
  }
}

TEST_P(QuantPath, GemvIsTheRowDotsAndBatchIsGemvPerActivation) {
  std::mt19937 rng(404);
  const int64_t n_rows = 24, n_cols = 512;
  for (WeightType t : {WeightType::kQ4_K, WeightType::kQ8_0, WeightType::kQ5_1, WeightType::kF16}) {
    SCOPED_TRACE(WeightTypeName(t));
    const std::vector<uint8_t> data = test::RandomRows(t, n_rows, n_cols, rng);
    const WeightMatrix w{t, data.data(), n_rows, n_cols};
    ActivationRow xs[3];
    for (auto& x : xs) {
      const auto xf = test::RandomActivations(n_cols, rng);
      ASSERT_TRUE(x.Prepare(ActivationFormatFor(t), xf.data(), n_cols).ok());
    }
    std::vector<float> y(size_t(n_rows), -1.0f);
    ASSERT_TRUE(Gemv(w, xs[0], 5, 19, y.data(), GetParam()).ok());
    for (int64_t r = 0; r < n_rows; ++r) {
      const float want = r < 5 || r >= 19 ? -1.0f : DotRow(GetParam(), t, data.data() + r * w.RowBytes(), xs[0]);
      EXPECT_EQ(y[size_t(r)], want) << r;  // untouched outside [r0, r1)
    }
    std::vector<float> yb(size_t(3 * n_rows));
    ASSERT_TRUE(GemvBatch(w, xs, 3, 0, n_rows, yb.data(), GetParam()).ok());
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(Gemv(w, xs[k], 0, n_rows, y.data(), GetParam()).ok());
      for (int64_t r = 0; r < n_rows; ++r) EXPECT_EQ(yb[size_t(k * n_rows + r)], y[size_t(r)]);
    }
  }
}

// Multi-row GEMV (rows in groups, two blocks per vector on AVX-512): odd block counts (a lone
// last block) and row counts that are not multiples of the group, each row equal to its own
// DotRow exactly and within the rounding bound of the exact dot of the scalar integer parts.
TEST_P(QuantPath, GemvOnOddBlockAndRowCountsIsTheExactRowDots) {
  std::mt19937 rng(505);
  for (WeightType t : test::kQuantizedTypes) {
    if (BlockElements(t) != 32) continue;
    for (int64_t n_cols : {int64_t(32), int64_t(96), int64_t(608)}) {
      for (int64_t n_rows : {int64_t(1), int64_t(3), int64_t(11)}) {
        SCOPED_TRACE(std::string(WeightTypeName(t)) + " " + std::to_string(n_rows) + "x" + std::to_string(n_cols));
        const std::vector<uint8_t> data = test::RandomRows(t, n_rows, n_cols, rng);
        const WeightMatrix w{t, data.data(), n_rows, n_cols};
        const auto xf = test::RandomActivations(n_cols, rng);
        ActivationRow x;
        ASSERT_TRUE(x.Prepare(ActivationFormatFor(t), xf.data(), n_cols).ok());
        std::vector<float> y(size_t(n_rows), NAN);
        ASSERT_TRUE(Gemv(w, x, 0, n_rows, y.data(), GetParam()).ok());
        for (int64_t r = 0; r < n_rows; ++r) {
          const uint8_t* row = data.data() + r * w.RowBytes();
          EXPECT_EQ(y[size_t(r)], DotRow(GetParam(), t, row, x)) << r;
          std::vector<int32_t> parts(size_t(n_cols / 32));
          DotIntegerParts(KernelPath::kScalar, t, row, x, parts.data());
          double exact = 0, magnitude = 0;
          ExactFromParts(t, row, x, parts, &exact, &magnitude);
          EXPECT_LE(std::fabs(double(y[size_t(r)]) - exact), double(n_cols / 32 + 10) * kU * magnitude)
              << "row " << r << ": " << y[size_t(r)] << " vs exact " << exact;
        }
      }
    }
  }
}

// A row's GEMV value never depends on how the kernel groups rows: every type (half and quantized,
// with and without the residual set where the type takes one), row ranges whose length and start
// are not multiples of any group or chunk size, each row equal bit for bit to its own one-row dot
// and to a GEMV over that row alone.
TEST_P(QuantPath, EveryRowOfAGemvIsItsOwnRowDotWhateverTheGrouping) {
  std::mt19937 rng(606);
  std::vector<WeightType> types(std::begin(test::kHalfTypes), std::end(test::kHalfTypes));
  types.insert(types.end(), std::begin(test::kQuantizedTypes), std::end(test::kQuantizedTypes));
  for (WeightType t : types) {
    const int64_t n_cols = BlockElements(t) == 256 ? 768 : 416;  // 3 or 13 blocks
    const int64_t n_rows = 37;
    const std::vector<uint8_t> data = test::RandomRows(t, n_rows, n_cols, rng);
    const WeightMatrix w{t, data.data(), n_rows, n_cols};
    const auto xf = test::RandomActivations(n_cols, rng);
    for (bool residual : {false, true}) {
      if (residual && ActivationFormatFor(t) != ActFormat::kQ8x32) continue;
      ActivationRow x;
      ASSERT_TRUE(x.Prepare(ActivationFormatFor(t), xf.data(), n_cols, residual).ok());
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 37}, {1, 6}, {3, 20}, {5, 18}, {2, 35}}) {
        SCOPED_TRACE(std::string(WeightTypeName(t)) + (residual ? " residual" : "") + " rows [" + std::to_string(r0) +
                     ", " + std::to_string(r1) + ")");
        std::vector<float> y(size_t(n_rows), NAN);
        ASSERT_TRUE(Gemv(w, x, r0, r1, y.data(), GetParam()).ok());
        for (int64_t r = r0; r < r1; ++r) {
          float alone = NAN;
          ASSERT_TRUE(
              Gemv(WeightMatrix{t, data.data() + r * w.RowBytes(), 1, n_cols}, x, 0, 1, &alone, GetParam()).ok());
          const float dot = DotRow(GetParam(), t, data.data() + r * w.RowBytes(), x);
          EXPECT_EQ(std::bit_cast<uint32_t>(y[size_t(r)]), std::bit_cast<uint32_t>(dot))
              << "row " << r << ": " << y[size_t(r)] << " vs its row dot " << dot;
          EXPECT_EQ(std::bit_cast<uint32_t>(y[size_t(r)]), std::bit_cast<uint32_t>(alone)) << "row " << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, QuantPath,
                         ::testing::Values(KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512),
                         [](const ::testing::TestParamInfo<KernelPath>& p) { return KernelPathName(p.param); });

TEST(QuantGemv, ChecksItsArguments) {
  std::vector<uint8_t> data(size_t(4 * 2 * BlockBytes(WeightType::kQ4_0)));
  const WeightMatrix w{WeightType::kQ4_0, data.data(), 4, 64};
  std::vector<float> xf(64, 1.0f), y(4);
  ActivationRow good, wrong_format, wrong_len;
  ASSERT_TRUE(good.Prepare(ActFormat::kQ8x32, xf.data(), 64).ok());
  ASSERT_TRUE(wrong_format.Prepare(ActFormat::kF32, xf.data(), 64).ok());
  ASSERT_TRUE(wrong_len.Prepare(ActFormat::kQ8x32, xf.data(), 32).ok());
  const KernelPath p = KernelPath::kScalar;
  EXPECT_TRUE(Gemv(w, good, 0, 4, y.data(), p).ok());
  EXPECT_EQ(y[0], 0.0f);  // all-zero blocks
  EXPECT_EQ(Gemv(w, wrong_format, 0, 4, y.data(), p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Gemv(w, wrong_len, 0, 4, y.data(), p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Gemv(w, good, 0, 5, y.data(), p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Gemv(w, good, 3, 2, y.data(), p).code(), Status::Code::kInvalidArgument);
  const WeightMatrix bad_cols{WeightType::kQ4_0, data.data(), 4, 48};
  EXPECT_EQ(Gemv(bad_cols, good, 0, 1, y.data(), p).code(), Status::Code::kInvalidArgument);
  const WeightMatrix bad_type{static_cast<WeightType>(16), data.data(), 4, 64};
  const Status st = Gemv(bad_type, good, 0, 1, y.data(), p);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("16"), std::string::npos);
  EXPECT_TRUE(Gemv(w, good, 2, 2, y.data(), p).ok());  // an empty range
}

TEST(QuantPaths, NamesParseAndTheOverrideFallsBackWhenUnusable) {
  for (KernelPath p : {KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512}) {
    auto parsed = ParseKernelPath(KernelPathName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_FALSE(ParseKernelPath("sse2").ok());
  EXPECT_EQ(MissingCpuFeature(KernelPath::kScalar), nullptr);
  const KernelPath best = ResolveKernelPath(nullptr);
  EXPECT_EQ(MissingCpuFeature(best), nullptr);
  EXPECT_EQ(ResolveKernelPath(""), best);
  EXPECT_EQ(ResolveKernelPath("scalar"), KernelPath::kScalar);  // forcing the reference always works
  EXPECT_EQ(ResolveKernelPath("no-such-path"), best);
  const KernelPath avx512 = ResolveKernelPath("avx512");
  EXPECT_EQ(avx512, MissingCpuFeature(KernelPath::kAvx512) ? best : KernelPath::kAvx512);
  EXPECT_EQ(MissingCpuFeature(ActiveKernelPath()), nullptr);
}

}  // namespace
}  // namespace impress::quant
