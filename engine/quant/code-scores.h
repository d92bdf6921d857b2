// Attention scores of a few dozen query rows against keys kept as int4 records (base/kv-codes.h:
// code q + 8 in [0, 15] per element, one fp16 scale per token and head), without decoding them:
// the probe ranks every token of the document with them, and the codes and their scales are
// exact, so only the query is rounded.
//
// Each query row is rounded to int8 with one scale (qs = max |q| / 127). The keys keep their codes
// as unsigned bytes, four dims to a 32-bit word and one word per key in a row of words: a record's
// code bytes 4g..4g+3 hold dims 8g..8g+7 (the even dim in the low nibble), and become word 2g (their
// low nibbles: dims 8g, 8g+2, 8g+4, 8g+6) and word 2g+1 (their high nibbles: the odd dims), so
//   codes[(w * n_pad + j) * 4 + b], w < CodeWords(hd) = 2 * ceil(hd / 8),
// and the query row's int8 codes are laid out the same way (dims past hd are zero). A score is
//   s[r][j] = float(sum_c q8[r][c] * code[j][c] - 8 * sum_c q8[r][c]) * (qs[r] * ks[j])
// with the integer sum exact on every path (|sum| <= 15 * 127 * 512 < 2^31), so every path gives
// the same floats; AVX-512 VNNI multiplies 64 pairs of bytes per instruction (vpdpbusd), AVX2 32
// (vpmaddubsw, whose 16-bit pair sums of at most 2 * 15 * 127 never saturate). Against the exact
// dot of the unrounded query and the decoded key the error is at most
//   qs[r] / 2 * ks[j] * sum_c |code[j][c] - 8|
// plus the float rounding of the last two products (relative 2^-23 each).
#pragma once

#include <cstdint>

#include "engine/quant/quant-kernels.h"

namespace impress::quant {

inline constexpr int kCodeScoreCols = 32;

inline int CodeScorePad(int n) { return (n + kCodeScoreCols - 1) / kCodeScoreCols * kCodeScoreCols; }
// 32-bit words of codes per key (and of a query row's codes): two per eight dims.
inline int CodeWords(int hd) { return (hd + 7) / 8 * 2; }

// Query rows (rows x hd floats, hd <= 512) to int8 codes in the layout above (4 * CodeWords(hd)
// bytes a row) and one scale per row; q_sum[r] is row r's codes summed (the correction for the
// keys' + 8).
void QuantizeQueriesForCodes(const float* q, int rows, int hd, int8_t* q8, float* q_scale, int32_t* q_sum);

// Keys j in [0, n) from int4 records (record j at rec + j * rec_bytes; its scale at byte
// scale_at, its hd codes at codes_at) into packed columns [0, n) of codes (laid out for n_pad
// columns) and their scales ks. Columns [n, n_pad) get zero codes and a zero scale.
void PackInt4Keys(const uint8_t* rec, int64_t rec_bytes, int scale_at, int codes_at, int n, int hd, uint8_t* codes,
                  int n_pad, float* ks);

// s[r * ld + j] for r < rows, j < n_pad (ld >= n_pad; padded columns score 0).
void Int4KeyScores(KernelPath path, const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                   const uint8_t* codes, int n_pad, const float* ks, float* s, int ld);

// The AVX-512 VNNI path (code-scores-avx512.cpp); called only on the kAvx512 kernel path.
void Int4KeyScoresAvx512(const int8_t* q8, const float* q_scale, const int32_t* q_sum, int rows, int hd,
                         const uint8_t* codes, int n_pad, const float* ks, float* s, int ld);

}  // namespace impress::quant
