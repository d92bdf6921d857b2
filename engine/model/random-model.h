// RandomModel: a Model with random weights of a given configuration, and the configurations of
// known models' shapes. Benchmarks run on them where the model file is absent (speed does not
// depend on the values: `impress bench engine --shape llama2-7b`); tests build small models from
// them without a file.
//
// The values are a pure function of (configuration, seed): each tensor is cut into fixed-size
// blocks, each block drawn from its own generator seeded by (seed, tensor, block), so the result
// does not depend on how many threads fill it.
//
// Thread contract: free functions; RandomModel runs on the calling thread plus workers of its own,
// all joined before it returns.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

struct RandomModelOptions {
  uint64_t seed = 1;
  // Linear layers' weights are N(0, (linear_gain / sqrt(n_in))^2); embeddings N(0, 1); OPT's
  // learned positions N(0, 0.5^2); norm weights 1 + N(0, 0.1^2); biases N(0, 0.1^2).
  float linear_gain = 1.0f;
  int n_threads = 0;  // 0: one per hardware thread
};

// Every tensor `config`'s architecture table (engine/model/arch.h) gives a model of that
// configuration (Llama: the output projection unless tied_embeddings; Qwen2: Q/K/V biases; OPT:
// biases, learned positions of n_ctx_train + pos_offset rows, final norm when pre-LN, the
// word_embed_proj_dim projections when set), in the table's order. InvalidArgument when a
// dimension is not positive, n_head is not a multiple of n_head_kv, or the model would exceed
// 2^40 values.
Result<Model> RandomModel(const ModelConfig& config, const RandomModelOptions& options = {});

// The configuration of a known model's shape, named "random (<model> shapes)": "smollm2"
// (SmolLM2-135M: GQA 9/3, 30 layers, tied embeddings), "llama2-7b" (the paper's Llama-2-7B:
// 32 heads of 128, 32 layers), "llama-3.2-1b", "llama-3.1-8b" (llama3 RoPE scaling) or
// "qwen2.5-0.5b" (Q/K/V biases) or "qwen3-0.6b" (per-head Q/K norms). InvalidArgument naming the
// choices otherwise.
Result<ModelConfig> KnownModelShape(std::string_view name);
const char* KnownModelShapeNames();  // "smollm2|llama2-7b|..."

}  // namespace impress
