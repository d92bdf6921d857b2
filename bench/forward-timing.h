// The measurement both engine benchmarks (CPU: engine-bench.h, CUDA: cuda-bench.h) make of the
// forward pass, and the sizes they derive alike from a model's shape.
//
// TimeForward: a warm-up prefill, then the best of `repeats` prefills of n_prefill_short tokens
// (with the backend's counted operations of the fastest), decode one token at a time after the
// short prefill, and the best of repeats - 1 prefills of n_prefill_long tokens. Lengths are
// shortened to the model's context (OPT: its learned positions). Random token ids; the times do
// not depend on them.
//
// Thread contract: runs on the calling thread (plus the backend's workers); the backend must not
// be used by anyone else meanwhile.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"

namespace impress {

struct ForwardTimingOptions {
  int n_prefill_short = 512;
  int n_prefill_long = 4096;
  int n_decode = 64;
  int ubatch = 512;
  int repeats = 2;    // runs per prefill size (the long one: repeats - 1); the best is reported
  int n_warmup = 64;  // tokens of the warm-up prefill; 0: n_prefill_short
  // Decode is also timed after this many tokens of context (a long document; the cache grows to
  // hold them); 0 or less than n_prefill_long: not timed.
  int n_decode_ctx = 8000;
  // The KV cache holds at least this many tokens, all of it resident (written once, as a filled
  // context would be), so peak RSS is that of a model with this context even when the timed
  // prefills are shorter (an 8B model cannot prefill 4K tokens in reasonable time on a few cores).
  int n_ctx = 0;
};

struct ForwardSpeed {
  int n_prefill_short = 0, n_prefill_long = 0, n_decode = 0;  // as run, after shortening
  int n_cache = 0;                                            // the generator's KV cache, in tokens
  double prefill_tok_s_short = 0;                             // at n_prefill_short tokens
  double prefill_tok_s_long = 0;                              // at n_prefill_long tokens
  double decode_tok_s = 0;
  double decode_ms_per_token = 0;
  // Process CPU time per decoded token (every thread, spinning included): on a shared machine
  // wall time also counts other programs' turns; with one thread this is the cost of a token.
  double decode_cpu_ms_per_token = 0;
  int n_decode_ctx = 0;  // as run (0: not timed)
  // Prefill of a whole n_decode_ctx-token document from an empty cache (the last long prefill,
  // continued): n_decode_ctx over its time, so a long context's attention counts in full.
  double prefill_tok_s_ctx = 0;
  double decode_tok_s_long_ctx = 0;             // decode after n_decode_ctx tokens of context
  double decode_cpu_ms_per_token_long_ctx = 0;  // its process CPU time per token, as above
  double prefill_flop_s = 0;                    // the backend's counted operations over the fastest short prefill
};

// Progress: reports steps 0..3 of n_steps ("warm-up", "prefill short", "decode", "prefill long");
// the caller reports the rest; Cancelled when progress returns false. check_backend, when set,
// runs after the warm-up and at the end: a backend whose errors surface late (CUDA) says there
// whether the timed runs were real.
Result<ForwardSpeed> TimeForward(const Model& model, Backend& backend, const ForwardTimingOptions& options,
                                 const ProgressFn& progress, int n_steps,
                                 const std::function<Status()>& check_backend = {});

double SecondsSince(std::chrono::steady_clock::time_point t0);
double ProcessCpuSeconds();  // CPU time of every thread of this process so far

// Reports step `done` of `total`; Cancelled ("benchmark cancelled") when progress says stop.
Status BenchStep(const ProgressFn& progress, uint64_t done, uint64_t total, std::string_view what);

// One layer's GEMMs as the forward pass issues them, (n_out, n_in) of each weight: Q, K, V, O,
// up, down, and gate for Llama.
struct LayerGemm {
  int n, k;
};
std::vector<LayerGemm> LayerGemmShapes(const ModelConfig& c);

double WeightsMb(const Model& model);  // fp32 embeddings, output and layer matrices
// Weight bytes one decode step reads: every layer matrix and the output head (the token
// embeddings when tied) in the type held, plus the norms; one embedding row.
double DecodeWeightBytes(const Model& model);
double KvCacheMb(const ModelConfig& c, int n_cache);  // fp16 K and V of every layer

}  // namespace impress
