// A micro-benchmark of the quantized GEMV: weight bytes streamed per second for one type, path
// and matrix shape, on the calling thread. For benchmark reports (which path runs, how close to
// memory bandwidth); nothing asserts on its numbers. Safe from any thread; allocates its matrix.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/quant/quant-kernels.h"

namespace impress::quant {

struct GemvBenchResult {
  int64_t weight_bytes = 0;  // bytes of one matrix in its stored type
  int64_t n_gemv = 0;        // GEMVs timed
  double seconds_per_gemv = 0;
  double weight_gbs = 0;  // weight_bytes / seconds_per_gemv / 1e9
};

// Times y = W x for a random n_rows x n_cols matrix of `type` (realistic fp16 scales, no
// subnormals or NaN) on `path`, repeating for at least min_seconds after one warm-up GEMV.
// Errors: as Gemv (type, shape, a path this CPU cannot run).
Result<GemvBenchResult> BenchGemv(WeightType type, KernelPath path, int64_t n_rows, int64_t n_cols,
                                  double min_seconds = 0.3);

}  // namespace impress::quant
