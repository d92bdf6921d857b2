// Writing models as GGUF files in a chosen weight type: `impress quantize` and the random-weight
// models of real shapes that tests and benchmarks use.
//
// Recipes (the --type names): q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16, f32 put every
// matrix in that type; q4_k_m is the usual mixed recipe: Q6_K for the output projection (the
// token embeddings when they are tied) and for
// attn_v and ffn_down in the first and last eighth of the layers and every third layer between
// them (layer i with i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2), Q4_K for every other matrix.
// A matrix whose rows are not whole 256-value blocks falls back from Q4_K to Q5_0, from Q5_K to
// Q5_1 and from Q6_K to Q8_0; rows not of whole 32-value blocks are F16. Vectors (norms, biases,
// RoPE factors) are F32.
//
// The file is a GGUF of architecture `llama` (Q/K rows permuted as llama.cpp's converter does)
// or `qwen2` (models with Q/K/V biases), with a tensor `rope_freqs.weight` for llama3 RoPE
// scaling; metadata and tokenizer keys of a GGUF source are kept. A source model is read through
// LoadModel (GGUF weights stay mapped, one tensor is expanded to fp32 at a time); random weights
// are generated one tensor at a time, so a model larger than memory can be written.
//
// Thread contract: free functions; each runs on the calling thread plus up to n_threads - 1
// workers of its own (quantizing rows), joined before it returns. Progress is reported from the
// calling thread, once per tensor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

struct QuantizeOptions {
  std::string type = "q8_0";  // a recipe name (above)
  int n_threads = 2;
};

// The recipe names, "q8_0|q4_0|...": for help and errors.
const char* QuantizeRecipes();
// InvalidArgument naming the choices when `recipe` is not one of them.
Status CheckRecipe(std::string_view recipe);

// The GGML type the recipe gives tensor `gguf_name` ("blk.3.attn_v.weight") of layer `layer`
// (-1 for tensors outside the layers) in a model of n_layers layers, whose rows hold n_cols
// values; `is_matrix` false gives F32; `is_output`: the output projection (output.weight, or
// token_embd.weight when the embeddings are tied).
uint32_t RecipeType(std::string_view recipe, std::string_view gguf_name, int layer, int n_layers, int64_t n_cols,
                    bool is_matrix, bool is_output);

// Reads the model at `in` (a GGUF file or a Hugging Face Llama/Qwen2 folder) and writes it to
// `out` with the recipe's types. Errors: those of LoadModel; kUnsupported for OPT (no GGUF
// architecture here); kIOError naming `out`.
Status QuantizeModel(const std::string& in, const std::string& out, const QuantizeOptions& options,
                     const ProgressFn& progress = {});

struct RandomWeightsOptions {
  uint64_t seed = 1;
  // Embeddings N(0, embd_scale^2); matrices N(0, 1 / n_in); norm weights 1 + N(0, 0.1^2);
  // biases N(0, 0.1^2). Values are a pure function of (config, seed, tensor name).
  float embd_scale = 0.05f;
  // A GGUF whose tokenizer.* keys are copied (empty: none), so the model can be chatted with.
  std::string tokenizer_from{};
};

// Writes random weights for `config` (every tensor its architecture's table gives, under their
// GGUF names) to `out` with the recipe's types. Errors: kInvalidArgument for an architecture
// without GGUF names or a malformed config; those of reading tokenizer_from; kIOError naming
// `out`.
Status WriteRandomModel(const ModelConfig& config, const std::string& out, const QuantizeOptions& options,
                        const RandomWeightsOptions& random, const ProgressFn& progress = {});

}  // namespace impress
