// The AVX-512 VNNI path of engine/quant/key-scores.h. Compiled with AVX-512 F/BW/VL/DQ + VNNI
// (CMakeLists.txt); called only after CPUID said the CPU has them. Per 4 dims, one vpdpbusd
// multiplies a query row's broadcast codes into 16 keys at once.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 intrinsics (kernels-avx512.cpp)
#if !defined(__clang__)                           // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/quant/key-scores.h"
#include "engine/quant/row-blocks.h"

namespace impress::quant {

namespace {

constexpr int kAhead = 8;  // rows ahead the packer prefetches

// The lanes of the 16 channels from c on that the head has (all but at its end).
__mmask16 ChannelMask(int c, int hd) { return c + 16 <= hd ? __mmask16(0xffff) : __mmask16((1u << (hd - c)) - 1); }

// 16 channels of row `row` from channel c on (fewer at the end of the head: masked, zeros).
__m512 LoadChannels(const f16_t* row, int c, int hd) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(ChannelMask(c, hd), row + c));
}

// Rows are strided (one kv head of each token): ask for a later row's lines ahead of use, the
// prefetchers follow this pattern too late.
void PrefetchRow(const f16_t* k, int64_t stride, int j, int n, int hd) {
  if (j + kAhead >= n) return;
  const char* ahead = reinterpret_cast<const char*>(k + int64_t(j + kAhead) * stride);
  for (int b = 0; b < hd * 2; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
}

}  // namespace

void KeyChannelAbsMaxAvx512(const f16_t* k, int64_t stride, int n, int hd, float* amax) {
  for (int j = 0; j < n; ++j) {
    PrefetchRow(k, stride, j, n, hd);
    const f16_t* row = k + int64_t(j) * stride;
    for (int c = 0; c < hd; c += 16) {
      const __mmask16 m = ChannelMask(c, hd);
      const __m512 v = _mm512_max_ps(_mm512_maskz_loadu_ps(m, amax + c), _mm512_abs_ps(LoadChannels(row, c, hd)));
      _mm512_mask_storeu_ps(amax + c, m, v);
    }
  }
}

void PackKeysInt8Avx512(const f16_t* k, int64_t stride, int n, int hd, const float* channel_inv, int8_t* codes,
                        int n_pad, int col0, int32_t* sum) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int j = 0; j < n; ++j) {
    const f16_t* row = k + int64_t(j) * stride;
    PrefetchRow(k, stride, j, n, hd);
    int8_t* col = codes + int64_t(col0 + j) * 4;
    __m512i total = _mm512_setzero_si512();
    for (int c = 0; c < hd; c += 16) {
      const __mmask16 m = ChannelMask(c, hd);
      const __m512 inv = _mm512_maskz_loadu_ps(m, channel_inv + c);
      const __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(LoadChannels(row, c, hd), inv), lo), hi);
      const __m512i q = _mm512_cvtps_epi32(y);  // nearest even, as the scalar path's nearbyint
      total = _mm512_add_epi32(total, q);
      alignas(16) int32_t groups[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(groups), _mm512_cvtepi32_epi8(q));
      const int n_groups = (hd - c) >= 16 ? 4 : (hd - c) / 4;
      for (int t = 0; t < n_groups; ++t) std::memcpy(col + int64_t(c / 4 + t) * n_pad * 4, &groups[t], 4);
    }
    sum[j] = _mm512_reduce_add_epi32(total);
  }
}

namespace {

// RB query rows x 32 keys per step.
template <int RB>
void ScoreRows(const uint8_t* q, const float* q_scale, int hd, const int8_t* codes, int n_pad, const int32_t* k_sum,
               float* s, int ld) {
  for (int j = 0; j < n_pad; j += kKeyScoreCols) {
    __m512i acc[RB][2];
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    const int8_t* kc = codes + int64_t(j) * 4;
    for (int c = 0; c < hd; c += 4, kc += int64_t(n_pad) * 4) {
      const __m512i k0 = _mm512_loadu_si512(kc), k1 = _mm512_loadu_si512(kc + 64);
      for (int r = 0; r < RB; ++r) {
        int32_t word;
        std::memcpy(&word, q + int64_t(r) * hd + c, 4);
        const __m512i b = _mm512_set1_epi32(word);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b, k0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b, k1);
      }
    }
    // The queries' codes are stored + 128: take 128 * sum(k) back out, exactly, in integers.
    const __m512i corr0 = _mm512_slli_epi32(_mm512_loadu_si512(k_sum + j), 7);
    const __m512i corr1 = _mm512_slli_epi32(_mm512_loadu_si512(k_sum + j + 16), 7);
    for (int r = 0; r < RB; ++r) {
      const __m512 qs = _mm512_set1_ps(q_scale[r]);
      float* out = s + int64_t(r) * ld + j;
      _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], corr0)), qs));
      _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], corr1)), qs));
    }
  }
}

}  // namespace

void KeyScoresInt8Avx512(const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes, int n_pad,
                         const int32_t* k_sum, float* s, int ld) {
  // 16 accumulators, two key vectors and a broadcast of the 32 registers.
  ForRowBlocks<8>(rows, [&]<int RB>(int r) {
    ScoreRows<RB>(q_u8 + int64_t(r) * hd, q_scale + r, hd, codes, n_pad, k_sum, s + int64_t(r) * ld, ld);
  });
}

}  // namespace impress::quant
