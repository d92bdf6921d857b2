// RunEngineBenchmark: prefill and decode speed of the forward pass on the CPU backend, next to
// an OpenBLAS sgemm rate measured in the same run on the model's own GEMM shapes.
//
// Prefill tokens/s at 512 and 4096 tokens (ubatches of 512, logits for the last row only),
// decode tokens/s (one token at a time after a 512-token prompt), the achieved prefill GFLOP/s
// (the floating point operations the backend actually performed, attention included, over the
// 512-token prefill time) and peak RSS (getrusage). Long prompts are shortened to the model's
// context. Uses random token ids; results do not depend on them.
//
// Thread contract: runs on the calling thread (plus the backend's workers); sets the
// process-global OpenBLAS thread count.
#pragma once

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

struct EngineBenchOptions {
  int n_threads = 2;
  int n_prefill_short = 512;
  int n_prefill_long = 4096;
  int n_decode = 64;
  int ubatch = 512;
  int repeats = 2;  // prefill runs per size; the best is reported
  ProgressFn progress;
};

struct EngineBenchResult {
  int n_threads = 0;
  int n_prefill_short = 0, n_prefill_long = 0, n_decode = 0;
  double prefill_tok_s_512 = 0;   // at n_prefill_short tokens
  double prefill_tok_s_4096 = 0;  // at n_prefill_long tokens
  double decode_tok_s = 0;
  double prefill_gflops = 0;      // achieved, at n_prefill_short
  double sgemm_gflops = 0;        // OpenBLAS on the model's layer GEMM shapes (M = ubatch)
  double prefill_vs_sgemm = 0;    // prefill_gflops / sgemm_gflops
  double peak_rss_mb = 0;
  double weights_mb = 0;          // fp32 weights
  double kv_cache_mb = 0;         // the generator's fp16 KV cache
};

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& options = {});

}  // namespace impress
