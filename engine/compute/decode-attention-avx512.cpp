// DecodeScores and DecodeWeightedValues on AVX-512 (compiled for it; called only when the kernel
// path says the CPU has it and the head size is whole vectors of sixteen): the loops of
// decode-kernels-inl.h at sixteen floats a vector.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 intrinsics (kernels-avx512.cpp)
#if !defined(__clang__)                           // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "engine/compute/decode-attention.h"
#include "engine/compute/decode-kernels-inl.h"

namespace impress {

void DecodeScoresAvx512(const float* q0, int group, int hd, float scale, const f16_t* k, int64_t stride, int n,
                        float* s, int ld) {
  DecodeScoresWith<DecodeAvx512>(q0, group, hd, scale, k, stride, n, s, ld);
}

void DecodeWeightedValuesAvx512(float* const* acc, int group, int hd, const float* p, int ld, const f16_t* v,
                                int64_t stride, int n) {
  DecodeWeightedValuesWith<DecodeAvx512>(acc, group, hd, p, ld, v, stride, n);
}

}  // namespace impress
