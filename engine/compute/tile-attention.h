// The inner loops of attention for a few dozen query rows over a long fp16 prefix on the CPU (a
// question's new tokens over the selected KV, the probe's heads over a layer's keys): register-
// blocked GEMM tiles on fp32 copies of one block of keys or values, made once per block for all
// the rows that share them. The CPU backend splits the keys into blocks across its pool and
// merges the blocks' softmax parts (flash attention); these are what one block costs.
//
// Thread contract: pure functions of their arguments; the backend calls them from its pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/fp16.h"
#include "base/host-alloc.h"
#include "base/row-arrivals.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

// Keys per block padding: TileScores writes scores in whole groups of this many columns.
constexpr int kTileCols = 16;

// kt[c * ldk + j] = k_j[c] (fp16 -> fp32, transposed) for j < n, c < head_dim, and 0 for
// n <= j < RoundUpTile(n); k_j = k + j * stride. ldk >= RoundUpTile(n).
void TransposeKeysF32(const f16_t* k, int64_t stride, int n, int head_dim, float* kt, int ldk);

// The same from integer-coded records (base/kv-codes.h): key j is head `head` of the record at
// rec + j * rec_bytes (n_heads heads, bits 8 or 4), with the values DecodeRecordHead gives, bit for
// bit, without the halves in between. head_dim <= 512.
void TransposeCodedKeysF32(const uint8_t* rec, int64_t rec_bytes, int bits, int n_heads, int head, int n, int head_dim,
                           float* kt, int ldk);

// v32[j * head_dim + c] = v_j[c] (fp16 -> fp32) for j < n; v_j = v + j * stride.
void ValuesF32(const f16_t* v, int64_t stride, int n, int head_dim, float* v32);

// s[r * ld + j] = q_r . kt[:, j] for r < rows, j < RoundUpTile(n); q_r = q + r * head_dim.
// head_dim % 8 == 0.
void TileScores(const float* q, int rows, int head_dim, const float* kt, int ldk, int n, float* s, int ld);

// acc[r * head_dim + c] += sum_{j < n} p[r * ld + j] * v32[j * head_dim + c]. head_dim % 8 == 0.
void TileWeightedValues(const float* p, int rows, int ld, const float* v32, int n, int head_dim, float* acc);

inline int RoundUpTile(int n) { return (n + kTileCols - 1) / kTileCols * kTileCols; }

// The same two on AVX-512 (what TileScores and TileWeightedValues call when the kernel path is
// AVX-512); only on a CPU that has it.
void TileScoresAvx512(const float* q, int rows, int head_dim, const float* kt, int ldk, int n, float* s, int ld);
void TileWeightedValuesAvx512(const float* p, int rows, int ld, const float* v32, int n, int head_dim, float* acc);
// ExpShiftTo (simd-math.h) on AVX-512, with the same bits.
float ExpShiftToAvx512(const float* row, int n, float* dst, float* sum);

// ExpShiftTo on the kernel path's widest vectors (the same bits on every path).
float TileExpShift(const float* row, int n, float* dst, float* sum);

// ---- the blocked attention built on them ----------------------------------------------------

// Query rows of one kv head that the tiled path takes at most (n_new times its query heads).
constexpr int kTileMaxRows = 256;

// One query head of a kv head's group, and its importance row (nullptr: not requested).
struct TileHead {
  int head = 0;
  float* importance = nullptr;
};

// One kv head's share of a call: its keys as two runs (the prefix, then the new tokens), already
// offset to the head; values in the same layout, or null for scores only; the query heads on it.
struct TileGroup {
  const f16_t* k_prefix = nullptr;
  const f16_t* v_prefix = nullptr;
  int64_t prefix_stride = 0;
  const f16_t* k_new = nullptr;
  const f16_t* v_new = nullptr;
  int64_t new_stride = 0;
  std::vector<TileHead> heads;
  // Scores only: the prefix keys as integer codes instead of k_prefix (base/kv-codes.h): key j is
  // head code_head of the record at k_codes + j * code_record_bytes (records of code_heads heads,
  // code_bits 8 or 4), decoded one block at a time to the halves the store's decoding gives.
  const uint8_t* k_codes = nullptr;
  int code_bits = 0, code_head = 0, code_heads = 0;
  int64_t code_record_bytes = 0;
};

// The attention of backend.h (AttentionArgs: all prefix keys visible, causal among the new
// tokens; ScoreKeysArgs: the same importance without values), for the groups given. q is
// (n_new, ldq) with head h at h * head_dim; out (values only) likewise with ldo. Importance rows
// are added to (the caller zeroes them), n_prefix columns, or n_prefix + n_new with
// importance_include_new. head_dim % 8 == 0; rows per group <= kTileMaxRows.
//
// A slice of a longer batch (q_first > 0): the query rows are the new tokens [q_first, q_first +
// n_new) and the keys are the prefix and the new tokens [0, q_first + n_new) (k_new and v_new
// still start at new token 0; q and out at the slice's first row). A batch with more rows than
// kTileMaxRows runs as consecutive slices, each adding its rows' importance.
struct TileAttentionArgs {
  const float* q = nullptr;
  int ldq = 0;
  int n_new = 0, n_prefix = 0, head_dim = 0;
  int q_first = 0;
  float scale = 0;
  std::vector<TileGroup> groups;
  float* out = nullptr;
  int ldo = 0;
  bool importance_include_new = false;
  int importance_from = 0;  // importance columns below it are left as they were
  // Scores only (out == nullptr): queries and keys as int8 on this kernel path
  // (engine/quant/key-scores.h), the importance of a ranking; nullopt: fp32 tiles.
  std::optional<quant::KernelPath> int8_scores;
  // Scores only, prefix keys in int4 records (TileGroup::k_codes): their codes scored as they are
  // with int8 queries on this kernel path (engine/quant/code-scores.h); nullopt: decoded to fp32.
  // Takes precedence over int8_scores for those keys.
  std::optional<quant::KernelPath> int4_code_scores;
  // Optional: prefix rows still arriving (AttentionArgs::prefix_arrivals); each block of keys
  // waits for its prefix rows, the blocks taken in order, so the first compute while the last
  // arrive.
  RowArrivals* prefix_arrivals = nullptr;
};

// Buffers a caller keeps between calls so a call allocates nothing once they have grown.
struct TileScratch {
  ScratchArray<float> q, part_max, part_sum, part_w, part_acc, raw;
  // The queries as int8 rows for int4 code scores (TileAttentionArgs::int4_code_scores), a row of
  // quant::CodeWords(head_dim) words for each of q's, with one scale and one code sum per row.
  ScratchArray<int8_t> q8;
  ScratchArray<float> q8_scale;
  ScratchArray<int32_t> q8_sum;
};

// Runs fn(i) for i in [0, n), possibly in parallel (the backend's pool).
using TileParallelFor = std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>;

// True when TileAttention takes this shape.
inline bool TileAttentionFits(int rows_per_group, int head_dim) {
  return rows_per_group <= kTileMaxRows && head_dim % 8 == 0 && head_dim <= 512;
}

// A prefix still arriving (may be null) for attention on `threads` threads: with by_block (the
// tiles, `tasks` of them, will wait block by block) only notes how many threads may wait at once;
// else waits for every row here. False when some never came.
bool AwaitPrefixRows(RowArrivals* arrivals, bool by_block, int tasks, int threads);

// False when some prefix rows never arrived (prefix_arrivals): the output is then undefined.
bool TileAttention(const TileAttentionArgs& a, TileScratch& scratch, const TileParallelFor& parallel_for);

// How TileAttention splits n keys (prefix, then new) into blocks, one task each: about
// kTileBlockKeys keys per block, so a block's fp32 keys and values (64 KiB each at head_dim 64)
// stay in L2; block b holds keys [TileBlockStart(n, TileBlocks(n), b), ... (b + 1)). Int8 scores
// quantize keys per channel over a block.
constexpr int kTileBlockKeys = 256;
inline int TileBlocks(int n_keys) { return std::max(1, (n_keys + kTileBlockKeys - 1) / kTileBlockKeys); }
inline int TileBlockStart(int n_keys, int n_blocks, int b) { return int(int64_t(n_keys) * b / n_blocks); }

}  // namespace impress
