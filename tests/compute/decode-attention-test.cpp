// The decode attention inner loops (a kv head's query heads over a run of fp16 keys and values)
// against double precision written here, on the active kernel path and, where the CPU has it,
// the AVX-512 twins called directly: every group size, head sizes that are whole and partial
// vectors, and runs that end in every kind of tail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/compute/decode-attention.h"
#include "engine/quant/quant-kernels.h"

namespace impress {
namespace {

using ScoresFn = void (*)(const float*, int, int, float, const f16_t*, int64_t, int, float*, int);
using ValuesFn = void (*)(float* const*, int, int, const float*, int, const f16_t*, int64_t, int);

// Scores and weighted value sums of one kernel pair against double precision; the rows sit in a
// cache of two kv heads with a gap after each token (the stride a real cache has, and more).
void ExpectKernelsMatchDouble(ScoresFn scores, ValuesFn values, const std::vector<int>& head_dims) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int kLd = 1040;
  for (int hd : head_dims) {
    for (int group = 1; group <= 8; ++group) {
      for (int n : {1, 7, 15, 16, 17, 31, 33, 100, 1024}) {
        const int64_t stride = 2 * hd + 8;
        std::vector<f16_t> k(size_t(n) * size_t(stride)), v(k.size());
        for (f16_t& x : k) x = Fp32ToFp16(nd(rng));
        for (f16_t& x : v) x = Fp32ToFp16(nd(rng));
        std::vector<float> q(size_t(group) * size_t(hd));
        for (float& x : q) x = nd(rng);
        const f16_t* k1 = k.data() + hd;  // kv head 1
        const f16_t* v1 = v.data() + hd;
        std::vector<float> s(size_t(8) * kLd, -7.0f);
        const float scale = 1.0f / std::sqrt(float(hd));
        scores(q.data(), group, hd, scale, k1, stride, n, s.data(), kLd);
        for (int x = 0; x < group; ++x) {
          for (int j = 0; j < n; ++j) {
            double want = 0;
            for (int c = 0; c < hd; ++c) want += double(q[size_t(x * hd + c)]) * Fp16ToFp32(k1[j * stride + c]);
            want *= scale;
            // fp32 sums of hd products of unit size: a few ulps of sqrt(hd).
            ASSERT_NEAR(s[size_t(x * kLd + j)], want, 2e-6 * std::sqrt(double(hd)))
                << "hd " << hd << ", group " << group << ", n " << n << ", head " << x << ", key " << j;
          }
          EXPECT_EQ(s[size_t(x * kLd + n)], -7.0f) << "wrote past the run: hd " << hd << ", n " << n;
        }
        // Weights of any sign (the kernel does not care they are probabilities), added to what
        // the sums already hold.
        std::vector<float> acc(size_t(group) * size_t(hd), 0.25f);
        float* accs[8];
        for (int x = 0; x < group; ++x) accs[x] = acc.data() + size_t(x) * size_t(hd);
        values(accs, group, hd, s.data(), kLd, v1, stride, n);
        for (int x = 0; x < group; ++x) {
          for (int c = 0; c < hd; ++c) {
            double want = 0.25, mag = 0.25;
            for (int j = 0; j < n; ++j) {
              const double t = double(s[size_t(x * kLd + j)]) * Fp16ToFp32(v1[j * stride + c]);
              want += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(acc[size_t(x * hd + c)], want, 1e-6 * mag)
                << "hd " << hd << ", group " << group << ", n " << n << ", head " << x << ", dim " << c;
          }
        }
      }
    }
  }
}

TEST(DecodeAttention, ActivePathMatchesDoublePrecision) {
  ExpectKernelsMatchDouble(DecodeScores, DecodeWeightedValues, {4, 8, 16, 24, 64, 80, 128});
}

TEST(DecodeAttention, Avx512MatchesDoublePrecision) {
  if (const char* missing = quant::MissingCpuFeature(quant::KernelPath::kAvx512))
    GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the avx512 path)";
  // Multiples of 16: one to four vectors of values a head and a step, and more than one step.
  ExpectKernelsMatchDouble(DecodeScoresAvx512, DecodeWeightedValuesAvx512, {16, 32, 48, 64, 80, 128, 256});
}

}  // namespace
}  // namespace impress
