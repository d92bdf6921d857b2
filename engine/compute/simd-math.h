// Vector math the CPU attention kernels share (AVX2 + FMA): exp of eight floats, horizontal sum
// and max, and a row's shifted exponentials (the softmax numerator).
//
// Thread contract: pure functions.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace impress {

// exp(x) lane by lane, relative error ~2e-7: x = n ln2 + r with n = round(x / ln2) (ln2 in two
// parts, so r is exact to ~1e-10), exp(r) on |r| <= ln2 / 2 by a degree-5 minimax polynomial
// with constant term 1, then scaled by 2^n. x is clamped to [-87, 88] first, so 2^n and the
// result stay normal floats (below -87 it returns e^-87, ~1.6e-38). Every vector width runs the
// same operations of Ops (V, Set, Min, Max, Fma, Fnma, Mul, Round to nearest, and Scale2: y * 2^n
// of an integral n), so gives the same bits.
template <class Ops>
inline typename Ops::V ExpLanes(typename Ops::V x) {
  using V = typename Ops::V;
  x = Ops::Max(Ops::Min(x, Ops::Set(88.0f)), Ops::Set(-87.0f));
  const V n = Ops::Round(Ops::Mul(x, Ops::Set(1.44269504088896341f)));
  V r = Ops::Fnma(n, Ops::Set(0.693359375f), x);
  r = Ops::Fnma(n, Ops::Set(-2.12194440e-4f), r);
  V y = Ops::Set(8.290272e-3f);
  y = Ops::Fma(y, r, Ops::Set(4.189816e-2f));
  y = Ops::Fma(y, r, Ops::Set(1.6667639e-1f));
  y = Ops::Fma(y, r, Ops::Set(4.9999148e-1f));
  y = Ops::Fma(y, r, Ops::Set(9.999997e-1f));
  y = Ops::Fma(y, r, Ops::Set(1.0f));  // so exp(0), the row's largest, is exactly 1
  return Ops::Scale2(y, n);
}

struct Avx2ExpOps {
  using V = __m256;
  static V Set(float f) { return _mm256_set1_ps(f); }
  static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n built in the exponent field (n in [-126, 127]), then one exact multiply.
  static V Scale2(V y, V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
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

// Lanes x < t of eight (0 <= t <= 8) all ones, the rest zero: the mask of a row's last t floats.
inline __m256i TailMask(int t) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(t), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// row[0..t) (t < 8) in the low lanes, -inf in the others.
inline __m256 TailForMax(const float* row, int t) {
  const __m256i m = TailMask(t);
  return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(row, m), _mm256_castsi256_ps(m));
}

// A row's last t < 8 exponentials: dst[x] = exp(row[x] - max) on masked lanes (vm: the max in
// every lane), each added to total in order; returns the total.
inline float ExpShiftTail(const float* row, int t, __m256 vm, float* dst, float total) {
  if (t == 0) return total;
  const __m256i m = TailMask(t);
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_maskload_ps(row, m), vm));
  _mm256_maskstore_ps(dst, m, e);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, e);
  for (int x = 0; x < t; ++x) total += lanes[x];
  return total;
}

// dst[j] = exp(row[j] - max(row)) for j < n (n >= 1; dst may be row); returns the max, and the
// sum of the exponentials in *sum. The sum runs in four sums of eight lanes (element j into sum
// (j / 8) % 4, lane j % 8, so no add waits on the one before), then (s0 + s1) + (s2 + s3) across
// the lanes, then the last n % 8 one by one: ExpShiftToAvx512 (tile-kernels-avx512.cpp) keeps
// that order, so both give the same bits.
inline float ExpShiftTo(const float* row, int n, float* dst, float* sum) {
  int j = 0;
  __m256 vmax0 = _mm256_set1_ps(-INFINITY), vmax1 = vmax0;
  for (; j + 16 <= n; j += 16) {
    vmax0 = _mm256_max_ps(vmax0, _mm256_loadu_ps(row + j));
    vmax1 = _mm256_max_ps(vmax1, _mm256_loadu_ps(row + j + 8));
  }
  if (j + 8 <= n) {
    vmax0 = _mm256_max_ps(vmax0, _mm256_loadu_ps(row + j));
    j += 8;
  }
  if (j < n) vmax1 = _mm256_max_ps(vmax1, TailForMax(row + j, n - j));
  const float mx = HorizontalMax(_mm256_max_ps(vmax0, vmax1));
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  j = 0;
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j + 8 * k), vm));
      _mm256_storeu_ps(dst + j + 8 * k, e);
      s[k] = _mm256_add_ps(s[k], e);
    }
  for (int k = 0; j + 8 <= n; j += 8, ++k) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(dst + j, e);
    s[k] = _mm256_add_ps(s[k], e);
  }
  const float total = HorizontalSum(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  *sum = ExpShiftTail(row + j, n - j, vm, dst + j, total);
  return mx;
}

// In place: row[j] = exp(row[j] - max(row)) for j < n (n >= 1); returns the max, and the sum
// of the exponentials in *sum.
inline float ExpShift(float* row, int n, float* sum) { return ExpShiftTo(row, n, row, sum); }

}  // namespace impress
