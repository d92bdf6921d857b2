// TileScores and TileWeightedValues on AVX-512 (compiled for it; called only when the kernel path
// says the CPU has it): the register blocks of tile-kernels-inl.h at sixteen floats a vector,
// and AVX2 for the last eight columns of a head size that is an odd multiple of eight.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 intrinsics (kernels-avx512.cpp)
#if !defined(__clang__)                           // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "engine/compute/simd-math.h"
#include "engine/compute/tile-attention.h"
#include "engine/compute/tile-kernels-inl.h"

namespace impress {

void TileScoresAvx512(const float* q, int rows, int hd, const float* kt, int ldk, int n, float* s, int ld) {
  TileScoresWith<Avx512Vec>(q, rows, hd, kt, ldk, RoundUpTile(n), s, ld);
}

void TileWeightedValuesAvx512(const float* p, int rows, int ld, const float* v32, int n, int hd, float* acc) {
  const int end = TileWeightedValuesWith<Avx512Vec>(p, rows, ld, v32, n, hd, acc);
  if (end < hd) TileWeightedValuesWith<Avx2Vec>(p, rows, ld, v32, n, hd, acc, end);
}

namespace {

struct Avx512ExpOps {
  using V = __m512;
  static V Set(float f) { return _mm512_set1_ps(f); }
  static V Min(V a, V b) { return _mm512_min_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static V Pow2(V n) {
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(e);
  }
};

// Exp8 on sixteen lanes.
inline __m512 Exp16(__m512 x) { return ExpLanes<Avx512ExpOps>(x); }

}  // namespace

float ExpShiftToAvx512(const float* row, int n, float* dst, float* sum) {
  int j = 0;
  __m512 vmax16 = _mm512_set1_ps(-INFINITY);
  for (; j + 16 <= n; j += 16) vmax16 = _mm512_max_ps(vmax16, _mm512_loadu_ps(row + j));
  float mx = _mm512_reduce_max_ps(vmax16);
  for (; j < n; ++j) mx = std::max(mx, row[j]);
  const __m512 vm16 = _mm512_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm16));
    _mm512_storeu_ps(dst + j, e);
    // Lanes 0-7 then 8-15 into the eight sums: the order ExpShiftTo adds them in.
    vsum = _mm256_add_ps(vsum, _mm512_castps512_ps256(e));
    vsum = _mm256_add_ps(vsum, _mm512_extractf32x8_ps(e, 1));
  }
  if (j + 8 <= n) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), _mm256_set1_ps(mx)));
    _mm256_storeu_ps(dst + j, e);
    vsum = _mm256_add_ps(vsum, e);
    j += 8;
  }
  float total = HorizontalSum(vsum);
  for (; j < n; ++j) {
    dst[j] = std::exp(row[j] - mx);
    total += dst[j];
  }
  *sum = total;
  return mx;
}

}  // namespace impress
