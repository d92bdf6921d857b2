#include "store/kv-codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#endif

namespace impress::store {

const char* KVEncodingName(KVEncoding e) {
  switch (e) {
    case KVEncoding::kInt8: return "int8";
    case KVEncoding::kInt4: return "int4";
    case KVEncoding::kF16: break;
  }
  return "fp16";
}

std::optional<KVEncoding> ParseKVEncoding(const std::string& name) {
  if (name == "fp16" || name == "f16") return KVEncoding::kF16;
  if (name == "int8" || name == "i8") return KVEncoding::kInt8;
  if (name == "int4" || name == "i4") return KVEncoding::kInt4;
  return std::nullopt;
}

uint32_t RecordBytes(KVEncoding e, int n_heads, int head_dim) {
  if (e == KVEncoding::kInt8) return uint32_t(n_heads) * (uint32_t(head_dim) + 2);
  if (e == KVEncoding::kInt4) return uint32_t(n_heads) * ((uint32_t(head_dim) + 1) / 2 + 2);
  return uint32_t(n_heads) * uint32_t(head_dim) * 2;
}

namespace {

// The largest code of an encoding: q in [-QMax, QMax].
float QMax(KVEncoding e) { return e == KVEncoding::kInt4 ? 7.0f : 127.0f; }

// The smallest fp16 scale s with absmax / s <= qmax, so every quantized value fits its code.
f16_t ScaleFor(float absmax, float qmax) {
  if (!(absmax > 0.0f)) return 0;  // zero (or NaN) head: all q = 0
  const float want = absmax / qmax;
  f16_t s = Fp32ToFp16(want);
  // Rounded down (or to zero): step up one fp16 ulp. Positive fp16 bits order like the values.
  while (Fp16ToFp32(s) < want && s < 0x7bff) ++s;
  return s;
}

// int8: one byte per value. int4: two values per byte, the even one in the low nibble, each
// stored as q + 8 (so 0 never occurs but for padding). Codes q[0, m) are elements d.. of the
// head; d is a multiple of 512, so a byte never holds two runs' codes.
void PutCodes(KVEncoding e, const int8_t* q, int m, int d, uint8_t* codes) {
  if (e == KVEncoding::kInt8) {
    std::memcpy(codes + d, q, size_t(m));
    return;
  }
  uint8_t* b = codes + d / 2;
  for (int i = 0; i < m / 2; ++i) b[i] = uint8_t((q[2 * i] + 8) | ((q[2 * i + 1] + 8) << 4));
  if (m % 2) b[m / 2] = uint8_t(q[m - 1] + 8);
}

// Bytes of one head's codes.
size_t CodeBytes(KVEncoding e, int head_dim) {
  return e == KVEncoding::kInt4 ? (size_t(head_dim) + 1) / 2 : size_t(head_dim);
}

void EncodeQuantized(KVEncoding e, const f16_t* row, int n_heads, int head_dim, const int* heads, uint8_t* rec) {
  const float qmax = QMax(e);
  uint8_t* codes = rec + 2 * size_t(n_heads);
  const size_t head_code_bytes = CodeBytes(e, head_dim);
  float x[512];
  int8_t q[512];
  for (int j = 0; j < n_heads; ++j) {
    const f16_t* h = row + size_t(heads ? heads[j] : j) * size_t(head_dim);
    uint8_t* hc = codes + size_t(j) * head_code_bytes;
    float amax = 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      for (int i = 0; i < m; ++i) amax = std::max(amax, std::fabs(x[i]));
    }
    const f16_t s16 = ScaleFor(amax, qmax);
    std::memcpy(rec + 2 * size_t(j), &s16, 2);  // rec is only byte-aligned: copy, don't alias
    const float s = Fp16ToFp32(s16);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      // x * inv may land a hair above qmax when s was rounded up exactly to absmax / qmax.
      for (int i = 0; i < m; ++i) q[i] = int8_t(std::clamp(std::nearbyint(x[i] * inv), -qmax, qmax));
      PutCodes(e, q, m, d, hc);
    }
  }
}

}  // namespace

void EncodeRecords(KVEncoding e, const f16_t* src, size_t src_stride, size_t n_tokens, int n_heads, int head_dim,
                   const int* heads, uint8_t* dst) {
  const size_t rec = RecordBytes(e, n_heads, head_dim);
  const size_t head_bytes = size_t(head_dim) * 2;
  for (size_t t = 0; t < n_tokens; ++t) {
    const f16_t* row = src + t * src_stride;
    uint8_t* out = dst + t * rec;
    if (e != KVEncoding::kF16) {
      EncodeQuantized(e, row, n_heads, head_dim, heads, out);
    } else if (!heads) {
      std::memcpy(out, row, rec);
    } else {
      for (int j = 0; j < n_heads; ++j)
        std::memcpy(out + size_t(j) * head_bytes, row + size_t(heads[j]) * size_t(head_dim), head_bytes);
    }
  }
}

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

void DecodeInt8Head(const int8_t* q, float s, int head_dim, f16_t* out) {
  int d = 0;
#if defined(__AVX2__) && defined(__F16C__)
  const __m256 vs = _mm256_set1_ps(s);
  for (; d + 8 <= head_dim; d += 8)
    Int8x8ToHalves(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + d)), vs, out + d);
#endif
  for (; d < head_dim; ++d) out[d] = Fp32ToFp16(ClampToHalf(float(q[d]) * s));
}

// int4: two codes per byte, the even element in the low nibble, each stored as q + 8.
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

}  // namespace

void DecodeRecord(KVEncoding e, const uint8_t* rec, int n_heads, int head_dim, f16_t* dst) {
  if (e == KVEncoding::kF16) {
    std::memcpy(dst, rec, size_t(n_heads) * size_t(head_dim) * 2);
    return;
  }
  const uint8_t* codes = rec + 2 * size_t(n_heads);
  const size_t head_code_bytes = CodeBytes(e, head_dim);
  for (int j = 0; j < n_heads; ++j) {
    f16_t s16;
    std::memcpy(&s16, rec + 2 * size_t(j), 2);
    const float s = Fp16ToFp32(s16);
    const uint8_t* hc = codes + size_t(j) * head_code_bytes;
    f16_t* out = dst + size_t(j) * size_t(head_dim);
    if (e == KVEncoding::kInt8) {
      DecodeInt8Head(reinterpret_cast<const int8_t*>(hc), s, head_dim, out);
    } else {
      DecodeInt4Head(hc, s, head_dim, out);
    }
  }
}

}  // namespace impress::store
