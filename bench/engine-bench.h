// RunEngineBenchmark: prefill and decode speed of the forward pass on the CPU backend, next to
// an OpenBLAS sgemm rate measured in the same run on the model's own GEMM shapes.
//
// Prefill tokens/s at 512 and 4096 tokens (ubatches of 512, logits for the last row only),
// decode tokens/s (one token at a time after a 512-token prompt), as TimeForward measures them
// (forward-timing.h), the achieved prefill GFLOP/s (the floating point operations the backend
// actually performed, attention included, over the 512-token prefill time) and peak RSS
// (getrusage).
//
// Thread contract: runs on the calling thread (plus the backend's workers); sets the
// process-global OpenBLAS thread count.
#pragma once

#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "bench/forward-timing.h"
#include "engine/model/model.h"

namespace impress {

struct EngineBenchOptions {
  int n_threads = 2;
  ForwardTimingOptions forward;  // lengths, ubatch, repeats
  ProgressFn progress;
};

struct EngineBenchResult {
  int n_threads = 0;
  ForwardSpeed speed;
  double prefill_gflops = 0;    // achieved, at speed.n_prefill_short
  double sgemm_gflops = 0;      // OpenBLAS on the model's layer GEMM shapes (M = ubatch)
  double prefill_vs_sgemm = 0;  // prefill_gflops / sgemm_gflops
  double peak_rss_mb = 0;
  double weights_mb = 0;    // the matrices as held (stored type or fp32)
  std::string kernel_path;  // the typed kernels' SIMD path ("avx512", "avx2", "scalar")
  double kv_cache_mb = 0;   // the generator's fp16 KV cache
};

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& options = {});

}  // namespace impress
