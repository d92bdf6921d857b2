// Decode attention inner loops on AVX2 + FMA + F16C (the baseline the project compiles for).
#include "engine/compute/decode-attention.h"

#include <immintrin.h>

namespace impress {

namespace {

inline __m256 LoadHalf8(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// [sum(v[0]), ..., sum(v[7])]: eight horizontal sums in one tree of hadds.
inline __m256 Sum8x8(const __m256* v) {
  const __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 a = _mm256_hadd_ps(h01, h23), b = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Keys (or values) requested this many rows ahead of their use.
constexpr int kAhead = 16;

// Requests the cache lines of one row of n fp16 values.
inline void Prefetch(const f16_t* p, int n) {
  const char* b = reinterpret_cast<const char*>(p);
  for (int o = 0; o < n * 2; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}

template <int G>
void Scores(const float* q0, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s, int ld) {
  alignas(32) __m256 part[G][8];  // unreduced sums of eight keys
  const __m256 vscale = _mm256_set1_ps(scale);
  auto one_key = [&](const f16_t* kr, __m256* acc) {
    for (int x = 0; x < G; ++x) acc[x] = _mm256_setzero_ps();
    for (int c = 0; c < hd; c += 8) {
      const __m256 kv = LoadHalf8(kr + c);
      for (int x = 0; x < G; ++x) acc[x] = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + x * hd + c), kv, acc[x]);
    }
  };
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int jj = 0; jj < 8; ++jj) {
      // Keys kAhead ahead requested now: each key's few lines sit a cache-row stride apart, a
      // pattern the hardware prefetchers follow too late, and the dot of one key is a chain of
      // dependent FMAs that leaves the core little else to overlap with its loads.
      if (j + jj + kAhead < n) Prefetch(k + (j + jj + kAhead) * stride, hd);
      __m256 acc[G];
      one_key(k + (j + jj) * stride, acc);
      for (int x = 0; x < G; ++x) part[x][jj] = acc[x];
    }
    for (int x = 0; x < G; ++x) _mm256_storeu_ps(s + x * ld + j, _mm256_mul_ps(vscale, Sum8x8(part[x])));
  }
  for (; j < n; ++j) {
    __m256 acc[G];
    one_key(k + j * stride, acc);
    for (int x = 0; x < G; ++x) s[x * ld + j] = scale * Sum8(acc[x]);
  }
}

// kW vectors (8 * kW dims) of every head's sum stay in registers over the whole run of values.
template <int G, int kW>
void WeightedValues(float* const* acc, int hd, const float* p, int ld, const f16_t* v, int64_t stride, int n) {
  for (int c = 0; c < hd; c += 8 * kW) {
    __m256 sum[G][kW];
    for (int x = 0; x < G; ++x)
      for (int w = 0; w < kW; ++w) sum[x][w] = _mm256_loadu_ps(acc[x] + c + 8 * w);
    const f16_t* vr = v + c;
    for (int j = 0; j < n; ++j, vr += stride) {
      if (c == 0 && j + kAhead < n) Prefetch(v + (j + kAhead) * stride, hd);
      __m256 vv[kW];
      for (int w = 0; w < kW; ++w) vv[w] = LoadHalf8(vr + 8 * w);
      for (int x = 0; x < G; ++x) {
        const __m256 px = _mm256_broadcast_ss(p + x * ld + j);
        for (int w = 0; w < kW; ++w) sum[x][w] = _mm256_fmadd_ps(px, vv[w], sum[x][w]);
      }
    }
    for (int x = 0; x < G; ++x)
      for (int w = 0; w < kW; ++w) _mm256_storeu_ps(acc[x] + c + 8 * w, sum[x][w]);
  }
}

template <int G>
void WeightedValuesFor(float* const* acc, int hd, const float* p, int ld, const f16_t* v, int64_t stride, int n) {
  // Two vectors per head while 2 * G sums, the values and a broadcast fit the 16 registers.
  if (G <= 4 && hd % 16 == 0) {
    WeightedValues<G, 2>(acc, hd, p, ld, v, stride, n);
  } else {
    WeightedValues<G, 1>(acc, hd, p, ld, v, stride, n);
  }
}

// Scalar forms for a head size that is not whole vectors.
void ScoresAnyDim(const float* q0, int group, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s,
                  int ld) {
  for (int j = 0; j < n; ++j) {
    for (int x = 0; x < group; ++x) {
      float dot = 0;
      for (int c = 0; c < hd; ++c) dot += q0[x * hd + c] * Fp16ToFp32(k[j * stride + c]);
      s[x * ld + j] = scale * dot;
    }
  }
}

void WeightedValuesAnyDim(float* const* acc, int group, int hd, const float* p, int ld, const f16_t* v, int64_t stride,
                          int n) {
  for (int j = 0; j < n; ++j)
    for (int x = 0; x < group; ++x)
      for (int c = 0; c < hd; ++c) acc[x][c] += p[x * ld + j] * Fp16ToFp32(v[j * stride + c]);
}

}  // namespace

void DecodeScores(const float* q0, int group, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s,
                  int ld) {
  if (hd % 8 != 0) return ScoresAnyDim(q0, group, hd, scale, k, stride, n, s, ld);
  switch (group) {
    case 1: return Scores<1>(q0, hd, scale, k, stride, n, s, ld);
    case 2: return Scores<2>(q0, hd, scale, k, stride, n, s, ld);
    case 3: return Scores<3>(q0, hd, scale, k, stride, n, s, ld);
    case 4: return Scores<4>(q0, hd, scale, k, stride, n, s, ld);
    case 5: return Scores<5>(q0, hd, scale, k, stride, n, s, ld);
    case 6: return Scores<6>(q0, hd, scale, k, stride, n, s, ld);
    case 7: return Scores<7>(q0, hd, scale, k, stride, n, s, ld);
    default: return Scores<8>(q0, hd, scale, k, stride, n, s, ld);
  }
}

void DecodeWeightedValues(float* const* acc, int group, int hd, const float* p, int ld, const f16_t* v, int64_t stride,
                          int n) {
  if (hd % 8 != 0) return WeightedValuesAnyDim(acc, group, hd, p, ld, v, stride, n);
  switch (group) {
    case 1: return WeightedValuesFor<1>(acc, hd, p, ld, v, stride, n);
    case 2: return WeightedValuesFor<2>(acc, hd, p, ld, v, stride, n);
    case 3: return WeightedValuesFor<3>(acc, hd, p, ld, v, stride, n);
    case 4: return WeightedValuesFor<4>(acc, hd, p, ld, v, stride, n);
    case 5: return WeightedValuesFor<5>(acc, hd, p, ld, v, stride, n);
    case 6: return WeightedValuesFor<6>(acc, hd, p, ld, v, stride, n);
    case 7: return WeightedValuesFor<7>(acc, hd, p, ld, v, stride, n);
    default: return WeightedValuesFor<8>(acc, hd, p, ld, v, stride, n);
  }
}

}  // namespace impress
