// Attention scores of a few dozen query rows against a block of keys with int8 dot products: the
// probe's and the fallback's importance only rank tokens, and int8 codes let AVX-512 VNNI do four
// multiply-adds per lane where fp32 does one. Values never take this path.
//
// Keys are quantized per channel over the block (scale c = the block's largest |k_c| / 127), as
// keys have a few channels far larger than the rest: a scale per key would spend the codes of
// every channel on those. The channel scales are folded into the queries (q'_c = q_c * scale_c),
// and each query row is quantized on its own (scale = max |q'| / 127), its codes stored as
// code + 128 (unsigned, as vpdpbusd takes them). A score is
//   s[r][j] = float(sum_c q'[r][c] * k[j][c]) * q_scale[r]
// with the integer sum exact on every path, so every path gives the same floats.
//
// Keys are packed in blocks of four dims: codes[(c / 4) * n_pad + j][c % 4], n_pad a multiple of
// kKeyScoreCols; columns j >= n have zero codes and sums.
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

// amax[c] = max(amax[c], |k_j[c]|) over keys j < n (row j at k + j * stride, fp16).
void KeyChannelAbsMax(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, float* amax);

// From the channels' absmax: scale[c] = amax / 127 and inv[c] = 127 / amax (both 0 for a zero
// channel).
void KeyChannelScales(const float* amax, int hd, float* scale, float* inv);

// Query rows (rows x hd floats, hd % 4 == 0, hd <= 512) times the channel scales, to unsigned codes
// (rows x hd) and one scale per row.
void QuantizeQueriesInt8(const float* q, int rows, int hd, const float* channel_scale, uint8_t* q_u8, float* q_scale);

// Keys j in [0, n) into packed columns [col0, col0 + n) of codes (laid out for n_pad columns), with
// the channels' inverse scales; sum[j] is key j's codes summed. Padding columns are the caller's
// to zero.
void PackKeysInt8(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, const float* channel_inv,
                  int8_t* codes, int n_pad, int col0, int32_t* sum);

// s[r * ld + j] for r < rows, j < n_pad (ld >= n_pad; padded columns score 0).
void KeyScoresInt8(KernelPath path, const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes,
                   int n_pad, const int32_t* k_sum, float* s, int ld);

// The AVX-512 path (key-scores-avx512.cpp); called only where HasFastKeyScores(kAvx512).
void KeyChannelAbsMaxAvx512(const f16_t* k, int64_t stride, int n, int hd, float* amax);
void PackKeysInt8Avx512(const f16_t* k, int64_t stride, int n, int hd, const float* channel_inv, int8_t* codes,
                        int n_pad, int col0, int32_t* sum);
void KeyScoresInt8Avx512(const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes, int n_pad,
                         const int32_t* k_sum, float* s, int ld);

}  // namespace impress::quant
