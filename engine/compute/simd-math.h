// Vector math the CPU attention kernels share (AVX2 + FMA): exp of eight floats, horizontal sum
// and max, and a row's shifted exponentials (the softmax numerator).
//
// Thread contract: pure functions.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace impress {

// exp(x) lane by lane (Cephes-style: 2^n * P(r), relative error ~2e-7 over the float range), on
// the vector operations of Ops (V, Set, Min, Max, Fma, Fnma, Mul, Add, Floor, and Pow2 for 2^n of
// a floored float): every vector width runs the same operations, so gives the same bits.
template <class Ops>
inline typename Ops::V ExpLanes(typename Ops::V x) {
  x = Ops::Max(Ops::Min(x, Ops::Set(88.3762626647949f)), Ops::Set(-87.3365447504019f));
  const typename Ops::V fx = Ops::Floor(Ops::Fma(x, Ops::Set(1.44269504088896341f), Ops::Set(0.5f)));
  x = Ops::Fnma(fx, Ops::Set(0.693359375f), x);
  x = Ops::Fnma(fx, Ops::Set(-2.12194440e-4f), x);
  const typename Ops::V z = Ops::Mul(x, x);
  typename Ops::V y = Ops::Set(1.9875691500E-4f);
  y = Ops::Fma(y, x, Ops::Set(1.3981999507E-3f));
  y = Ops::Fma(y, x, Ops::Set(8.3334519073E-3f));
  y = Ops::Fma(y, x, Ops::Set(4.1665795894E-2f));
  y = Ops::Fma(y, x, Ops::Set(1.6666665459E-1f));
  y = Ops::Fma(y, x, Ops::Set(5.0000001201E-1f));
  y = Ops::Fma(y, z, x);
  y = Ops::Add(y, Ops::Set(1.0f));
  return Ops::Mul(y, Ops::Pow2(fx));
}

struct Avx2ExpOps {
  using V = __m256;
  static V Set(float f) { return _mm256_set1_ps(f); }
  static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Floor(V a) { return _mm256_floor_ps(a); }
  static V Pow2(V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(e);
  }
};

// exp of eight floats.
inline __m256 Exp8(__m256 x) { return ExpLanes<Avx2ExpOps>(x); }

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// dst[j] = exp(row[j] - max(row)) for j < n (n >= 1; dst may be row); returns the max, and the
// sum of the exponentials in *sum. The sum runs in eight lanes, lane i over j = i, i + 8, ...,
// then the lanes and the tail: ExpShiftToAvx512 (tile-kernels-avx512.cpp) keeps that order, so
// both give the same bits.
inline float ExpShiftTo(const float* row, int n, float* dst, float* sum) {
  int j = 0;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
  float mx = HorizontalMax(vmax);
  for (; j < n; ++j) mx = std::max(mx, row[j]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(dst + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float total = HorizontalSum(vsum);
  for (; j < n; ++j) {
    dst[j] = std::exp(row[j] - mx);
    total += dst[j];
  }
  *sum = total;
  return mx;
}

// In place: row[j] = exp(row[j] - max(row)) for j < n (n >= 1); returns the max, and the sum
// of the exponentials in *sum.
inline float ExpShift(float* row, int n, float* sum) { return ExpShiftTo(row, n, row, sum); }

}  // namespace impress
