// Random inputs and the error measure of the CUDA parity tests (cuda-backend-test on a GPU,
// kernel-emulation-test everywhere): both compare against the CPU backend the same way.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace impress {

// n values uniform in [lo, hi), reproducible from the seed.
inline std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// The same in fp16, uniform in [-scale, scale).
inline std::vector<f16_t> RandomHalf(size_t n, uint32_t seed, float scale = 1.0f) {
  const std::vector<float> f = Random(n, seed, -scale, scale);
  std::vector<f16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(f[i]);
  return h;
}

// Max |a - b| / (max |b| + tiny): one number per tensor, robust to values near zero; infinite
// when a holds a NaN or an infinity.
inline double RelMaxErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

}  // namespace impress
