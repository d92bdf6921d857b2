// The AVX2 path (+FMA, F16C: the x86-64-v3 baseline the project compiles for). Integer dots use
// vpmaddubsw + vpmaddwd; every caller keeps a pair of u8 * s8 products below 2^15, so the
// saturating vpmaddubsw is exact.
#include <immintrin.h>

#include "engine/quant/block-formats.h"

namespace impress::quant {
namespace {

inline __m256i DotU8I8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Q8_0 is signed * signed: |w| against a with w's sign moved onto a (|w| <= 128, |a| <= 127, so
// a pair stays below 2^15).
inline __m256i LanesQ8_0(const BlockQ8_0& w, const ActBlock32& a) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
  return DotU8I8(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(av, wv));
}

}  // namespace
}  // namespace impress::quant

#include "engine/quant/kernels-x86-inl.h"

namespace impress::quant {

namespace {

// The 4/5-bit 32-element types: rows grouped by four for GEMV (1.1x on Q4_1 from cache or
// memory). Q8_0 and the K-quants keep the two-accumulator row dot, which was as fast or faster.
template <class T, int kGroup>
void SetRows(KernelTable& t, int slot) {
  t.dot[slot] = DotRowsSimd<T>;
  t.rows[slot] = RowsSimd<T, kGroup>;
}

KernelTable MakeAvx2Table() {
  KernelTable t = MakeX86Table(DotHalf256<LoadF16x8, LoadF16x1>, DotHalf256<LoadBF16x8, LoadBF16x1>);
  SetRows<SimdQ4_0, 4>(t, kSlotQ4_0);
  SetRows<SimdQ4_1, 4>(t, kSlotQ4_1);
  SetRows<SimdQ5_0, 4>(t, kSlotQ5_0);
  SetRows<SimdQ5_1, 4>(t, kSlotQ5_1);
  return t;
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = MakeAvx2Table();
  return table;
}

}  // namespace impress::quant
