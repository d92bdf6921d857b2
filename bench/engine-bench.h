// RunEngineBenchmark: prefill and decode speed of the forward pass on the CPU backend, next to
// an OpenBLAS sgemm rate measured in the same run on the model's own GEMM shapes.
//
// Prefill tokens/s at 512 and 4096 tokens (ubatches of 512, logits for the last row only),
// decode tokens/s (one token at a time after a 512-token prompt), as TimeForward measures them
// (forward-timing.h), the achieved prefill GFLOP/s (the floating point operations the backend
// actually performed, attention included, over the 512-token prefill time) and peak RSS
// (getrusage), and decode measured against a memory-bandwidth probe run afterwards (fields below).
// Small batches (a follow-up question, a chat turn): prefill tokens/s at 16, 32 and 64 tokens
// from an empty cache (best of max(repeats, 3)), and the GFLOP/s at 32 tokens against the short
// prefill's.
//
// Thread contract: runs on the calling thread (plus the backend's workers); sets the
// process-global OpenBLAS thread count.
#pragma once

#include <cstddef>
#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "bench/forward-timing.h"
#include "engine/model/model.h"

namespace impress {

struct EngineBenchOptions {
  int n_threads = 2;
  double model_file_bytes = 0;                // the model's file (0: the weights as held stand in for it)
  size_t bw_probe_bytes = size_t(512) << 20;  // the memory-bandwidth probe's buffer (0: no probe)
  ForwardTimingOptions forward;               // lengths, ubatch, repeats
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
  // Decode against memory speed. A decode token reads the weights (weights_bytes_per_token) and
  // the KV of its context (decode_bytes_per_token adds the mean context of the timed decode);
  // mem_bw_gbs is a read of bw_probe_bytes by n_threads threads in the same run (best of 3);
  // decode_bw_fraction = decode_bytes_per_token * decode_tok_s / mem_bw_gbs.
  double weights_bytes_per_token = 0;
  double decode_bytes_per_token = 0;
  double mem_bw_gbs = 0;
  double decode_bw_fraction = 0;
  double model_file_mb = 0;    // options.model_file_bytes, or weights_mb
  double rss_vs_file_kv = 0;   // peak_rss_mb / (model_file_mb + kv_cache_mb), before the probe
  double decode_tok_s_8k = 0;  // speed.decode_tok_s_long_ctx when that context was 8,000 tokens
  // A long document (speed.n_decode_ctx tokens): its prefill rate against the short prefill's,
  // and decode after it against memory speed (weights plus the context's KV per token).
  double prefill_ctx_vs_short = 0;  // speed.prefill_tok_s_ctx / speed.prefill_tok_s_short
  double decode_bytes_per_token_ctx = 0;
  double decode_bw_fraction_ctx = 0;
  // The attention's rate in that prefill: its FLOPs (4 n_head head_dim n_layer per query-key
  // pair, causal) over the time the prefill took beyond what the short prefill's rate gives
  // for as many tokens. Next to sgemm_gflops it says whether fp32 attention can keep up.
  double attention_gflops_ctx = 0;
  double prefill_tok_s_16 = 0, prefill_tok_s_32 = 0, prefill_tok_s_64 = 0;
  double question_gflops = 0;  // achieved GFLOP/s of the 32-token prefill
  // GFLOP/s at 32 rows over those at the short prefill's rows, the median over pairs of runs back
  // to back (0 when the short prefill has 32 rows or fewer)
  double question_gflops_frac = 0;
};

// GB/s of n_threads threads reading disjoint parts of a `bytes` buffer (touched first), best of
// `passes` passes. 0 when the buffer cannot be had.
double MeasureReadBandwidth(int n_threads, size_t bytes, int passes = 3);

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& options = {});

}  // namespace impress
