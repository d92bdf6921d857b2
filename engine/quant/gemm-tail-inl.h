// What the small-batch GEMM's weight-lane tail tiles share (gemm-avx2.cpp, gemm-avx512.cpp): the
// AVX2 tiles' 8 x 8 transpose (the AVX-512 ones transpose 8-byte pairs with vpermt2q instead) and
// the dispatch on the tail's row count. Included only by those two files, each compiled for its
// instruction set; AVX2 instructions only, in an unnamed namespace so the two copies never meet
// at link time.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace impress::quant::gemm_internal {
namespace {

// Group g of a decoded strip's 8 rows (row r's element e at u[r * k + e]) with the quads as rows:
// wq[q] lane r = quad q (elements 32 g + 4q .. + 3) of weight row r.
inline void StripQuadsByRow(const uint8_t* u, int64_t k, int64_t g, __m256i wq[8]) {
  __m256i r[8];
  for (int x = 0; x < 8; ++x) r[x] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + x * k + 32 * g));
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  wq[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  wq[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  wq[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  wq[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  wq[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  wq[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  wq[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  wq[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// fn.template operator()<T>() for a tail of t rows, 1 <= t <= 4 (what the weight-lane tiles
// take); false, nothing run, for any other t.
template <class Fn>
bool ForTailRows(int t, Fn&& fn) {
  switch (t) {
    case 1: fn.template operator()<1>(); return true;
    case 2: fn.template operator()<2>(); return true;
    case 3: fn.template operator()<3>(); return true;
    case 4: fn.template operator()<4>(); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace impress::quant::gemm_internal
