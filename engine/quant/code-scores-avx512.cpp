// The AVX-512 VNNI path of engine/quant/code-scores.h. Compiled with AVX-512 F/BW/VL/DQ + VNNI
// (CMakeLists.txt); called only on the kAvx512 kernel path. Per four dims, one vpdpbusd multiplies
// a query row's broadcast four int8 codes into 16 keys' four code bytes at once.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 intrinsics (kernels-avx512.cpp)
#if !defined(__clang__)                           // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/quant/code-scores.h"
#include "engine/quant/row-blocks.h"

namespace impress::quant {

namespace {

// RB query rows x 32 keys per step.
template <int RB>
void ScoreRows(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int words, const uint8_t* codes, int n_pad,
               const float* ks, float* s, int ld) {
  for (int j = 0; j < n_pad; j += kCodeScoreCols) {
    __m512i acc[RB][2];
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    const uint8_t* kc = codes + int64_t(j) * 4;
    for (int w = 0; w < words; ++w, kc += int64_t(n_pad) * 4) {
      const __m512i k0 = _mm512_loadu_si512(kc), k1 = _mm512_loadu_si512(kc + 64);
      for (int r = 0; r < RB; ++r) {
        int32_t word;
        std::memcpy(&word, q8 + int64_t(r) * 4 * words + 4 * w, 4);
        const __m512i b = _mm512_set1_epi32(word);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], k0, b);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], k1, b);
      }
    }
    const __m512 ks0 = _mm512_loadu_ps(ks + j), ks1 = _mm512_loadu_ps(ks + j + 16);
    for (int r = 0; r < RB; ++r) {
      const __m512i corr = _mm512_set1_epi32(8 * q_sum[r]);
      const __m512 qs = _mm512_set1_ps(q_scale[r]);
      float* out = s + int64_t(r) * ld + j;
      _mm512_storeu_ps(out,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], corr)), _mm512_mul_ps(qs, ks0)));
      _mm512_storeu_ps(out + 16,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], corr)), _mm512_mul_ps(qs, ks1)));
    }
  }
}

}  // namespace

void Int4KeyScoresAvx512(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                         const uint8_t* codes, int n_pad, const float* ks, float* s, int ld) {
  // 16 accumulators, two key vectors and a broadcast of the 32 registers.
  const int words = CodeWords(hd);
  ForRowBlocks<8>(rows, [&]<int RB>(int r) {
    ScoreRows<RB>(q8 + int64_t(r) * 4 * words, q_scale + r, q_sum + r, words, codes, n_pad, ks, s + int64_t(r) * ld,
                  ld);
  });
}

}  // namespace impress::quant
