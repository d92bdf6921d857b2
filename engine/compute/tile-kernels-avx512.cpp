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
  static V Round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Scale2(V y, V n) { return _mm512_scalef_ps(y, n); }  // exact for the normal results ExpLanes has
};

// Exp8 on sixteen lanes.
inline __m512 Exp16(__m512 x) { return ExpLanes<Avx512ExpOps>(x); }

}  // namespace

float ExpShiftToAvx512(const float* row, int n, float* dst, float* sum) {
  int j = 0;
  __m512 vmax0 = _mm512_set1_ps(-INFINITY), vmax1 = vmax0;
  for (; j + 32 <= n; j += 32) {
    vmax0 = _mm512_max_ps(vmax0, _mm512_loadu_ps(row + j));
    vmax1 = _mm512_max_ps(vmax1, _mm512_loadu_ps(row + j + 16));
  }
  if (j + 16 <= n) {
    vmax0 = _mm512_max_ps(vmax0, _mm512_loadu_ps(row + j));
    j += 16;
  }
  if (j < n)
    vmax1 =
        _mm512_max_ps(vmax1, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), __mmask16((1u << (n - j)) - 1), row + j));
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(vmax0, vmax1));
  const __m512 vm16 = _mm512_set1_ps(mx);
  // ExpShiftTo's four eight-lane sums, two to a vector: s0 | s1 and s2 | s3.
  __m512 s01 = _mm512_setzero_ps(), s23 = _mm512_setzero_ps();
  j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512 e0 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm16));
    const __m512 e1 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j + 16), vm16));
    _mm512_storeu_ps(dst + j, e0);
    _mm512_storeu_ps(dst + j + 16, e1);
    s01 = _mm512_add_ps(s01, e0);
    s23 = _mm512_add_ps(s23, e1);
  }
  int k = 0;  // the eight-lane sum the next eight go to
  if (j + 16 <= n) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm16));
    _mm512_storeu_ps(dst + j, e);
    s01 = _mm512_add_ps(s01, e);
    j += 16;
    k = 2;
  }
  __m256 s[4] = {_mm512_castps512_ps256(s01), _mm512_extractf32x8_ps(s01, 1), _mm512_castps512_ps256(s23),
                 _mm512_extractf32x8_ps(s23, 1)};
  const __m256 vm = _mm256_set1_ps(mx);
  if (j + 8 <= n) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(dst + j, e);
    s[k] = _mm256_add_ps(s[k], e);
    j += 8;
  }
  const float total = HorizontalSum(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  *sum = ExpShiftTail(row + j, n - j, vm, dst + j, total);
  return mx;
}

}  // namespace impress
