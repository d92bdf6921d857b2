// Attention scores of a few dozen query rows against keys kept as int4 records (base/kv-codes.h:
// code q + 8 in [0, 15] per element, one fp16 scale per token and head), without decoding them:
// the probe ranks every token of the document with them, and the codes and their scales are
// exact, so only the query is rounded.
//
// Each query row is rounded to int16 with one scale (qs = max |q| / 32767). The keys keep their
// codes as 16-bit lanes, two dims per 32-bit word: codes[((c / 2) * n_pad + j) * 2 + c % 2]. A
// score is
//   s[r][j] = float(sum_c q16[r][c] * (code[j][c] - 8)) * (qs[r] * ks[j])
// with the integer sum exact on every path (|sum| <= 15 * 32767 * head_dim < 2^31 for head_dim <=
// 512), so every path gives the same floats; AVX-512 VNNI multiplies 32 pairs per instruction,
// AVX2 16. Against the exact dot of the unrounded query and the decoded key the error is at most
//   qs[r] / 2 * ks[j] * sum_c |code[j][c] - 8|
// plus the float rounding of the last two products (relative 2^-23 each).
#pragma once

#include <cstdint>

#include "engine/quant/quant-kernels.h"

namespace impress::quant {

inline constexpr int kCodeScoreCols = 32;

inline int CodeScorePad(int n) { return (n + kCodeScoreCols - 1) / kCodeScoreCols * kCodeScoreCols; }

// Query rows (rows x hd floats, hd even, hd <= 512) to int16 codes and one scale per row; q_sum[r]
// is row r's codes summed (the correction for the keys' + 8).
void QuantizeQueriesInt16(const float* q, int rows, int hd, int16_t* q16, float* q_scale, int32_t* q_sum);

// Keys j in [0, n) from int4 records (record j at rec + j * rec_bytes; its scale at byte
// scale_at, its hd codes at codes_at) into packed columns [0, n) of codes (laid out for n_pad
// columns) and their scales ks. Columns [n, n_pad) get zero codes and a zero scale.
void PackInt4Keys(const uint8_t* rec, int64_t rec_bytes, int scale_at, int codes_at, int n, int hd, int16_t* codes,
                  int n_pad, float* ks);

// s[r * ld + j] for r < rows, j < n_pad (ld >= n_pad; padded columns score 0).
void Int4KeyScores(KernelPath path, const int16_t* q16, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                   const int16_t* codes, int n_pad, const float* ks, float* s, int ld);

// The AVX-512 VNNI path (code-scores-avx512.cpp); called only on the kAvx512 kernel path.
void Int4KeyScoresAvx512(const int16_t* q16, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                         const int16_t* codes, int n_pad, const float* ks, float* s, int ld);

}  // namespace impress::quant
