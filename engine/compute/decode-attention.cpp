// Decode attention inner loops on AVX2 + FMA + F16C (the baseline the project compiles for).
#include "engine/compute/decode-attention.h"

#include "engine/compute/decode-kernels-inl.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

namespace {

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

// The AVX-512 twins (decode-attention-avx512.cpp), when the kernel path is AVX-512.
const bool kDecodeAvx512 = quant::ActiveKernelPath() == quant::KernelPath::kAvx512;

}  // namespace

void DecodeScores(const float* q0, int group, int hd, float scale, const f16_t* k, int64_t stride, int n, float* s,
                  int ld) {
  if (kDecodeAvx512 && hd % 16 == 0) return DecodeScoresAvx512(q0, group, hd, scale, k, stride, n, s, ld);
  if (hd % 8 != 0) return ScoresAnyDim(q0, group, hd, scale, k, stride, n, s, ld);
  DecodeScoresWith<DecodeAvx2>(q0, group, hd, scale, k, stride, n, s, ld);
}

void DecodeWeightedValues(float* const* acc, int group, int hd, const float* p, int ld, const f16_t* v, int64_t stride,
                          int n) {
  if (kDecodeAvx512 && hd % 16 == 0) return DecodeWeightedValuesAvx512(acc, group, hd, p, ld, v, stride, n);
  if (hd % 8 != 0) return WeightedValuesAnyDim(acc, group, hd, p, ld, v, stride, n);
  DecodeWeightedValuesWith<DecodeAvx2>(acc, group, hd, p, ld, v, stride, n);
}

}  // namespace impress
