// Attention scores of a few dozen query rows against many keys with int8 dot products: the probe's
// and the fallback's importance only rank tokens, and int8 codes let AVX-512 VNNI do four
// multiply-adds per lane where fp32 does one. Values never take this path.
//
// Each key is quantized symmetrically on its own (scale = absmax / 127, codes in [-127, 127]); each
// query row likewise, its codes stored as code + 128 (unsigned, as vpdpbusd takes them). A score is
//   s[r][j] = float(sum_c q[r][c] * k[j][c]) * (q_scale[r] * k_scale[j])
// with the integer sum exact on every path, so every path gives the same floats.
//
// Keys are packed for the kernel in blocks of four dims: codes[(c / 4) * n_pad + j][c % 4], n_pad
// a multiple of kKeyScoreCols; columns j >= n have zero codes, scales and sums.
#pragma once

#include <cstdint>

#include "base/fp16.h"
#include "engine/quant/quant-kernels.h"

namespace impress::quant {

inline constexpr int kKeyScoreCols = 32;

inline int KeyScorePad(int n) { return (n + kKeyScoreCols - 1) / kKeyScoreCols * kKeyScoreCols; }

// True when `path` has a key-score kernel worth taking over fp32 tiles (AVX-512 VNNI). The scalar
// functions below always exist: they are the reference the fast ones are tested against.
bool HasFastKeyScores(KernelPath path);

// Query rows (rows x hd floats, hd % 4 == 0) to unsigned codes (rows x hd) and scales.
void QuantizeQueriesInt8(const float* q, int rows, int hd, uint8_t* q_u8, float* q_scale);

// Keys j in [0, n) (row j at k + j * stride, fp16) into packed columns [col0, col0 + n) of codes
// (laid out for n_pad columns); scale[j] and sum[j] (the key's codes summed) for each of them.
// Padding columns are the caller's to zero.
void PackKeysInt8(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, int8_t* codes, int n_pad, int col0,
                  float* scale, int32_t* sum);

// s[r * ld + j] for r < rows, j < n_pad (ld >= n_pad; padded columns score 0).
void KeyScoresInt8(KernelPath path, const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes,
                   int n_pad, const float* k_scale, const int32_t* k_sum, float* s, int ld);

// The AVX-512 path (key-scores-avx512.cpp); called only where HasFastKeyScores(kAvx512).
void PackKeysInt8Avx512(const f16_t* k, int64_t stride, int n, int hd, int8_t* codes, int n_pad, int col0, float* scale,
                        int32_t* sum);
void KeyScoresInt8Avx512(const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes, int n_pad,
                         const float* k_scale, const int32_t* k_sum, float* s, int ld);

}  // namespace impress::quant
