// Whole weight rows decoded for the small-batch GEMM in AVX2 (the project's baseline, so both
// SIMD paths use it): the bytes, scales and offsets DecodeGroup gives (gemm-decode-inl.h), bit
// for bit, a K-quant super-block or a 32-element block at a time. The integers are exact; each
// scale is the same fp16 -> fp32 conversion and the same fp32 multiply as DecodeGroup's.
#include <immintrin.h>

#include <cstring>

#include "engine/quant/gemm-decode-inl.h"
#include "engine/quant/gemm.h"

namespace impress::quant::gemm_internal {
namespace {

inline __m128i Load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void Store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// The 32 nibbles of 16 bytes: low nibbles as elements 0..15, high as 16..31.
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i q = Load16(qs), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Bit i of the 32-bit qh as 0x10 in byte i.
inline __m256i FifthBits(uint32_t qh) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

template <WeightType T>
void DecodeRow(const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
  const __m256i m4 = _mm256_set1_epi8(15);
  if constexpr (T == WeightType::kQ4_K || T == WeightType::kQ5_K) {
    constexpr bool k5 = T == WeightType::kQ5_K;
    constexpr int64_t kBytes = k5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    for (int64_t sb = 0; sb < n_groups / 8; ++sb, u += 256, dw += 8, mw += 8) {
      const uint8_t* b = row + sb * kBytes;
      const uint8_t* qs = b + (k5 ? 48 : 16);
      const __m256i qh = k5 ? Load32(b + 16) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high)
        const __m256i q = Load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (k5) {
          const __m256i one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        Store32(u + 64 * c, lo);
        Store32(u + 64 * c + 32, hi);
      }
      // The eight 6-bit scales and mins (UnpackScaleMinK4) a 32-bit word of four at a time.
      uint32_t u[3];
      std::memcpy(u, b + 4, 12);
      constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
      const uint64_t sc = (u[0] & k6) | uint64_t((u[2] & k4) | ((u[0] >> 6) & k2) << 4) << 32;
      const uint64_t mn = (u[1] & k6) | uint64_t(((u[2] >> 4) & k4) | ((u[1] >> 6) & k2) << 4) << 32;
      const __m256 d = _mm256_set1_ps(HalfAt(b)), dmin = _mm256_set1_ps(HalfAt(b + 2));
      auto widen = [](uint64_t bytes) {
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(bytes))));
      };
      _mm256_storeu_ps(dw, _mm256_mul_ps(d, widen(sc)));
      _mm256_storeu_ps(mw, _mm256_xor_ps(_mm256_mul_ps(dmin, widen(mn)), _mm256_set1_ps(-0.0f)));
    }
  } else if constexpr (T == WeightType::kQ6_K) {
    for (int64_t sb = 0; sb < n_groups / 8; ++sb, u += 256, dw += 16, mw += 16) {
      const uint8_t* b = row + sb * int64_t(sizeof(BlockQ6_K));
      const __m256i m2 = _mm256_set1_epi8(0x30);
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = Load32(b + 64 * h), ql1 = Load32(b + 64 * h + 32), qh = Load32(b + 128 + 32 * h);
        // Element l of chunk c: the nibble of ql, bits 4..5 = (qh >> 2c) & 3.
        const __m256i c0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
        const __m256i c1 = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        const __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
        const __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
        Store32(u + 128 * h, c0);
        Store32(u + 128 * h + 32, c1);
        Store32(u + 128 * h + 64, c2);
        Store32(u + 128 * h + 96, c3);
      }
      // Group 4h + c, half e: scales[8h + 2c + e], so the 16 scales in order are the 16 spans.
      const __m256 d = _mm256_set1_ps(HalfAt(b + 208));
      const __m128i sc = Load16(b + 192);
      for (int i = 0; i < 2; ++i) {
        const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(i == 0 ? sc : _mm_srli_si128(sc, 8)));
        const __m256 v = _mm256_mul_ps(d, s);
        _mm256_storeu_ps(dw + 8 * i, v);
        _mm256_storeu_ps(mw + 8 * i, _mm256_mul_ps(_mm256_set1_ps(-32.0f), v));
      }
    }
  } else if constexpr (T == WeightType::kQ8_0) {
    const __m256i flip = _mm256_set1_epi8(int8_t(0x80));
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* b = row + g * int64_t(sizeof(BlockQ8_0));
      Store32(u + 32 * g, _mm256_xor_si256(Load32(b + 2), flip));
      dw[g] = HalfAt(b);
      mw[g] = -128.0f * dw[g];
    }
  } else {  // Q4_0, Q4_1, Q5_0, Q5_1
    constexpr bool kMin = T == WeightType::kQ4_1 || T == WeightType::kQ5_1;
    constexpr bool k5 = T == WeightType::kQ5_0 || T == WeightType::kQ5_1;
    constexpr int64_t kBytes = T == WeightType::kQ4_0   ? sizeof(BlockQ4_0)
                               : T == WeightType::kQ4_1 ? sizeof(BlockQ4_1)
                               : T == WeightType::kQ5_0 ? sizeof(BlockQ5_0)
                                                        : sizeof(BlockQ5_1);
    const int qs = (kMin ? 4 : 2) + (k5 ? 4 : 0);  // offset of the nibbles
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* b = row + g * kBytes;
      __m256i v = Nibbles(b + qs);
      if constexpr (k5) v = _mm256_or_si256(v, FifthBits(LoadQh32(b + (kMin ? 4 : 2))));
      Store32(u + 32 * g, v);
      dw[g] = HalfAt(b);
      mw[g] = kMin ? HalfAt(b + 2) : (k5 ? -16.0f : -8.0f) * dw[g];
    }
  }
}

}  // namespace

void PanelQuadsAvx2(const uint8_t* u, int64_t k, int64_t n_groups, uint8_t* data) {
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int b = 0; b < 4; ++b) {  // rows 8b .. 8b + 7: an 8 x 8 transpose of dwords
      __m256i r[8], t[8], s[8];
      for (int i = 0; i < 8; ++i) r[i] = Load32(u + (8 * b + i) * k + 32 * g);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        s[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        s[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        s[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      uint8_t* d = data + g * 1024 + 32 * b;
      for (int q = 0; q < 4; ++q) {
        Store32(d + q * 128, _mm256_permute2x128_si256(s[q], s[q + 4], 0x20));
        Store32(d + (q + 4) * 128, _mm256_permute2x128_si256(s[q], s[q + 4], 0x31));
      }
    }
  }
}

void DecodeRowAvx2(WeightType type, const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
  switch (type) {
    case WeightType::kQ8_0: DecodeRow<WeightType::kQ8_0>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ4_0: DecodeRow<WeightType::kQ4_0>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ4_1: DecodeRow<WeightType::kQ4_1>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ5_0: DecodeRow<WeightType::kQ5_0>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ5_1: DecodeRow<WeightType::kQ5_1>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ4_K: DecodeRow<WeightType::kQ4_K>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ5_K: DecodeRow<WeightType::kQ5_K>(row, n_groups, u, dw, mw); break;
    case WeightType::kQ6_K: DecodeRow<WeightType::kQ6_K>(row, n_groups, u, dw, mw); break;
    default: break;
  }
}

}  // namespace impress::quant::gemm_internal
