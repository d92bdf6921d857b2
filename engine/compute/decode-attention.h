// The inner loops of decode attention on the CPU (few query rows over a long fp16 KV): the
// scores of one kv head's query heads against a run of keys, and the probability-weighted sum
// of a run of values. The CPU backend splits the keys into blocks and merges them
// (flash-decoding); these are what one block costs, so they run at the speed the KV streams in:
// each fp16 key or value is converted once for all the heads that share it, a block's scores
// leave the registers a vector of keys at a time (eight on AVX2, sixteen on AVX-512), and value
// sums stay in registers over the run (decode-kernels-inl.h).
//
// Thread contract: pure functions of their arguments; the backend calls them from its pool.
#pragma once

#include <cstdint>

#include "base/fp16.h"

namespace impress {

// s[x * ld + j] = scale * q_x . k_j for x < group, j < n, where q_x = q0 + x * head_dim (fp32)
// and k_j = k + j * stride (fp16, head_dim values). group in [1, 8]; any head_dim (vectors when a multiple of 8).
void DecodeScores(const float* q0, int group, int head_dim, float scale, const f16_t* k, int64_t stride, int n,
                  float* s, int ld);

// acc[x][c] += p[x * ld + j] * v_j[c] for x < group, j < n, c < head_dim, v_j = v + j * stride
// (fp16). group in [1, 8]; any head_dim (vectors when a multiple of 8).
void DecodeWeightedValues(float* const* acc, int group, int head_dim, const float* p, int ld, const f16_t* v,
                          int64_t stride, int n);

// The two on AVX-512 (decode-attention-avx512.cpp), for a head_dim that is a multiple of 16 on a
// CPU the kernel path says has it; the two above call them where both hold.
void DecodeScoresAvx512(const float* q0, int group, int head_dim, float scale, const f16_t* k, int64_t stride, int n,
                        float* s, int ld);
void DecodeWeightedValuesAvx512(float* const* acc, int group, int head_dim, const float* p, int ld, const f16_t* v,
                                int64_t stride, int n);

}  // namespace impress
