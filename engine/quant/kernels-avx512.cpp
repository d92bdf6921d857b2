// The AVX-512 path (F, BW, VL, DQ + VNNI). This file alone is compiled with those instruction
// sets (CMakeLists.txt); it runs only after CPUID said the CPU has them (quant-kernels.cpp).
// Integer dots use vpdpbusd, which does not saturate; F16/BF16 rows use 16-wide vectors.
// GCC 12's AVX-512 intrinsics fill unused lanes with a self-initialised `__Y` and then warn about
// it once inlined (a compiler bug fixed in GCC 13); nothing of ours is uninitialised.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "engine/quant/block-formats.h"

namespace impress::quant {
namespace {

inline __m256i DotU8I8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

// Q8_0 is signed * signed: vpdpbusd wants unsigned weights, so w + 128 (w xor 0x80) against a,
// then -128 * sum(a) into lane 0.
inline __m256i LanesQ8_0(const BlockQ8_0& w, const ActBlock32& a) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
  const __m256i lanes = DotU8I8(_mm256_xor_si256(wv, _mm256_set1_epi8(int8_t(0x80))), av);
  return _mm256_add_epi32(lanes, _mm256_setr_epi32(-128 * a.sum, 0, 0, 0, 0, 0, 0, 0));
}

}  // namespace
}  // namespace impress::quant

#include "engine/quant/kernels-x86-inl.h"

namespace impress::quant {
namespace {

inline __m512 LoadF16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 LoadBF16x16(const uint8_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// F16/BF16 rows . fp32 on 16-wide vectors, four accumulators; the tail goes through the 8-wide code.
template <__m512 (*Load16)(const uint8_t*), __m256 (*Load8)(const uint8_t*), float (*Load1)(const uint8_t*)>
float DotHalf512(const uint8_t* w, const void* xv, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __builtin_prefetch(w + 2 * i + kDotAhead, 0, 2);  // as PrefetchBlock: the weights ahead, into L2
    __builtin_prefetch(w + 2 * i + kDotAhead + 64, 0, 2);
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_fmadd_ps(Load16(w + 2 * (i + 16 * k)), _mm512_loadu_ps(x + i + 16 * k), acc[k]);
    }
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  const float head = HsumF32(_mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1)));
  return head + DotHalf256<Load8, Load1>(w + 2 * i, x + i, n - i);
}

// ---- multi-row GEMV for the 32-element block types ----------------------------------------
//
// Two blocks fill one 512-bit vector (lanes 0..7: block 2p, lanes 8..15: block 2p + 1; Q4_0/Q4_1 interleave them, see
// PairQ4). Each step loads the activation pair once and multiplies it with the same pair of blocks of up to kRows
// weight rows (4, or 1 where a type says grouping does not pay); a row keeps one fp32 accumulator (plus one for a min
// term) and is summed horizontally once at the end. Integer parts are the scalar ones: offsets (-8 of Q4_0, -16 of
// Q5_0, the +128 that makes Q8_0 unsigned for vpdpbusd) are folded into the int32 lanes through
// the activation block sums, as the 256-bit code does.

// The 4-bit values of two Q4/Q5 blocks in element order (low nibbles, then high nibbles).
inline __m512i Nibbles64(const uint8_t* q0, const uint8_t* q1) {
  const __m256i q =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)), 1);
  const __m512i z = _mm512_castsi256_si512(q);
  const __m512i dup = _mm512_shuffle_i64x2(z, z, 0x50);  // 128-bit lanes: q0, q0, q1, q1
  const __m512i both = _mm512_mask_blend_epi64(0xcc, dup, _mm512_srli_epi16(dup, 4));
  return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
}

inline __m512i Join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// Per type: the unsigned byte values of a pair of blocks, the offset subtracted from them, and
// whether a min term m * sum(x) follows (Q4_1/Q5_1: m is the half after d).
struct PairQ8_0 {
  using W = BlockQ8_0;
  static constexpr int kOffset = 128;
  static constexpr bool kMin = false;
  // One row at a time: four interleaved streams of 68-byte pairs ran at half speed on a
  // matrix larger than L2 (the output head), where one sequential stream keeps the prefetchers
  // ahead. The 40..48-byte pairs of the 4/5-bit types gain from grouping at every size.
  static constexpr bool kGroup4 = false;
  static constexpr bool kSplit = false;
  static __m512i Quants(const W& b0, const W& b1) {
    return _mm512_xor_si512(Join256(LoadBytes32(b0.qs), LoadBytes32(b1.qs)), _mm512_set1_epi8(int8_t(0x80)));
  }
};

template <class Blk, bool kHasQh, int kOff>
struct PairNibbles {
  using W = Blk;
  static constexpr int kOffset = kOff;
  static constexpr bool kMin = kOff == 0;
  static constexpr bool kGroup4 = true;
  static constexpr bool kSplit = false;
  static __m512i Quants(const W& b0, const W& b1) {
    const __m512i q = Nibbles64(b0.qs, b1.qs);
    if constexpr (kHasQh) {
      const __mmask64 fifth = uint64_t(LoadQh32(b0.qh)) | uint64_t(LoadQh32(b1.qh)) << 32;
      return _mm512_or_si512(q, _mm512_maskz_mov_epi8(fifth, _mm512_set1_epi8(16)));
    } else {
      return q;
    }
  }
};
// Q4_0/Q4_1 without a shuffle across the whole vector: the two blocks' 16 quant bytes side by
// side in 256 bits and that shifted right by 4 as the upper half, so that 128-bit lanes hold
// elements 0..15 of block 0, of block 1, then 16..31 of each (kSplit: the activation pair is
// permuted alike once per step, and dpbusd lanes 0-3, 8-11 are block 0's, 4-7, 12-15 block 1's).
template <class Blk, int kOff>
struct PairQ4 {
  using W = Blk;
  static constexpr int kOffset = kOff;
  static constexpr bool kMin = kOff == 0;
  static constexpr bool kGroup4 = true;
  static constexpr bool kSplit = true;
  static __m512i Quants(const W& b0, const W& b1) {
    const __m256i q =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(b1.qs), reinterpret_cast<const __m128i*>(b0.qs));
    return _mm512_and_si512(Join256(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(0x0f));
  }
};
using PairQ4_0 = PairQ4<BlockQ4_0, 8>;
using PairQ4_1 = PairQ4<BlockQ4_1, 0>;
using PairQ5_0 = PairNibbles<BlockQ5_0, true, 16>;
using PairQ5_1 = PairNibbles<BlockQ5_1, true, 0>;

inline int32_t Load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rows [0, kRows) of `w` . the activation blocks a[0..nb) into y[0..kRows). Every row runs the
// same instruction sequence whatever kRows is, so grouping never changes a result.
template <class T, int kRows>
void RowGroup32(const uint8_t* w, int64_t row_bytes, const ActBlock32* a, int64_t nb, float* y) {
  using W = typename T::W;
  __m512 acc[kRows];
  __m128 acc_min[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc[r] = _mm512_setzero_ps();
    acc_min[r] = _mm_setzero_ps();
  }
  constexpr bool kSplit = T::kSplit;
  const __m512i pick_d = kSplit ? _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2)
                                : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  constexpr __mmask16 kLone = kSplit ? 0x0f0f : 0x00ff;                 // the lanes of a lone block
  [[maybe_unused]] constexpr __mmask16 kLane1 = kSplit ? 0x10 : 0x100;  // the first lane of block 1
  // One step: blocks ib and ib + 1 (`pair`), or block ib alone (block ib + 1's lanes masked off).
  auto step = [&](int64_t ib, bool pair) {
    const ActBlock32& a0 = a[ib];
    const ActBlock32& a1 = a[pair ? ib + 1 : ib];
    __m512i aq = Join256(LoadBytes32(a0.qs), LoadBytes32(a1.qs));
    if constexpr (kSplit) aq = _mm512_shuffle_i64x2(aq, aq, _MM_SHUFFLE(3, 1, 2, 0));
    const __m128 ad = _mm_setr_ps(a0.d, 0.0f, a1.d, 0.0f);  // against d0 and d1 of dm below
    __m512i offset = _mm512_setzero_si512();
    if constexpr (T::kOffset != 0)
      offset = _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(1, T::kOffset * a0.sum), kLane1, T::kOffset * a1.sum);
    __m128 dsum = _mm_setzero_ps();  // lanes 1 and 3: a.d * sum(a.qs), against m0 and m1
    if constexpr (T::kMin) dsum = _mm_setr_ps(0.0f, a0.d * float(a0.sum), 0.0f, pair ? a1.d * float(a1.sum) : 0.0f);
    const __mmask16 lanes_used = pair ? 0xffff : kLone;
    for (int r = 0; r < kRows; ++r) {
      const W* b = reinterpret_cast<const W*>(w + r * row_bytes) + ib;
      // The bytes a row group (or kDotAhead) ahead: a step covers at most about a line of a row.
      __builtin_prefetch(reinterpret_cast<const char*>(b) + (kRows > 1 ? kRows * row_bytes : kDotAhead), 0, 2);
      const W& b1 = pair ? b[1] : b[0];
      __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), T::Quants(b[0], b1), aq);
      // A full pair of a type without offset needs neither the subtraction nor the mask (the
      // 4-bit min types, where one vector op less per row is a tenth of the work).
      if (T::kOffset != 0 || !pair) lanes = _mm512_maskz_sub_epi32(lanes_used, lanes, offset);
      // d0, m0, d1, m1 (the m halves are other bytes for types without a min: never used then).
      // The products d * a.d are formed on four lanes, then spread over the sixteen (the same
      // roundings as multiplying the spread vectors).
      const __m128 dm = _mm_cvtph_ps(_mm_setr_epi32(Load32(&b[0]), Load32(&b1), 0, 0));
      const __m512 dw = _mm512_permutexvar_ps(pick_d, _mm512_castps128_ps512(_mm_mul_ps(dm, ad)));
      acc[r] = _mm512_fmadd_ps(dw, _mm512_cvtepi32_ps(lanes), acc[r]);
      if constexpr (T::kMin) acc_min[r] = _mm_fmadd_ps(dm, dsum, acc_min[r]);
    }
  };
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) step(ib, true);
  if (ib < nb) step(ib, false);
  for (int r = 0; r < kRows; ++r) {
    float v = _mm512_reduce_add_ps(acc[r]);
    if constexpr (T::kMin) {  // lanes 1 and 3 (0 and 2 hold d * 0)
      const __m128 m = acc_min[r];
      v += _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(m, m, 3));
    }
    y[r] = v;
  }
}

template <class T>
void Rows32(const uint8_t* w, int64_t row_bytes, int64_t n_rows, const void* x, int64_t n, float* y) {
  const auto* a = static_cast<const ActBlock32*>(x);
  const int64_t nb = n / kQK32;
  int64_t r = 0;
  for (; r + 4 <= n_rows && T::kGroup4; r += 4) RowGroup32<T, 4>(w + r * row_bytes, row_bytes, a, nb, y + r);
  for (; r < n_rows; ++r) RowGroup32<T, 1>(w + r * row_bytes, row_bytes, a, nb, y + r);
}

template <class T>
float Dot32(const uint8_t* w_row, const void* x, int64_t n) {
  float y = 0.0f;
  RowGroup32<T, 1>(w_row, 0, static_cast<const ActBlock32*>(x), n / kQK32, &y);
  return y;
}

KernelTable MakeAvx512Table() {
  KernelTable t =
      MakeX86Table(DotHalf512<LoadF16x16, LoadF16x8, LoadF16x1>, DotHalf512<LoadBF16x16, LoadBF16x8, LoadBF16x1>);
  t.dot[kSlotQ8_0] = Dot32<PairQ8_0>;
  t.dot[kSlotQ4_0] = Dot32<PairQ4_0>;
  t.dot[kSlotQ4_1] = Dot32<PairQ4_1>;
  t.dot[kSlotQ5_0] = Dot32<PairQ5_0>;
  t.dot[kSlotQ5_1] = Dot32<PairQ5_1>;
  t.rows[kSlotQ8_0] = Rows32<PairQ8_0>;
  t.rows[kSlotQ4_0] = Rows32<PairQ4_0>;
  t.rows[kSlotQ4_1] = Rows32<PairQ4_1>;
  t.rows[kSlotQ5_0] = Rows32<PairQ5_0>;
  t.rows[kSlotQ5_1] = Rows32<PairQ5_1>;
  return t;
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeAvx512Table();
  return table;
}

}  // namespace impress::quant
