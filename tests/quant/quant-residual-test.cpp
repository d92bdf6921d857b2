// Precise (two-set, residual) int8 activations, on every code path this CPU runs:
//  - the second set carries what the first leaves: x = d1 q1 + d2 q2 within d2 / 2, d2 <= d1 / 254
//    (up to fp32 rounding), so the pair holds ~16 bits;
//  - a GEMV with it is the sum of two ordinary integer dots (the residual set's integer parts
//    equal the scalar reference's exactly on every path) and lies within the residual's error
//    (plus fp32 rounding) of the fp64 dot of the dequantized weights, far inside one set's error;
//  - the prefill GEMM's two sets are the decode's bit for bit, and the GEMM with both equals the
//    scalar reference bit for bit and lies within the same bound of the fp64 product.
// Paths the CPU lacks are skipped, naming the missing feature.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/gemm.h"
#include "engine/quant/quant-kernels.h"
#include "tests/quant/random-blocks.h"

namespace impress::quant {
namespace {

constexpr double kU = 1.0 / (1 << 24);
constexpr WeightType kResidualTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                                         WeightType::kQ5_1};

bool SameBlock(const ActBlock32& a, const ActBlock32& b) {
  return std::memcmp(&a.d, &b.d, sizeof a.d) == 0 && a.sum == b.sum && std::memcmp(a.qs, b.qs, 32) == 0;
}

// |integer| a path may multiply per weight element, times the activation's (the quant-kernels
// test derives these): Q8_0 in its unsigned-offset form, the 4/5-bit types with offset or min.
double WeightIntFactor(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0: return 255 + 128;
    case WeightType::kQ4_0: return 15 + 8;
    case WeightType::kQ5_0: return 31 + 16;
    case WeightType::kQ5_1: return 31 + 1;  // plus the min term
    default: return 15 + 1;
  }
}

// The fp64 dot of weight row `wr` (n = x.n() elements) with xf, and how far a dot with both sets
// of x may lie from it: the residual's rounding (d2 / 2 per element, plus fp32 rounding of the
// residual) times |w|, plus fp32 rounding, (n_blocks + 11) u M, where M bounds every partial sum
// of either set's integer products (the quant-kernels test's bound, per set).
double TwoSetBound(WeightType t, const uint8_t* wr, const ActivationRow& x, const float* xf, double* ref) {
  const int64_t n = x.n();
  std::vector<float> wf(static_cast<size_t>(n));
  DequantizeRow(t, wr, wf.data(), n);
  const auto* hi = static_cast<const ActBlock32*>(x.data());
  const ActBlock32* lo = x.residual();
  double quant_err = 0, magnitude = 0;
  *ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    *ref += double(wf[size_t(i)]) * xf[i];
    quant_err += (0.5001 * lo[i / 32].d + 4 * kU * std::fabs(xf[i])) * std::fabs(wf[size_t(i)]);
  }
  for (int64_t b = 0; b < n / 32; ++b) {
    double wmax = 0, q_hi = 0, q_lo = 0;
    for (int i = 0; i < 32; ++i) {
      wmax = std::max(wmax, std::fabs(double(wf[size_t(32 * b + i)])));
      q_hi += std::abs(hi[b].qs[i]);
      q_lo += std::abs(lo[b].qs[i]);
    }
    f16_t hd;
    std::memcpy(&hd, wr + b * BlockBytes(t), 2);
    const double dw = std::fabs(double(Fp16ToFp32(hd)));
    // |min| of Q4_1/Q5_1 is at most the block's largest |weight| plus 31 steps.
    const double m = (t == WeightType::kQ4_1 || t == WeightType::kQ5_1) ? wmax + 32 * dw : 0;
    magnitude += (dw * WeightIntFactor(t) + m) * (hi[b].d * q_hi + lo[b].d * q_lo);
  }
  return quant_err + double(n / 32 + 11) * kU * magnitude;
}

TEST(QuantResidual, SecondSetCarriesWhatTheFirstLeaves) {
  std::mt19937 rng(11);
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t n = 1024;
    const std::vector<float> x = test::RandomActivations(n, rng);
    ActivationRow a;
    ASSERT_TRUE(a.Prepare(ActFormat::kQ8x32, x.data(), n, true).ok());
    ASSERT_NE(a.residual(), nullptr);
    const auto* hi = static_cast<const ActBlock32*>(a.data());
    const ActBlock32* lo = a.residual();
    // The first set is the plain one; the second is QuantizeRow32 of ResidualRow32.
    std::vector<ActBlock32> plain(size_t(n / 32)), second(size_t(n / 32));
    std::vector<float> r(static_cast<size_t>(n));
    QuantizeRow32(x.data(), n, plain.data());
    ResidualRow32(x.data(), n, plain.data(), r.data());
    QuantizeRow32(r.data(), n, second.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      ASSERT_TRUE(SameBlock(hi[b], plain[size_t(b)])) << b;
      ASSERT_TRUE(SameBlock(lo[b], second[size_t(b)])) << b;
      EXPECT_LE(double(lo[b].d), double(hi[b].d) / 254 * (1 + 1e-5)) << b;
      for (int i = 0; i < 32; ++i) {
        const double xi = x[size_t(32 * b + i)];
        const double back = double(hi[b].d) * hi[b].qs[i] + double(lo[b].d) * lo[b].qs[i];
        EXPECT_LE(std::fabs(back - xi), 0.5001 * lo[b].d + 4 * kU * std::fabs(xi)) << b << " " << i;
      }
    }
  }
  ActivationRow a;
  const std::vector<float> x(256, 1.0f);
  EXPECT_FALSE(a.Prepare(ActFormat::kQ8x256, x.data(), 256, true).ok());
  ASSERT_TRUE(a.Prepare(ActFormat::kQ8x32, x.data(), 256).ok());
  EXPECT_EQ(a.residual(), nullptr);
}

class QuantResidualPath : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    if (const char* missing = MissingCpuFeature(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the " << KernelPathName(GetParam()) << " path)";
    }
  }
};

TEST_P(QuantResidualPath, GemvIsTwoIntegerDotsAndNearTheFp64Dot) {
  std::mt19937 rng(22);
  const int64_t n_rows = 37, n_cols = 1536;
  for (WeightType t : kResidualTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    const std::vector<uint8_t> data = test::RandomRows(t, n_rows, n_cols, rng);
    const WeightMatrix w{t, data.data(), n_rows, n_cols};
    const std::vector<float> xf = test::RandomActivations(n_cols, rng);
    ActivationRow x, one, lo_only;
    ASSERT_TRUE(x.Prepare(ActFormat::kQ8x32, xf.data(), n_cols, true).ok());
    ASSERT_TRUE(one.Prepare(ActFormat::kQ8x32, xf.data(), n_cols).ok());
    std::vector<float> r(static_cast<size_t>(n_cols));
    ResidualRow32(xf.data(), n_cols, static_cast<const ActBlock32*>(x.data()), r.data());
    ASSERT_TRUE(lo_only.Prepare(ActFormat::kQ8x32, r.data(), n_cols).ok());
    std::vector<float> y(static_cast<size_t>(n_rows)), y1(static_cast<size_t>(n_rows));
    ASSERT_TRUE(Gemv(w, x, 0, n_rows, y.data(), GetParam()).ok());
    ASSERT_TRUE(Gemv(w, one, 0, n_rows, y1.data(), GetParam()).ok());
    std::vector<float> y_lo(static_cast<size_t>(n_rows));
    ASSERT_TRUE(Gemv(w, lo_only, 0, n_rows, y_lo.data(), GetParam()).ok());
    double err_two = 0, err_one = 0;
    for (int64_t row = 0; row < n_rows; ++row) {
      const uint8_t* wr = data.data() + row * w.RowBytes();
      // Integer parts of the residual set: the scalar reference's, exactly.
      std::vector<int32_t> want(static_cast<size_t>(n_cols / 32)), got(want.size());
      DotIntegerParts(KernelPath::kScalar, t, wr, lo_only, want.data());
      DotIntegerParts(GetParam(), t, wr, lo_only, got.data());
      ASSERT_EQ(got, want) << row;
      // The GEMV row is the two sets' GEMV rows summed, bit for bit, and the row dot the two dots.
      EXPECT_EQ(y[size_t(row)], y1[size_t(row)] + y_lo[size_t(row)]) << row;
      EXPECT_EQ(DotRow(GetParam(), t, wr, x), DotRow(GetParam(), t, wr, one) + DotRow(GetParam(), t, wr, lo_only));
      // Near the fp64 dot: the residual's rounding plus fp32 rounding of both sets' sums.
      double ref = 0;
      const double bound = TwoSetBound(t, wr, x, xf.data(), &ref);
      EXPECT_LE(std::fabs(double(y[size_t(row)]) - ref), bound) << row;
      err_two += std::fabs(double(y[size_t(row)]) - ref);
      err_one += std::fabs(double(y1[size_t(row)]) - ref);
    }
    EXPECT_LT(err_two * 20, err_one) << "two sets " << err_two << ", one set " << err_one;
  }
}

TEST_P(QuantResidualPath, GemmResidualRowsAreTheDecodesAndEqualScalar) {
  std::mt19937 rng(33);
  const int m = 9;
  const int64_t n_rows = 70, k = 576;
  for (WeightType t : kResidualTypes) {
    SCOPED_TRACE(WeightTypeName(t));
    if (!GemmSupports(t, GetParam())) continue;  // AVX2 has no Q8_0 GEMM: the backend falls back
    const std::vector<uint8_t> data = test::RandomRows(t, n_rows, k, rng);
    const WeightMatrix w{t, data.data(), n_rows, k};
    std::vector<float> x;
    for (int i = 0; i < m; ++i) {
      const auto xi = test::RandomActivations(k, rng);
      x.insert(x.end(), xi.begin(), xi.end());
    }
    GemmActivations acts, plain;
    ASSERT_TRUE(acts.Reset(m, k, true).ok());
    ASSERT_TRUE(plain.Reset(m, k).ok());
    EXPECT_EQ(plain.residual(), nullptr);
    acts.QuantizeRows(x.data(), k, 0, m);
    ASSERT_NE(acts.residual(), nullptr);
    for (int i = 0; i < m; ++i) {
      ActivationRow a;
      ASSERT_TRUE(a.Prepare(ActFormat::kQ8x32, x.data() + i * k, k, true).ok());
      for (int64_t b = 0; b < k / 32; ++b) {
        ASSERT_TRUE(SameBlock(acts.Row(i)[b], static_cast<const ActBlock32*>(a.data())[b])) << i << " " << b;
        ASSERT_TRUE(SameBlock(acts.residual()->Row(i)[b], a.residual()[b])) << i << " " << b;
      }
    }
    auto run = [&](KernelPath path) {
      std::vector<float> y(static_cast<size_t>(m * n_rows), 3.0f);
      EXPECT_TRUE(GemmRows(w, acts, 0, n_rows, 1.0f, y.data(), n_rows, path).ok());
      return y;
    };
    const std::vector<float> want = run(KernelPath::kScalar), got = run(GetParam());
    for (size_t j = 0; j < want.size(); ++j) ASSERT_EQ(got[j], want[j]) << j;
    // And near the fp64 product, as the GEMV.
    for (int i = 0; i < m; ++i) {
      ActivationRow a;
      ASSERT_TRUE(a.Prepare(ActFormat::kQ8x32, x.data() + i * k, k, true).ok());
      for (int64_t r = 0; r < n_rows; ++r) {
        double ref = 0;
        const double bound = TwoSetBound(t, data.data() + r * w.RowBytes(), a, x.data() + i * k, &ref) + 3 * kU * 3;
        EXPECT_LE(std::fabs(double(got[size_t(i * n_rows + r)]) - 3.0 - ref), bound) << i << " " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, QuantResidualPath,
                         ::testing::Values(KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512),
                         [](const auto& info) { return std::string(KernelPathName(info.param)); });

}  // namespace
}  // namespace impress::quant
