#include "base/kv-codes.h"

#include <cstring>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#endif

namespace impress {

namespace {

// Decoded values are clamped to the halves: q * s may pass the largest half (65504) when s was
// rounded up; the input did not. (A NaN product, possible only from a NaN scale, becomes -65504
// on every path: the vector max takes its second operand then.)
inline float ClampToHalf(float x) {
  x = x > -65504.0f ? x : -65504.0f;
  return x < 65504.0f ? x : 65504.0f;
}

#if defined(__AVX2__) && defined(__F16C__)
// Eight int8 codes (the low 8 bytes of q8) times s, clamped, to halves (F16C's nearest even, as
// Fp32ToFp16 rounds).
inline void Int8x8ToHalves(__m128i q8, __m256 vs, f16_t* out) {
  __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vs);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-65504.0f)), _mm256_set1_ps(65504.0f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
#endif

}  // namespace

void DecodeInt8Head(const int8_t* q, float s, int head_dim, f16_t* out) {
  int d = 0;
#if defined(__AVX2__) && defined(__F16C__)
  const __m256 vs = _mm256_set1_ps(s);
  for (; d + 8 <= head_dim; d += 8)
    Int8x8ToHalves(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + d)), vs, out + d);
#endif
  for (; d < head_dim; ++d) out[d] = Fp32ToFp16(ClampToHalf(float(q[d]) * s));
}

void DecodeInt4Head(const uint8_t* codes, float s, int head_dim, f16_t* out) {
  int d = 0;
#if defined(__AVX2__) && defined(__F16C__)
  const __m256 vs = _mm256_set1_ps(s);
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (; d + 16 <= head_dim; d += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + d / 2));  // 16 codes
    const __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    const __m128i q = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), eight);  // in element order
    Int8x8ToHalves(q, vs, out + d);
    Int8x8ToHalves(_mm_srli_si128(q, 8), vs, out + d + 8);
  }
#endif
  for (; d < head_dim; ++d) {
    const int nib = (d % 2) ? codes[d / 2] >> 4 : codes[d / 2] & 0x0f;
    out[d] = Fp32ToFp16(ClampToHalf(float(nib - 8) * s));
  }
}

void DecodeRecordHead(int bits, const uint8_t* rec, int n_heads, int head_dim, int h, f16_t* out) {
  f16_t s16;
  std::memcpy(&s16, rec + 2 * size_t(h), 2);  // records are only byte-aligned: copy, don't alias
  const float s = Fp16ToFp32(s16);
  const uint8_t* hc = rec + 2 * size_t(n_heads) + size_t(h) * HeadCodeBytes(bits, head_dim);
  if (bits == 8) {
    DecodeInt8Head(reinterpret_cast<const int8_t*>(hc), s, head_dim, out);
  } else {
    DecodeInt4Head(hc, s, head_dim, out);
  }
}

}  // namespace impress
