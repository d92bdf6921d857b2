// The AVX-512 path (F, BW, VL, DQ + VNNI). This file alone is compiled with those instruction
// sets (CMakeLists.txt); it runs only after CPUID said the CPU has them (quant-kernels.cpp).
// Integer dots use vpdpbusd, which does not saturate; F16/BF16 rows use 16-wide vectors.
// GCC 12's AVX-512 intrinsics fill unused lanes with a self-initialised `__Y` and then warn about
// it once inlined (a compiler bug fixed in GCC 13); nothing of ours is uninitialised.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "engine/quant/block-formats.h"

namespace impress::quant {
namespace {

inline __m256i DotU8I8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

// Q8_0 is signed * signed: vpdpbusd wants unsigned weights, so w + 128 (w xor 0x80) against a,
// then -128 * sum(a) into lane 0.
inline __m256i LanesQ8_0(const BlockQ8_0& w, const ActBlock32& a) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
  const __m256i lanes = DotU8I8(_mm256_xor_si256(wv, _mm256_set1_epi8(int8_t(0x80))), av);
  return _mm256_add_epi32(lanes, _mm256_setr_epi32(-128 * a.sum, 0, 0, 0, 0, 0, 0, 0));
}

}  // namespace
}  // namespace impress::quant

#include "engine/quant/kernels-x86-inl.h"

namespace impress::quant {
namespace {

inline __m512 LoadF16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 LoadBF16x16(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// F16/BF16 rows . fp32 on 16-wide vectors, four accumulators; the tail goes through the 8-wide code.
template <__m512 (*Load16)(const uint8_t*), __m256 (*Load8)(const uint8_t*), float (*Load1)(const uint8_t*)>
float DotHalf512(const uint8_t* w, const void* xv, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_fmadd_ps(Load16(w + 2 * (i + 16 * k)), _mm512_loadu_ps(x + i + 16 * k), acc[k]);
    }
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  const float head = HsumF32(_mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1)));
  return head + DotHalf256<Load8, Load1>(w + 2 * i, x + i, n - i);
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table =
      MakeX86Table(DotHalf512<LoadF16x16, LoadF16x8, LoadF16x1>, DotHalf512<LoadBF16x16, LoadBF16x8, LoadBF16x1>);
  return table;
}

}  // namespace impress::quant
