// The quantized-kernel benchmark (`impress bench kernels`): weight bytes streamed per second by
// the GEMV of engine/quant for each weight type and kernel path (scalar, AVX2, AVX-512) on the
// calling thread. For benchmark reports (which path runs, how close to memory bandwidth); nothing
// asserts on its numbers. Safe from any thread; allocates its matrices.
#pragma once

#include <cstdint>
#include <vector>

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

// One row of the kernel table: a type on a matrix shape, GB/s per path (0 where the CPU lacks it).
struct KernelBenchRow {
  int64_t n_rows = 0, n_cols = 0;
  WeightType type = WeightType::kF16;
  int64_t weight_bytes = 0;
  std::vector<double> gbs;  // indexed like KernelBenchPaths()
};

// The paths the table has columns for, in order: scalar, AVX2, AVX-512.
const std::vector<KernelPath>& KernelBenchPaths();

// Every supported weight type on a 576 x 1536 matrix (a SmolLM2-135M FFN projection: fits in
// cache) and a 4096 x 4096 one (a Llama-8B-sized projection: streams from memory), every path the
// CPU has, at least min_seconds each.
Result<std::vector<KernelBenchRow>> RunKernelBenchmark(double min_seconds = 0.3);

}  // namespace impress::quant
