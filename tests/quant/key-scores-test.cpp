// engine/quant/key-scores.h: int8 attention scores on every path this CPU has a fast kernel for,
// against the scalar reference and against fp32 arithmetic.
//  - Channel maxima, packed keys (codes and code sums) equal the scalar functions' exactly, and
//    scores equal the scalar kernel's bit for bit: the integer dot is exact on every path and the
//    float step (dot * q_scale) is one rounding.
//  - Scores are within the quantization error of a double-precision dot of the original query
//    and fp16 key. With channel scales ks_c, the query's scale qs (of q'_c = q_c ks_c) and
//    rounding errors of at most half a step in each code,
//      |s - q.k| <= sum_c (|q_c| ks_c / 2 + qs |k_c| / (2 ks_c) + 3 qs / 4)
//    plus the float rounding of the channel folding and the last multiply (relative 2^-22).
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
// normal values, ordinary ones, an outlier channel and a zero channel.
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
      // Channel 1 is an outlier (as real keys have), channel 2 is zero in every key.
      const float x = c == 2 ? 0.0f : std::clamp(nd(rng) * scale * (c == 1 ? 40.0f : 1.0f), -65504.0f, 65504.0f);
      out.k[size_t(j) * out.stride + c] = Fp32ToFp16(x);
    }
  }
  return out;
}

struct Packed {
  std::vector<float> amax, scale, inv;  // per channel
  std::vector<int8_t> codes;
  std::vector<int32_t> sum;
  int n_pad = 0;
};

// The keys packed at column offset col0 in two runs (as a block of prefix and new keys is).
Packed Pack(KernelPath path, const Keys& keys, int col0) {
  Packed p;
  p.n_pad = KeyScorePad(col0 + keys.n);
  const int first = keys.n / 3;
  const f16_t* second = keys.k.data() + size_t(first) * keys.stride;
  p.amax.assign(size_t(keys.hd), 0.0f);
  KeyChannelAbsMax(path, keys.k.data(), keys.stride, first, keys.hd, p.amax.data());
  KeyChannelAbsMax(path, second, keys.stride, keys.n - first, keys.hd, p.amax.data());
  p.scale.resize(size_t(keys.hd));
  p.inv.resize(size_t(keys.hd));
  KeyChannelScales(p.amax.data(), keys.hd, p.scale.data(), p.inv.data());
  p.codes.assign(size_t(keys.hd) * p.n_pad, int8_t(99));  // padding is the caller's: zero it
  for (int c = 0; c < keys.hd / 4; ++c)
    for (int j = 0; j < p.n_pad; ++j)
      if (j < col0 || j >= col0 + keys.n)
        for (int b = 0; b < 4; ++b) p.codes[(size_t(c) * p.n_pad + j) * 4 + b] = 0;
  p.sum.assign(size_t(p.n_pad), 0);
  PackKeysInt8(path, keys.k.data(), keys.stride, first, keys.hd, p.inv.data(), p.codes.data(), p.n_pad, col0,
               p.sum.data() + col0);
  PackKeysInt8(path, second, keys.stride, keys.n - first, keys.hd, p.inv.data(), p.codes.data(), p.n_pad, col0 + first,
               p.sum.data() + col0 + first);
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
    EXPECT_EQ(got.amax, want.amax);
    EXPECT_EQ(got.codes, want.codes);
    EXPECT_EQ(got.sum, want.sum);
    // The scalar packer itself: the channel maxima are the keys' (checked here in doubles), codes
    // lie in [-127, 127] with +-127 reached in every nonzero channel, and sums are the codes'.
    for (int c = 0; c < sh.hd; ++c) {
      double amax = 0;
      for (int j = 0; j < sh.n; ++j)
        amax = std::max(amax, std::fabs(double(Fp16ToFp32(keys.k[size_t(j) * keys.stride + c]))));
      ASSERT_EQ(double(want.amax[size_t(c)]), amax) << "channel " << c;
      int top = 0;
      for (int j = sh.col0; j < sh.col0 + sh.n; ++j) {
        const int code = want.codes[(size_t(c / 4) * want.n_pad + j) * 4 + c % 4];
        ASSERT_LE(std::abs(code), 127);
        top = std::max(top, std::abs(code));
      }
      EXPECT_EQ(top, amax > 0 ? 127 : 0) << "channel " << c;
    }
    for (int j = sh.col0; j < sh.col0 + sh.n; ++j) {
      int total = 0;
      for (int c = 0; c < sh.hd; ++c) total += want.codes[(size_t(c / 4) * want.n_pad + j) * 4 + c % 4];
      EXPECT_EQ(total, want.sum[size_t(j)]) << "key " << j;
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
    QuantizeQueriesInt8(q.data(), sh.rows, sh.hd, p.scale.data(), q_u8.data(), q_scale.data());
    const int ld = p.n_pad + 5;
    std::vector<float> want(size_t(sh.rows) * ld, -1.0f), got(size_t(sh.rows) * ld, -1.0f);
    KeyScoresInt8(KernelPath::kScalar, q_u8.data(), q_scale.data(), sh.rows, sh.hd, p.codes.data(), p.n_pad,
                  p.sum.data(), want.data(), ld);
    KeyScoresInt8(GetParam(), q_u8.data(), q_scale.data(), sh.rows, sh.hd, p.codes.data(), p.n_pad, p.sum.data(),
                  got.data(), ld);
    for (int r = 0; r < sh.rows; ++r) {
      const double qs = q_scale[size_t(r)];
      for (int j = 0; j < p.n_pad; ++j) {
        const float w = want[size_t(r) * ld + j], g = got[size_t(r) * ld + j];
        ASSERT_FALSE(std::isnan(g)) << r << "," << j;
        ASSERT_EQ(g, w) << "row " << r << " column " << j;
        const int key = j - sh.col0;
        if (key < 0 || key >= sh.n) {
          ASSERT_EQ(w, 0.0f) << "padding column " << j;
          continue;
        }
        double exact = 0, bound = 0, magnitude = 0;
        for (int c = 0; c < sh.hd; ++c) {
          const double qc = q[size_t(r) * sh.hd + c], kc = Fp16ToFp32(keys.k[size_t(key) * keys.stride + c]);
          const double ks = p.scale[size_t(c)];
          exact += qc * kc;
          magnitude += std::fabs(qc * kc);
          bound += std::fabs(qc) * ks / 2 + (ks > 0 ? qs * std::fabs(kc) / (2 * ks) : 0.0) + 0.75 * qs;
        }
        ASSERT_LE(std::fabs(double(w) - exact), bound * (1 + 1e-5) + 2.4e-7 * magnitude + 1e-30)
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
