// The decode attention loops (decode-attention.h), written once over a vector type and
// instantiated for AVX2 (decode-attention.cpp, eight floats) and AVX-512
// (decode-attention-avx512.cpp, sixteen): each fp16 key or value is converted once for all the
// heads that share it, a block's scores leave the registers one vector of keys at a time, and the
// value sums stay in registers over the whole run.
//
// Included only by those two files, each compiled for its instruction set; everything here is
// in an unnamed namespace so the two instantiations never meet at link time.
//
// Thread contract: pure functions of their arguments.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "base/fp16.h"

namespace impress {
namespace {

struct DecodeAvx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  // Vectors of dims per head a value step keeps: G * kW sums, kW values and a broadcast within
  // the 16 registers (six heads' value sums with two: 17-18 against 25-26 ns a key with one).
  static constexpr int ValueVecs(int group) { return group <= 6 ? 2 : 1; }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V LoadHalf(const f16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V Set1(float f) { return _mm256_set1_ps(f); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  // [sum(v[0]), ..., sum(v[7])]: eight horizontal sums in one tree of hadds.
  static V SumOfEach(const V* v) {
    const __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 a = _mm256_hadd_ps(h01, h23), b = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  static float Sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#ifdef __AVX512F__
struct DecodeAvx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr int ValueVecs(int group) { return group <= 6 ? 4 : 2; }  // of 32 registers
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V LoadHalf(const f16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Set1(float f) { return _mm512_set1_ps(f); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  // [sum(v[0]), ..., sum(v[15])]: in-lane shuffles pair the keys, then fours, then the 128-bit
  // quarters are added across.
  static V SumOfEach(const V* v) {
    __m512 four[4];
    for (int i = 0; i < 4; ++i) {
      const __m512 *a = v + 4 * i, *b = a + 2;
      const __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
      const __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(b[0], b[1]), _mm512_unpackhi_ps(b[0], b[1]));
      const __m512d xd = _mm512_castps_pd(x), yd = _mm512_castps_pd(y);
      // Each quarter: partial sums of keys 4i .. 4i + 3.
      four[i] =
          _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(xd, yd)), _mm512_castpd_ps(_mm512_unpackhi_pd(xd, yd)));
    }
    const __m512 w0 =
        _mm512_add_ps(_mm512_shuffle_f32x4(four[0], four[1], 0x88), _mm512_shuffle_f32x4(four[0], four[1], 0xdd));
    const __m512 w1 =
        _mm512_add_ps(_mm512_shuffle_f32x4(four[2], four[3], 0x88), _mm512_shuffle_f32x4(four[2], four[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
  }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
};
#endif

// Keys (or values) requested this many rows ahead of their use.
constexpr int kDecodeAhead = 16;

// Requests the cache lines of one row of n fp16 values.
inline void PrefetchHalves(const f16_t* p, int n) {
  const char* b = reinterpret_cast<const char*>(p);
  for (int o = 0; o < n * 2; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}

// s[x * ld + j] = scale * q_x . k_j for G heads; head_dim a multiple of the width.
template <class T, int G>
void DecodeScoresOf(const float* q0, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s, int ld) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  auto one_key = [&](const f16_t* kr, V* acc) {
    for (int x = 0; x < G; ++x) acc[x] = T::Zero();
    for (int c = 0; c < hd; c += W) {
      const V kv = T::LoadHalf(kr + c);
      for (int x = 0; x < G; ++x) acc[x] = T::Fma(T::Load(q0 + x * hd + c), kv, acc[x]);
    }
  };
  alignas(64) V part[G][W];  // unreduced sums of W keys
  const V vscale = T::Set1(scale);
  int j = 0;
  for (; j + W <= n; j += W) {
    for (int jj = 0; jj < W; ++jj) {
      // Keys kDecodeAhead ahead requested now: each key's few lines sit a cache-row stride apart, a
      // pattern the hardware prefetchers follow too late, and the dot of one key is a chain of
      // dependent FMAs that leaves the core little else to overlap with its loads.
      if (j + jj + kDecodeAhead < n) PrefetchHalves(k + (j + jj + kDecodeAhead) * stride, hd);
      V acc[G];
      one_key(k + (j + jj) * stride, acc);
      for (int x = 0; x < G; ++x) part[x][jj] = acc[x];
    }
    for (int x = 0; x < G; ++x) T::Store(s + x * ld + j, T::Mul(vscale, T::SumOfEach(part[x])));
  }
  for (; j < n; ++j) {
    V acc[G];
    one_key(k + j * stride, acc);
    for (int x = 0; x < G; ++x) s[x * ld + j] = scale * T::Sum(acc[x]);
  }
}

// acc[x][c] += p[x * ld + j] * v_j[c]: kW vectors (W * kW dims) of every head's sum stay in
// registers over the whole run of values.
template <class T, int G, int kW>
void DecodeValueRun(float* const* acc, int hd, const float* p, int ld, const f16_t* v, int64_t stride, int n) {
  using V = typename T::V;
  constexpr int W = T::kWidth;
  for (int c = 0; c < hd; c += W * kW) {
    V sum[G][kW];
    for (int x = 0; x < G; ++x)
      for (int w = 0; w < kW; ++w) sum[x][w] = T::Load(acc[x] + c + W * w);
    const f16_t* vr = v + c;
    for (int j = 0; j < n; ++j, vr += stride) {
      if (c == 0 && j + kDecodeAhead < n) PrefetchHalves(v + (j + kDecodeAhead) * stride, hd);
      V vv[kW];
      for (int w = 0; w < kW; ++w) vv[w] = T::LoadHalf(vr + W * w);
      for (int x = 0; x < G; ++x) {
        const V px = T::Broadcast(p + x * ld + j);
        for (int w = 0; w < kW; ++w) sum[x][w] = T::Fma(px, vv[w], sum[x][w]);
      }
    }
    for (int x = 0; x < G; ++x)
      for (int w = 0; w < kW; ++w) T::Store(acc[x] + c + W * w, sum[x][w]);
  }
}

// The widest value step T allows for G heads that divides head_dim (a multiple of the width).
template <class T, int G>
void DecodeValuesOf(float* const* acc, int hd, const float* p, int ld, const f16_t* v, int64_t stride, int n) {
  constexpr int kW = T::ValueVecs(G), W = T::kWidth;
  if constexpr (kW >= 4) {
    if (hd % (4 * W) == 0) return DecodeValueRun<T, G, 4>(acc, hd, p, ld, v, stride, n);
  }
  if constexpr (kW >= 2) {
    if (hd % (2 * W) == 0) return DecodeValueRun<T, G, 2>(acc, hd, p, ld, v, stride, n);
  }
  DecodeValueRun<T, G, 1>(acc, hd, p, ld, v, stride, n);
}

// The two for a group size in [1, 8] (above 8: 8, as the callers never pass).
template <class T>
void DecodeScoresWith(const float* q0, int group, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s,
                      int ld) {
  switch (group) {
    case 1: return DecodeScoresOf<T, 1>(q0, hd, scale, k, stride, n, s, ld);
    case 2: return DecodeScoresOf<T, 2>(q0, hd, scale, k, stride, n, s, ld);
    case 3: return DecodeScoresOf<T, 3>(q0, hd, scale, k, stride, n, s, ld);
    case 4: return DecodeScoresOf<T, 4>(q0, hd, scale, k, stride, n, s, ld);
    case 5: return DecodeScoresOf<T, 5>(q0, hd, scale, k, stride, n, s, ld);
    case 6: return DecodeScoresOf<T, 6>(q0, hd, scale, k, stride, n, s, ld);
    case 7: return DecodeScoresOf<T, 7>(q0, hd, scale, k, stride, n, s, ld);
    default: return DecodeScoresOf<T, 8>(q0, hd, scale, k, stride, n, s, ld);
  }
}

template <class T>
void DecodeWeightedValuesWith(float* const* acc, int group, int hd, const float* p, int ld, const f16_t* v,
                              int64_t stride, int n) {
  switch (group) {
    case 1: return DecodeValuesOf<T, 1>(acc, hd, p, ld, v, stride, n);
    case 2: return DecodeValuesOf<T, 2>(acc, hd, p, ld, v, stride, n);
    case 3: return DecodeValuesOf<T, 3>(acc, hd, p, ld, v, stride, n);
    case 4: return DecodeValuesOf<T, 4>(acc, hd, p, ld, v, stride, n);
    case 5: return DecodeValuesOf<T, 5>(acc, hd, p, ld, v, stride, n);
    case 6: return DecodeValuesOf<T, 6>(acc, hd, p, ld, v, stride, n);
    case 7: return DecodeValuesOf<T, 7>(acc, hd, p, ld, v, stride, n);
    default: return DecodeValuesOf<T, 8>(acc, hd, p, ld, v, stride, n);
  }
}

}  // namespace
}  // namespace impress
