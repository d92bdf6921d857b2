// Internal to engine/quant: the x86 SIMD dot products on 256-bit vectors, shared by the AVX2 and
// the AVX-512 path. Each includer compiles it for its own instruction set, so everything here has
// internal linkage (an anonymous namespace: the two copies must never be merged by the linker).
//
// Nothing here may call an inline function with external linkage: the linker keeps one copy of
// such a function, and the copy compiled for AVX-512 could then run on a CPU without it.
//
// The includer defines, before including, in an anonymous namespace inside impress::quant:
//   __m256i DotU8I8(__m256i u, __m256i s);  // lane k = sum of u[b] * s[b], b = 4k..4k+3
//                                           // (u unsigned, s signed bytes; exact here: every
//                                           // caller keeps u * s pair sums below 2^15)
//   __m256i LanesQ8_0(const BlockQ8_0& w, const ActBlock32& a);  // lanes summing to sum w.qs * a.qs
//
// A block's integer parts are 8 int32 lanes whose sum is the scalar path's integer (offsets such
// as the -8 of Q4_0 are folded in through the activation block sums, into lane 0); the lanes are
// converted to fp32 and multiplied by the block's scale once per block.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/quant/kernel-table.h"

namespace impress::quant {
namespace {

// fp16 -> fp32 with internal linkage (not base/fp16.h's inline function: see the file comment).
inline float HalfToFloat(f16_t h) { return _cvtsh_ss(h); }

inline int32_t HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline float HsumF32(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Adds an integer to lane 0.
inline __m256i AddToLane0(__m256i v, int32_t c) {
  return _mm256_add_epi32(v, _mm256_setr_epi32(c, 0, 0, 0, 0, 0, 0, 0));
}

inline __m256i LoadBytes32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The 32 nibbles of a Q4_0/Q4_1/Q5_0/Q5_1 block as bytes in element order.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Byte i = 16 when bit i of qh is set, else 0 (the fifth bit of Q5_0/Q5_1 element i).
inline __m256i FifthBits32(uint32_t qh) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int32_t(qh)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// ---- per type: Lanes (integer parts), AddExtra (fp32 min term) ----
//
// The row loops scale each block's lanes by its two fp16/fp32 scales (d of the weights times d of
// the activations); every type's block has a `d`.
// AddExtra adds the min term to an accumulator with one explicit fused multiply-add. Written as
// `acc += m * s`, the compiler (-ffp-contract=fast) fuses it in some inlined copies and not in
// others, and a row's GEMV value then depended on the group it was computed in.

// Types whose fp32 part is the lanes times dw * da and nothing else.
template <class Blk, class Act>
struct SimdNoExtra {
  using W = Blk;
  using A = Act;
  static constexpr int kParts = 1;
  static float AddExtra(float acc, const W&, const A&, int32_t) { return acc; }
};

// Q4_0/Q5_0 (q - offset) and Q4_1/Q5_1 (q, plus m times the activation sum): 4 or 5 bits.
template <class Blk, bool kHasQh, int kOffset>
struct SimdNibbles32 : SimdNoExtra<Blk, ActBlock32> {
  static __m256i Lanes(const Blk& w, const ActBlock32& a, int32_t*) {
    __m256i q = Nibbles32(w.qs);
    if constexpr (kHasQh) q = _mm256_or_si256(q, FifthBits32(LoadQh32(w.qh)));
    const __m256i lanes = DotU8I8(q, LoadBytes32(a.qs));
    return kOffset ? AddToLane0(lanes, -kOffset * a.sum) : lanes;  // sum (q - offset) a
  }
  static float AddExtra(float acc, const Blk& w, const ActBlock32& a, int32_t) {
    if constexpr (kOffset == 0) return std::fma(HalfToFloat(w.m), a.d * float(a.sum), acc);
    return acc;
  }
};

struct SimdQ8_0 : SimdNoExtra<BlockQ8_0, ActBlock32> {
  static __m256i Lanes(const W& w, const A& a, int32_t*) { return LanesQ8_0(w, a); }
};
using SimdQ4_0 = SimdNibbles32<BlockQ4_0, false, 8>;
using SimdQ4_1 = SimdNibbles32<BlockQ4_1, false, 0>;
using SimdQ5_0 = SimdNibbles32<BlockQ5_0, true, 16>;
using SimdQ5_1 = SimdNibbles32<BlockQ5_1, true, 0>;

// [sum(v[0]), ..., sum(v[7])] of eight int32 vectors, one tree of hadds.
inline __m256i SumI32x8(const __m256i* v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// The eight 6-bit scales (low word) and mins (high word) of a Q4_K/Q5_K block, one per byte, as
// UnpackScaleMinK4 defines them, on 32-bit words of the 12 bytes: word 0 holds scales 0..3 and
// the top bits of scales 4..7, word 1 mins 0..3 and the top bits of mins 4..7, word 2 the low
// nibbles of scales 4..7 (low) and mins 4..7 (high).
inline void UnpackScalesMinsK4(const uint8_t* s, uint64_t* scales, uint64_t* mins) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  *scales = uint64_t(w[0] & low6) | uint64_t((w[2] & low4) | (((w[0] >> 6) & low2) << 4)) << 32;
  *mins = uint64_t(w[1] & low6) | uint64_t(((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)) << 32;
}

// Q4_K/Q5_K: I1 in lanes; I2 = sum_j m_j * (bsums of sub-block j) in *second. The eight
// sub-block sums are reduced to one vector and multiplied by the eight scales at once.
template <class W, bool kHasQh>
__m256i LanesK4or5(const W& w, const ActBlock256& a, int32_t* second) {
  uint64_t scales = 0, mins = 0;
  UnpackScalesMinsK4(w.scales, &scales, &mins);
  // m_j against bsums 2j and 2j + 1: each min byte twice, widened to int16.
  const __m128i mins8 = _mm_cvtsi64_si128(int64_t(mins));
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins8, mins8));
  *second = HsumI32(_mm256_madd_epi16(mins16, LoadBytes32(a.bsums)));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (kHasQh) qh = LoadBytes32(w.qh);
  __m256i sub[8];  // per sub-block lanes, unscaled
  for (int i = 0; i < 4; ++i) {
    const __m256i q = LoadBytes32(w.qs + 32 * i);
    __m256i lo = _mm256_and_si256(q, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if constexpr (kHasQh) {  // bit j of qh[l] -> bit 4 of sub-block j
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i + 1), one), 4));
    }
    sub[2 * i] = DotU8I8(lo, LoadBytes32(a.qs + 64 * i));
    sub[2 * i + 1] = DotU8I8(hi, LoadBytes32(a.qs + 64 * i + 32));
  }
  return _mm256_mullo_epi32(SumI32x8(sub), _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(scales))));
}

template <class Blk, bool kHasQh>
struct SimdK4or5 {
  using W = Blk;
  using A = ActBlock256;
  static constexpr int kParts = 2;
  static __m256i Lanes(const W& w, const A& a, int32_t* second) { return LanesK4or5<W, kHasQh>(w, a, second); }
  static float AddExtra(float acc, const W& w, const A& a, int32_t i2) {
    return std::fma(-(HalfToFloat(w.dmin) * a.d), float(i2), acc);
  }
};
using SimdQ4_K = SimdK4or5<BlockQ4_K, false>;
using SimdQ5_K = SimdK4or5<BlockQ5_K, true>;

// Q6_K: unsigned q (0..63) against a, per-16 scales, then -32 * sum_k scale_k * bsums_k.
struct SimdQ6_K : SimdNoExtra<BlockQ6_K, ActBlock256> {
  static __m256i Lanes(const W& w, const A& a, int32_t*) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = LoadBytes32(w.ql + 64 * h), ql1 = LoadBytes32(w.ql + 64 * h + 32);
      const __m256i qh = LoadBytes32(w.qh + 32 * h);
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int c = 0; c < 4; ++c) {
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), two), 4);
        const __m256i q = _mm256_or_si256(lows[c], high);
        // Pairs q * a as int16 (63 * 127 * 2 < 2^15: exact on every path), then each pair sum
        // times its 16 elements' scale, added in pairs to int32 (no 32-bit multiply).
        const __m256i pairs = _mm256_maddubs_epi16(q, LoadBytes32(a.qs + 128 * h + 32 * c));
        const int8_t* s = w.scales + 8 * h + 2 * c;  // int16 lanes 0..7: elements 0..15, 8..15: 16..31
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scale));
      }
    }
    // -32 * sum_k scale_k * bsums_k, spread over the lanes: scales widened to int16 against the
    // 16 activation sums in one multiply-add.
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
    return _mm256_sub_epi32(acc, _mm256_slli_epi32(_mm256_madd_epi16(scales16, LoadBytes32(a.bsums)), 5));
  }
};

// The weight bytes `ahead` past a block, asked of memory into L2 while this block computes. A
// decode step streams the whole model once, and on two cores the hardware's prefetcher alone kept
// too few lines in flight: the GEMV read memory at about half the rate the cores can.
template <class W>
inline void PrefetchBlock(const W& b, int64_t ahead) {
  const char* p = reinterpret_cast<const char*>(&b) + ahead;
  for (size_t o = 0; o < sizeof(W); o += 64) __builtin_prefetch(p + o, 0, 2);
}
inline constexpr int64_t kDotAhead = 2048;

template <class T>
float DotSimd(const uint8_t* w_row, const void* x, int64_t n) {
  const auto* w = reinterpret_cast<const typename T::W*>(w_row);
  const auto* a = static_cast<const typename T::A*>(x);
  const int64_t nb = n / int64_t(sizeof(a->qs));
  // Two blocks per step into two accumulators: one chain of dependent multiply-adds would bound
  // the loop by the FMA latency rather than by the decoding work.
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  float extra[2] = {0.0f, 0.0f};
  auto block = [&](int64_t ib, int k) {
    PrefetchBlock(w[ib], kDotAhead);
    int32_t second = 0;
    const __m256i lanes = T::Lanes(w[ib], a[ib], &second);
    const float d = HalfToFloat(w[ib].d) * a[ib].d;
    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc[k]);
    extra[k] = T::AddExtra(extra[k], w[ib], a[ib], second);
  };
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    block(ib, 0);
    block(ib + 1, 1);
  }
  if (ib < nb) block(ib, 0);
  return HsumF32(_mm256_add_ps(acc[0], acc[1])) + (extra[0] + extra[1]);
}

// GEMV over kRows rows at once: each activation block is loaded once for all of them, one
// accumulator per row, one horizontal sum per row. Every row runs the same sequence whatever
// kRows is, so a row's value never depends on the grouping (DotRowsSimd is kRows = 1).
template <class T, int kRows>
void RowGroupSimd(const uint8_t* w, int64_t row_bytes, const void* x, int64_t n, float* y) {
  const auto* a = static_cast<const typename T::A*>(x);
  const int64_t nb = n / int64_t(sizeof(a->qs));
  __m256 acc[kRows];
  float extra[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc[r] = _mm256_setzero_ps();
    extra[r] = 0.0f;
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    for (int r = 0; r < kRows; ++r) {
      const auto& b = reinterpret_cast<const typename T::W*>(w + r * row_bytes)[ib];
      PrefetchBlock(b, kRows * row_bytes > 0 ? kRows * row_bytes : kDotAhead);  // the next group's rows
      int32_t second = 0;
      const __m256i lanes = T::Lanes(b, a[ib], &second);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(HalfToFloat(b.d) * a[ib].d), _mm256_cvtepi32_ps(lanes), acc[r]);
      extra[r] = T::AddExtra(extra[r], b, a[ib], second);
    }
  }
  for (int r = 0; r < kRows; ++r) y[r] = HsumF32(acc[r]) + extra[r];
}

template <class T>
float DotRowsSimd(const uint8_t* w_row, const void* x, int64_t n) {
  float y = 0.0f;
  RowGroupSimd<T, 1>(w_row, 0, x, n, &y);
  return y;
}

// kGroup rows at a time, the rest one by one.
template <class T, int kGroup>
void RowsSimd(const uint8_t* w, int64_t row_bytes, int64_t n_rows, const void* x, int64_t n, float* y) {
  int64_t r = 0;
  for (; r + kGroup <= n_rows; r += kGroup) RowGroupSimd<T, kGroup>(w + r * row_bytes, row_bytes, x, n, y + r);
  for (; r < n_rows; ++r) RowGroupSimd<T, 1>(w + r * row_bytes, row_bytes, x, n, y + r);
}

template <class T>
void PartsSimd(const uint8_t* w_row, const void* x, int64_t n, int32_t* parts) {
  const auto* w = reinterpret_cast<const typename T::W*>(w_row);
  const auto* a = static_cast<const typename T::A*>(x);
  const int64_t nb = n / int64_t(sizeof(a->qs));
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t second = 0;
    parts[T::kParts * ib] = HsumI32(T::Lanes(w[ib], a[ib], &second));
    if constexpr (T::kParts == 2) parts[T::kParts * ib + 1] = second;
  }
}

// F16/BF16 rows . fp32 on 8-wide vectors, four accumulators.
inline __m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 LoadBF16x8(const uint8_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

template <__m256 (*Load8)(const uint8_t*), float (*Load1)(const uint8_t*)>
float DotHalf256(const uint8_t* w, const void* xv, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __builtin_prefetch(w + 2 * i + kDotAhead, 0, 2);  // as PrefetchBlock: the weights ahead, into L2
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(Load8(w + 2 * (i + 8 * k)), _mm256_loadu_ps(x + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Load8(w + 2 * i), _mm256_loadu_ps(x + i), acc[0]);
  float tail = 0.0f;
  for (; i < n; ++i) tail += Load1(w + 2 * i) * x[i];
  return HsumF32(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
}

inline float LoadF16x1(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}
inline float LoadBF16x1(const uint8_t* p) {
  uint32_t bits = 0;
  std::memcpy(reinterpret_cast<uint8_t*>(&bits) + 2, p, 2);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The table of this instruction set, F16/BF16 entries given by the includer.
inline KernelTable MakeX86Table(KernelTable::DotFn f16, KernelTable::DotFn bf16) {
  return KernelTable{
      {f16, bf16, DotSimd<SimdQ8_0>, DotSimd<SimdQ4_0>, DotSimd<SimdQ4_1>, DotSimd<SimdQ5_0>, DotSimd<SimdQ5_1>,
       DotSimd<SimdQ4_K>, DotSimd<SimdQ5_K>, DotSimd<SimdQ6_K>},
      {nullptr, nullptr, PartsSimd<SimdQ8_0>, PartsSimd<SimdQ4_0>, PartsSimd<SimdQ4_1>, PartsSimd<SimdQ5_0>,
       PartsSimd<SimdQ5_1>, PartsSimd<SimdQ4_K>, PartsSimd<SimdQ5_K>, PartsSimd<SimdQ6_K>},
  };
}

}  // namespace
}  // namespace impress::quant
