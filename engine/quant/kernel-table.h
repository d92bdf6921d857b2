// Internal to engine/quant: the table of functions one code path provides (scalar, AVX2,
// AVX-512), indexed by weight type. Each path's file fills its table; quant-kernels.cpp picks one.
// Tables are constant data, safe from any thread.
#pragma once

#include <cstdint>

#include "engine/quant/block-formats.h"

namespace impress::quant {

// Dense index of a WeightType in a table.
enum TypeSlot : int {
  kSlotF16,
  kSlotBF16,
  kSlotQ8_0,
  kSlotQ4_0,
  kSlotQ4_1,
  kSlotQ5_0,
  kSlotQ5_1,
  kSlotQ4_K,
  kSlotQ5_K,
  kSlotQ6_K,
  kNumSlots
};

// The slot of a type; -1 for an id that is not a WeightType.
int SlotOf(WeightType type);

struct KernelTable {
  // Row dot: w_row holds n elements of the type; x is float[n] or the activation blocks of n.
  using DotFn = float (*)(const uint8_t* w_row, const void* x, int64_t n);
  // The per-block integer parts of the same dot (nullptr for F16/BF16).
  using PartsFn = void (*)(const uint8_t* w_row, const void* x, int64_t n, int32_t* parts);
  // GEMV over n_rows consecutive rows (row_bytes apart): y[r] = row r . x. nullptr where the
  // path has no multi-row kernel for the type (the caller then loops over `dot`). Where set,
  // `dot` is this function on one row, so a row's value never depends on how rows are grouped.
  using RowsFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t n_rows, const void* x, int64_t n, float* y);
  DotFn dot[kNumSlots];
  PartsFn parts[kNumSlots];
  RowsFn rows[kNumSlots] = {};
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();

}  // namespace impress::quant
