// The quantized-kernel benchmark (`impress bench kernels`): weight bytes streamed per second by
// the GEMV of engine/quant for each weight type and kernel path (scalar, AVX2, AVX-512) on the
// calling thread; and (`impress bench kernels --gemm`) the prefill GEMM's GFLOP/s against OpenBLAS
// sgemm. For benchmark reports (which path runs, how close to memory bandwidth); nothing
// asserts on its numbers. Safe from any thread; allocates its matrices.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/quant/quant-kernels.h"

namespace impress::quant {

struct GemvBenchResult {
  int64_t weight_bytes = 0;     // bytes of one matrix in its stored type
  int64_t n_gemv = 0;           // GEMVs run (the warm-up included)
  double seconds_per_gemv = 0;  // the fastest call's thread CPU time
  double weight_gbs = 0;        // weight_bytes / seconds_per_gemv / 1e9
};

// Times y = W x for a random n_rows x n_cols matrix of `type` (realistic fp16 scales, no
// subnormals or NaN) on `path`, repeating for at least min_seconds of thread CPU time after one
// warm-up GEMV; the fastest call counts (CPU time, so that other programs' turns on a shared
// machine do not).
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

namespace impress::quant {

// The prefill GEMM on one thread: y (m x n) = x (m x k) W^T for a random W of `type`, three ways,
// each timed in thread CPU time (a busy machine's other programs do not count), best of repeats
// lasting at least min_seconds together, activation quantization / weight decoding included:
//  - int8_gflops: the int8 GEMM (engine/quant/gemm.h) on the default path (0 where it lacks the
//    type or path);
//  - tiles_gflops: tiles of W decoded to fp32, each through OpenBLAS sgemm (the fallback);
//  - sgemm_gflops: OpenBLAS sgemm on W already in fp32 (weights expanded at load).
struct GemmBenchRow {
  int64_t m = 0, n = 0, k = 0;
  WeightType type = WeightType::kQ4_1;
  double int8_gflops = 0, tiles_gflops = 0, sgemm_gflops = 0;
};

// SmolLM2-135M's projection shapes (576 -> 576, 576 -> 1536, 1536 -> 576) and Llama-3.2-1B's
// 2048 x 2048 at m = 512 rows, for Q4_1, Q4_K, Q5_K, Q8_0 and Q6_K where the width is whole
// blocks; then Qwen2.5-1.5B's 1536 x 1536 and 8960 x 1536 (Q4_K) and 1536 x 8960 (Q6_K) at m =
// 16, 32, 64 (the small-batch path) and 512. Sets OpenBLAS to one thread.
Result<std::vector<GemmBenchRow>> RunGemmBenchmark(double min_seconds = 0.3);

}  // namespace impress::quant
