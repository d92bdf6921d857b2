// Host-side plans of the CUDA backend, kept apart from CUDA so tests check them on any machine:
// the row-major -> cuBLAS column-major GEMM mapping, and the plan of attention and key scoring:
// which kernel bodies run
// in which order over which grids, and the scratch they need. Written against a Runner so the
// backend runs it on the GPU (launches) and tests run it through the host emulator
// (tests/cuda/kernel-emulation-test.cpp):
//
//   runner.RowPass(const RowPassBody&, int n_row_tiles, int n_groups)   -> int (0 = ok)
//   runner.Combine(const CombineBody&, int64_t n)                      -> int
//   runner.Importance(const ImportanceBody&, int n_heads)              -> int
//
// Attention:  pass 1 (online softmax, output, row max/sum for every head; split over keys when
//             there are too few row blocks to fill the GPU, then combined), pass 2 (importance
//             column sums for the requested heads, recomputing the scores; deterministic).
// ScoreKeys:  pass 1 without values for the requested heads only, then pass 2 over the prefix
//             columns. Denominators include the new tokens' keys (causal), as on the CPU.
//
// Thread contract: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/compute/cuda/cuda-kernel-bodies.cuh"

namespace impress::cuda {

// Row-major C (m, n) = op(A) (m, k) op(B) (k, n) is column-major C^T (n, m) = op(B)^T op(A)^T,
// and a row-major matrix with leading dimension ld is its column-major transpose with the same
// ld. So cuBLAS (column-major) gets B first, with B's transpose flag, then A: dimensions (n, m, k).
struct ColMajorGemm {
  bool trans_first, trans_second;  // op flags of the first (B) and second (A) operand
  int m, n, k;                     // cuBLAS m, n, k
  int ld_first, ld_second, ldc;
};
inline ColMajorGemm MapRowMajorGemm(bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc) {
  return ColMajorGemm{tb, ta, n, m, k, ldb, lda, ldc};
}

// Device (or emulated) scratch for one call. Sizes from AttnScratchSize.
struct AttnScratch {
  float* row_max = nullptr;  // (n_head, n_new)
  float* row_sum = nullptr;  // (n_head, n_new)
  float* part_m = nullptr;   // (n_split, n_head, n_new)
  float* part_l = nullptr;   // (n_split, n_head, n_new)
  float* part_o = nullptr;   // (n_split, n_head, n_new, head_dim), attention only
};

struct AttnScratchSize {
  size_t row_floats = 0;   // each of row_max, row_sum
  size_t part_floats = 0;  // each of part_m, part_l
  size_t o_floats = 0;     // part_o
};

inline AttnScratchSize ScratchFor(int n_head, int n_new, int head_dim, int n_split, bool with_out) {
  AttnScratchSize z;
  z.row_floats = size_t(n_head) * n_new;
  if (n_split > 1) {
    z.part_floats = size_t(n_split) * n_head * n_new;
    if (with_out) z.o_floats = z.part_floats * head_dim;
  }
  return z;
}

// Key splits for pass 1: 1 when the row blocks fill the GPU; otherwise enough splits to give
// about two blocks per multiprocessor, each split keeping at least two key tiles.
inline int ChooseSplit(int n_blocks, int n_keys, int head_dim, int n_sm) {
  if (n_blocks <= 0 || n_blocks >= n_sm) return 1;
  const int tiles = (n_keys + AttnKeyTile(head_dim) - 1) / AttnKeyTile(head_dim);
  const int want = (2 * n_sm + n_blocks - 1) / n_blocks;
  return std::max(1, std::min({want, tiles / 2, 64}));
}

inline int RowTiles(int n_rows) { return (n_rows + kAttnRowTile - 1) / kAttnRowTile; }

// Attention over prefix + new tokens (s.v_* set), output to `out`; importance of `n_imp` heads
// (imp_heads: device list) into importance (n_imp, ld), ld = n_prefix (+ n_new with
// include_new). n_split from ChooseSplit(RowTiles(n_new * group) * n_head_kv, n_prefix + n_new, ...).
template <class Runner>
int RunAttention(Runner& run, const AttnShape& s, float* out, const int* imp_heads, int n_imp, bool include_new,
                 float* importance, const AttnScratch& sc, int n_split) {
  const int group = s.n_head / s.n_head_kv;
  RowPassBody pass{s, nullptr, nullptr, out, sc.row_max, sc.row_sum, n_split, sc.part_m, sc.part_l, sc.part_o};
  if (int e = run.RowPass(pass, RowTiles(s.n_new * group), s.n_head_kv)) return e;
  if (n_split > 1) {
    CombineBody comb{n_split,   s.n_head,  s.n_new, s.head_dim, nullptr,   sc.part_m,
                     sc.part_l, sc.part_o, out,     sc.row_max, sc.row_sum};
    if (int e = run.Combine(comb, int64_t(s.n_head) * s.n_new * s.head_dim)) return e;
  }
  const int ld = s.n_prefix + (include_new ? s.n_new : 0);
  if (n_imp > 0 && ld > 0) {
    ImportanceBody imp{s, imp_heads, nullptr, sc.row_max, sc.row_sum, ld, ld, importance};
    if (int e = run.Importance(imp, n_imp)) return e;
  }
  return 0;
}

// Importance of `n_q` query heads (device list) over the prefix keys (s.k_prefix holds s.n_slots
// kv heads, slot_of[g] the slot of kv head g) into importance (n_q, n_prefix). Needs n_prefix > 0.
// n_split from ChooseSplit(RowTiles(n_new) * n_q, n_prefix + n_new, ...).
template <class Runner>
int RunScoreKeys(Runner& run, const AttnShape& s, const int* query_heads, const int* slot_of, int n_q,
                 float* importance, const AttnScratch& sc, int n_split) {
  RowPassBody pass{s, query_heads, slot_of, nullptr, sc.row_max, sc.row_sum, n_split, sc.part_m, sc.part_l, nullptr};
  if (int e = run.RowPass(pass, RowTiles(s.n_new), n_q)) return e;
  if (n_split > 1) {
    CombineBody comb{n_split,   s.n_head, s.n_new, s.head_dim, query_heads, sc.part_m,
                     sc.part_l, nullptr,  nullptr, sc.row_max, sc.row_sum};
    if (int e = run.Combine(comb, int64_t(n_q) * s.n_new)) return e;
  }
  ImportanceBody imp{s, query_heads, slot_of, sc.row_max, sc.row_sum, s.n_prefix, s.n_prefix, importance};
  return run.Importance(imp, n_q);
}

}  // namespace impress::cuda
