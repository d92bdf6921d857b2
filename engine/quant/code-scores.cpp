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

namespace {

// Where dim c of a query row goes among its code bytes (code-scores.h: word 2 * (c / 8) + c % 2,
// byte (c % 8) / 2 of it).
inline int CodeByte(int c) { return (2 * (c / 8) + c % 2) * 4 + (c % 8) / 2; }

}  // namespace

void QuantizeQueriesForCodes(const float* q, int rows, int hd, int8_t* q8, float* q_scale, int32_t* q_sum) {
  const int stride = 4 * CodeWords(hd);
  for (int r = 0; r < rows; ++r) {
    const float* row = q + int64_t(r) * hd;
    int8_t* out = q8 + int64_t(r) * stride;
    std::memset(out, 0, size_t(stride));
    float amax = 0;
    for (int c = 0; c < hd; ++c) amax = std::max(amax, std::fabs(row[c]));
    const bool live = amax > 0.0f;
    q_scale[r] = live ? amax / 127.0f : 0.0f;
    const float inv = live ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int c = 0; c < hd; ++c) {
      const float y = std::min(std::max(row[c] * inv, -127.0f), 127.0f);
      const int code = int(std::nearbyint(y));
      out[CodeByte(c)] = int8_t(code);
      sum += code;
    }
    q_sum[r] = sum;
  }
}

void PackInt4Keys(const uint8_t* rec, int64_t rec_bytes, int scale_at, int codes_at, int n, int hd, uint8_t* codes,
                  int n_pad, float* ks) {
  const int words = CodeWords(hd);
  auto word_at = [&](int w, int j) { return codes + (int64_t(w) * n_pad + j) * 4; };
  int j = 0;
  if (hd % 8 == 0 && int64_t(rec_bytes) * 7 <= INT32_MAX) {
    // Eight keys at a time: four code bytes of each (one gather) are its two words, the low
    // nibbles and the high ones.
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(rec_bytes)));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (; j + 8 <= n; j += 8) {
      const uint8_t* base = rec + j * rec_bytes + codes_at;
      for (int g = 0; g < hd / 8; ++g) {
        const __m256i w = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base + 4 * g), at, 1);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(word_at(2 * g, j)), _mm256_and_si256(w, low4));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(word_at(2 * g + 1, j)),
                            _mm256_and_si256(_mm256_srli_epi16(w, 4), low4));
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
    for (int w = 0; w < words; ++w) std::memset(word_at(w, j), 0, 4);  // dims past hd stay zero
    const uint8_t* c = r + codes_at;
    for (int d = 0; d < hd; ++d) {
      const int code = d % 2 ? c[d / 2] >> 4 : c[d / 2] & 0x0f;
      word_at(2 * (d / 8) + d % 2, j)[(d % 8) / 2] = uint8_t(code);
    }
  }
  for (int w = 0; w < words; ++w) std::memset(word_at(w, n), 0, size_t(n_pad - n) * 4);
  std::fill(ks + n, ks + n_pad, 0.0f);
}

namespace {

// The codes' sum minus the keys' + 8, to float, times both scales: the one float step every path
// takes in this order.
inline float ScoreOf(int32_t dot, int32_t q_sum, float q_scale, float k_scale) {
  return float(dot - 8 * q_sum) * (q_scale * k_scale);
}

void ScalarScores(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd, const uint8_t* codes,
                  int n_pad, const float* ks, float* s, int ld) {
  const int words = CodeWords(hd);
  for (int r = 0; r < rows; ++r) {
    const int8_t* q = q8 + int64_t(r) * 4 * words;
    for (int j = 0; j < n_pad; ++j) {
      int32_t dot = 0;
      for (int w = 0; w < words; ++w)
        for (int b = 0; b < 4; ++b) dot += int32_t(q[w * 4 + b]) * int32_t(codes[(int64_t(w) * n_pad + j) * 4 + b]);
      s[int64_t(r) * ld + j] = ScoreOf(dot, q_sum[r], q_scale[r], ks[j]);
    }
  }
}

// AVX2: RB query rows x 16 keys per step; per word (four dims) one vpmaddubsw and one vpmaddwd per
// 8 keys.
template <int RB>
void Avx2Rows(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int words, const uint8_t* codes, int n_pad,
              const float* ks, float* s, int ld) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int j = 0; j < n_pad; j += 16) {
    __m256i acc[RB][2];
    for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const uint8_t* kc = codes + int64_t(j) * 4;
    for (int w = 0; w < words; ++w, kc += int64_t(n_pad) * 4) {
      const __m256i k0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kc));
      const __m256i k1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kc + 32));
      for (int r = 0; r < RB; ++r) {
        int32_t word;
        std::memcpy(&word, q8 + int64_t(r) * 4 * words + 4 * w, 4);
        const __m256i b = _mm256_set1_epi32(word);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(k0, b), ones));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(k1, b), ones));
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

void Avx2Scores(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd, const uint8_t* codes,
                int n_pad, const float* ks, float* s, int ld) {
  // 12 accumulators, two key vectors, a broadcast and the ones of the 16 registers.
  const int words = CodeWords(hd);
  ForRowBlocks<6>(rows, [&]<int RB>(int r) {
    Avx2Rows<RB>(q8 + int64_t(r) * 4 * words, q_scale + r, q_sum + r, words, codes, n_pad, ks, s + int64_t(r) * ld, ld);
  });
}

}  // namespace

void Int4KeyScores(KernelPath path, const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                   const uint8_t* codes, int n_pad, const float* ks, float* s, int ld) {
  switch (path) {
    case KernelPath::kAvx512: return Int4KeyScoresAvx512(q8, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
    case KernelPath::kAvx2: return Avx2Scores(q8, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
    case KernelPath::kScalar: return ScalarScores(q8, q_scale, q_sum, rows, hd, codes, n_pad, ks, s, ld);
  }
}

}  // namespace impress::quant
