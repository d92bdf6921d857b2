// The scalar reference and the AVX2 path of engine/quant/code-scores.h, and the choice of path.
#include "engine/quant/code-scores.h"
#include "engine/quant/row-blocks.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>

#include "base/fp16.h"

namespace impress::quant {

void QuantizeQueriesInt16(const float* q, int rows, int hd, int16_t* q16, float* q_scale, int32_t* q_sum) {
  for (int r = 0; r < rows; ++r) {
    const float* row = q + int64_t(r) * hd;
    float amax = 0;
    for (int c = 0; c < hd; ++c) amax = std::max(amax, std::fabs(row[c]));
    const bool live = amax > 0.0f;
    q_scale[r] = live ? amax / 32767.0f : 0.0f;
    const float inv = live ? 32767.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int c = 0; c < hd; ++c) {
      const float y = std::min(std::max(row[c] * inv, -32767.0f), 32767.0f);
      const int code = int(std::nearbyint(y));
      q16[int64_t(r) * hd + c] = int16_t(code);
      sum += code;
    }
    q_sum[r] = sum;
  }
}

void PackInt4Keys(const uint8_t* rec, int64_t rec_bytes, int scale_at, int codes_at, int n, int hd, int16_t* codes,
                  int n_pad, float* ks) {
  // A byte holds dims 2i (low nibble) and 2i + 1: one 32-bit word of the packed layout.
  static const auto kWords = [] {
    std::array<uint32_t, 256> w{};
    for (uint32_t b = 0; b < 256; ++b) w[b] = (b & 0x0f) | ((b >> 4) << 16);
    return w;
  }();
  const int pairs = hd / 2;
  uint32_t* out = reinterpret_cast<uint32_t*>(codes);
  int j = 0;
  if (pairs % 4 == 0 && int64_t(rec_bytes) * 7 <= INT32_MAX) {
    // Eight keys at a time: four code bytes of each (one gather), each byte to its word, eight
    // words of one pair row stored together.
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(rec_bytes)));
    const __m256i low4 = _mm256_set1_epi32(0x0f);
    for (; j + 8 <= n; j += 8) {
      const uint8_t* base = rec + j * rec_bytes + codes_at;
      for (int p = 0; p < pairs; p += 4) {
        const __m256i w = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base + p), at, 1);
        for (int b = 0; b < 4; ++b) {
          const __m256i byte = _mm256_and_si256(_mm256_srli_epi32(w, 8 * b), _mm256_set1_epi32(0xff));
          const __m256i word =
              _mm256_or_si256(_mm256_and_si256(byte, low4), _mm256_slli_epi32(_mm256_srli_epi32(byte, 4), 16));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + int64_t(p + b) * n_pad + j), word);
        }
      }
      for (int x = 0; x < 8; ++x) {
        f16_t s16;
        std::memcpy(&s16, rec + (j + x) * rec_bytes + scale_at, 2);
        ks[j + x] = Fp16ToFp32(s16);
      }
    }
  }
  for (; j < n; ++j) {
    const uint8_t* r = rec + j * rec_bytes;
    f16_t s16;
    std::memcpy(&s16, r + scale_at, 2);  // records are only byte-aligned
    ks[j] = Fp16ToFp32(s16);
    const uint8_t* c = r + codes_at;
    for (int p = 0; p < pairs; ++p) out[int64_t(p) * n_pad + j] = kWords[c[p]];
  }
  for (int p = 0; p < pairs; ++p) std::fill(out + int64_t(p) * n_pad + n, out + int64_t(p + 1) * n_pad, 0u);
  std::fill(ks + n, ks + n_pad, 0.0f);
}

namespace {

// The codes' sum minus the keys' + 8, to float, times both scales: the one float step every path
// takes in this order.
inline float ScoreOf(int32_t dot, int32_t q_sum, float q_scale, float k_scale) {
  return float(dot - 8 * q_sum) * (q_scale * k_scale);
}

void ScalarScores(const int16_t* q16, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                  const int16_t* codes, int n_pad, const float* ks, float* s, int ld) {
  for (int r = 0; r < rows; ++r) {
    const int16_t* q = q16 + int64_t(r) * hd;
    for (int j = 0; j < n_pad; ++j) {
      int32_t dot = 0;
      for (int c = 0; c < hd; ++c) dot += int32_t(q[c]) * codes[(int64_t(c / 2) * n_pad + j) * 2 + c % 2];
      s[int64_t(r) * ld + j] = ScoreOf(dot, q_sum[r], q_scale[r], ks[j]);
    }
  }
}

// AVX2: RB query rows x 16 keys per step; per pair of dims one vpmaddwd per 8 keys.
template <int RB>
void Avx2Rows(const int16_t* q16, const float* q_scale, const int32_t* q_sum, int hd, const int16_t* codes, int n_pad,
              const float* ks, float* s, int ld) {
  for (int j = 0; j < n_pad; j += 16) {
    __m256i acc[RB][2];
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const int16_t* kc = codes + int64_t(j) * 2;
    for (int c = 0; c < hd; c += 2, kc += int64_t(n_pad) * 2) {
      const __m256i k0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kc));
      const __m256i k1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kc + 16));
      for (int r = 0; r < RB; ++r) {
        int32_t word;
        std::memcpy(&word, q16 + int64_t(r) * hd + c, 4);
        const __m256i b = _mm256_set1_epi32(word);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(k0, b));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(k1, b));
      }
    }
    const __m256 ks0 = _mm256_loadu_ps(ks + j), ks1 = _mm256_loadu_ps(ks + j + 8);
    for (int r = 0; r < RB; ++r) {
      const __m256i corr = _mm256_set1_epi32(8 * q_sum[r]);
      const __m256 qs = _mm256_set1_ps(q_scale[r]);
      float* out = s + int64_t(r) * ld + j;
      _mm256_storeu_ps(out,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][0], corr)), _mm256_mul_ps(qs, ks0)));
      _mm256_storeu_ps(out + 8,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][1], corr)), _mm256_mul_ps(qs, ks1)));
    }
  }
}

void Avx2Scores(const int16_t* q16, const float* q_scale, const int32_t* q_sum, int rows, int hd, const int16_t* codes,
                int n_pad, const float* ks, float* s, int ld) {
  // 12 accumulators, two key vectors and a broadcast of the 16 registers.
  ForRowBlocks<6>(rows, [&]<int RB>(int r) {
    Avx2Rows<RB>(q16 + int64_t(r) * hd, q_scale + r, q_sum + r, hd, codes, n_pad, ks, s + int64_t(r) * ld, ld);
  });
}

}  // namespace

void Int4KeyScores(KernelPath path, const int16_t* q16, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                   const int16_t* codes, int n_pad, const float* ks, float* s, int ld) {
  switch (path) {
    case KernelPath::kAvx512: return Int4KeyScoresAvx512(q16, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
    case KernelPath::kAvx2: return Avx2Scores(q16, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
    case KernelPath::kScalar: return ScalarScores(q16, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
  }
}

}  // namespace impress::quant
