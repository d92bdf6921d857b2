// engine/quant/key-scores.h: int8 attention scores on every path this CPU has a fast kernel for,
// against the scalar reference and against fp32 arithmetic.
//  - Packed keys (codes, scales, code sums) equal the scalar packer's byte for byte, and scores
//    equal the scalar kernel's bit for bit: the integer dot is exact on every path and the float
//    step (dot * (q_scale * k_scale)) is the same two roundings.
//  - Scores are within the quantization error of a double-precision dot of the original query
//    and fp16 key: with |dq_c| <= q_scale / 2 and |dk_c| <= k_scale / 2 per element,
//      |s - q.k| <= sum_c (|q_c| k_scale / 2 + |k_c| q_scale / 2 + q_scale k_scale / 4)
//    plus the float rounding of the last multiply (relative 2^-23, two roundings).
// Paths the CPU lacks are skipped, naming the missing feature.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/quant/key-scores.h"

namespace impress::quant {
namespace {

struct Keys {
  std::vector<f16_t> k;  // (n, stride) with the head at offset 0
  int n = 0, hd = 0, stride = 0;
};

// Random keys with a spread of magnitudes: a zero key, keys near fp16's largest and smallest
// normal values, and ordinary ones.
Keys RandomKeys(int n, int hd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Keys out;
  out.n = n;
  out.hd = hd;
  out.stride = hd * 3;                                     // one kv head of three, as the store's rows hold them
  out.k.assign(size_t(n) * out.stride, Fp32ToFp16(7.0f));  // other heads: not read
  for (int j = 0; j < n; ++j) {
    float scale = 1.0f;
    if (j % 11 == 3) scale = 0.0f;
    if (j % 11 == 5) scale = 16000.0f;  // up to ~65,000
    if (j % 11 == 7) scale = 1e-4f;     // small normal and subnormal halves
    for (int c = 0; c < hd; ++c) {
      const float x = std::clamp(nd(rng) * scale, -65504.0f, 65504.0f);
      out.k[size_t(j) * out.stride + c] = Fp32ToFp16(x);
    }
  }
  return out;
}

struct Packed {
  std::vector<int8_t> codes;
  std::vector<float> scale;
  std::vector<int32_t> sum;
  int n_pad = 0;
};

// The keys packed at column offset col0 in two runs (as a block of prefix and new keys is).
Packed Pack(KernelPath path, const Keys& keys, int col0) {
  Packed p;
  p.n_pad = KeyScorePad(col0 + keys.n);
  p.codes.assign(size_t(keys.hd) * p.n_pad, int8_t(99));  // padding is the caller's: zero it
  for (int c = 0; c < keys.hd / 4; ++c)
    for (int j = 0; j < p.n_pad; ++j)
      if (j < col0 || j >= col0 + keys.n)
        for (int b = 0; b < 4; ++b) p.codes[(size_t(c) * p.n_pad + j) * 4 + b] = 0;
  p.scale.assign(size_t(p.n_pad), 0.0f);
  p.sum.assign(size_t(p.n_pad), 0);
  const int first = keys.n / 3;
  PackKeysInt8(path, keys.k.data(), keys.stride, first, keys.hd, p.codes.data(), p.n_pad, col0, p.scale.data() + col0,
               p.sum.data() + col0);
  PackKeysInt8(path, keys.k.data() + size_t(first) * keys.stride, keys.stride, keys.n - first, keys.hd, p.codes.data(),
               p.n_pad, col0 + first, p.scale.data() + col0 + first, p.sum.data() + col0 + first);
  return p;
}

std::vector<float> RandomQueries(int rows, int hd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.4f);
  std::vector<float> q(size_t(rows) * hd);
  for (float& x : q) x = nd(rng);
  for (int c = 0; c < hd; ++c) q[c] = 0.0f;  // row 0: all zero
  return q;
}

struct Shape {
  int rows, n, hd, col0;
};

constexpr Shape kShapes[] = {{1, 5, 8, 0},     {7, 33, 24, 0},    {19, 200, 64, 3},
                             {25, 257, 64, 0}, {9, 100, 128, 17}, {13, 64, 80, 32}};

class KeyScores : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    if (const char* missing = MissingCpuFeature(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the " << KernelPathName(GetParam()) << " path)";
    }
    ASSERT_TRUE(HasFastKeyScores(GetParam())) << KernelPathName(GetParam()) << " has no key-score kernel";
  }
};

TEST_P(KeyScores, PackedKeysEqualTheScalarPackersExactly) {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(testing::Message() << "n " << sh.n << " hd " << sh.hd << " col0 " << sh.col0);
    const Keys keys = RandomKeys(sh.n, sh.hd, 7 + uint32_t(sh.n));
    const Packed want = Pack(KernelPath::kScalar, keys, sh.col0);
    const Packed got = Pack(GetParam(), keys, sh.col0);
    EXPECT_EQ(got.codes, want.codes);
    EXPECT_EQ(got.sum, want.sum);
    ASSERT_EQ(got.scale.size(), want.scale.size());
    for (size_t j = 0; j < want.scale.size(); ++j) ASSERT_EQ(got.scale[j], want.scale[j]) << j;
    // The scalar packer itself: codes in [-127, 127], the largest one at +-127 for a nonzero key,
    // sums that are the codes' sums.
    for (int j = sh.col0; j < sh.col0 + sh.n; ++j) {
      int amax = 0, total = 0;
      for (int c = 0; c < sh.hd; ++c) {
        const int code = want.codes[(size_t(c / 4) * want.n_pad + j) * 4 + c % 4];
        ASSERT_LE(std::abs(code), 127);
        amax = std::max(amax, std::abs(code));
        total += code;
      }
      EXPECT_EQ(total, want.sum[size_t(j)]);
      if (want.scale[size_t(j)] > 0) EXPECT_EQ(amax, 127) << "key " << j;
      else EXPECT_EQ(amax, 0) << "key " << j;
    }
  }
}

TEST_P(KeyScores, ScoresEqualTheScalarKernelsExactlyAndBoundTheFp32Dot) {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(testing::Message() << "rows " << sh.rows << " n " << sh.n << " hd " << sh.hd);
    const Keys keys = RandomKeys(sh.n, sh.hd, 31 + uint32_t(sh.hd));
    const Packed p = Pack(KernelPath::kScalar, keys, sh.col0);
    const std::vector<float> q = RandomQueries(sh.rows, sh.hd, 5 + uint32_t(sh.rows));
    std::vector<uint8_t> q_u8(q.size());
    std::vector<float> q_scale(size_t(sh.rows));
    QuantizeQueriesInt8(q.data(), sh.rows, sh.hd, q_u8.data(), q_scale.data());
    const int ld = p.n_pad + 5;
    std::vector<float> want(size_t(sh.rows) * ld, -1.0f), got(size_t(sh.rows) * ld, -1.0f);
    KeyScoresInt8(KernelPath::kScalar, q_u8.data(), q_scale.data(), sh.rows, sh.hd, p.codes.data(), p.n_pad,
                  p.scale.data(), p.sum.data(), want.data(), ld);
    KeyScoresInt8(GetParam(), q_u8.data(), q_scale.data(), sh.rows, sh.hd, p.codes.data(), p.n_pad, p.scale.data(),
                  p.sum.data(), got.data(), ld);
    for (int r = 0; r < sh.rows; ++r) {
      for (int j = 0; j < p.n_pad; ++j) {
        const float w = want[size_t(r) * ld + j], g = got[size_t(r) * ld + j];
        ASSERT_FALSE(std::isnan(g)) << r << "," << j;
        ASSERT_EQ(g, w) << "row " << r << " column " << j;
        const int key = j - sh.col0;
        if (key < 0 || key >= sh.n) {
          ASSERT_EQ(w, 0.0f) << "padding column " << j;
          continue;
        }
        double exact = 0, bound = 0;
        const double qs = q_scale[size_t(r)], ks = p.scale[size_t(j)];
        for (int c = 0; c < sh.hd; ++c) {
          const double qc = q[size_t(r) * sh.hd + c], kc = Fp16ToFp32(keys.k[size_t(key) * keys.stride + c]);
          exact += qc * kc;
          bound += std::fabs(qc) * ks / 2 + std::fabs(kc) * qs / 2 + qs * ks / 4;
        }
        ASSERT_LE(std::fabs(double(w) - exact), bound * (1 + 1e-6) + 2.4e-7 * std::fabs(exact) + 1e-30)
            << "row " << r << " key " << key;
      }
    }
    // Row 0 (a zero query) scores 0 everywhere.
    for (int j = 0; j < p.n_pad; ++j) EXPECT_EQ(want[size_t(j)], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(KeyScorePaths, KeyScores, ::testing::Values(KernelPath::kAvx512),
                         [](const ::testing::TestParamInfo<KernelPath>& p) { return KernelPathName(p.param); });

TEST(KeyScoresChoice, OnlyAvx512HasAFastKernel) {
  EXPECT_TRUE(HasFastKeyScores(KernelPath::kAvx512));
  EXPECT_FALSE(HasFastKeyScores(KernelPath::kAvx2));
  EXPECT_FALSE(HasFastKeyScores(KernelPath::kScalar));
}

}  // namespace
}  // namespace impress::quant
