// GGUF metadata -> ModelConfig for the architectures that share the Llama graph: which
// `general.architecture` names load, how their keys are spelled (`<arch>.embedding_length`, ...)
// and what differs between them (Q/K rows permuted for llama.cpp's interleaved RoPE or not,
// Q/K/V biases). Also reads the per-dimension RoPE factors of Llama 3.1/3.2 files
// (`rope_freqs.weight`).
//
// Every value is range-checked; errors name the file and the key or tensor. Pure functions of a
// GgufFile (model-loader.cpp calls them); safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"

namespace impress {

// Sanity bounds for hyper-parameters read from files: far above any real model, low enough that
// products of them cannot overflow 64 bits.
inline constexpr int64_t kMaxEmbd = 1 << 18;
inline constexpr int64_t kMaxLayers = 1 << 12;
inline constexpr int64_t kMaxHeads = 1 << 12;
inline constexpr int64_t kMaxFf = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxCtx = 1 << 24;

// A GGUF architecture with the Llama graph (RMSNorm, RoPE, SwiGLU FFN, GQA).
struct GgufArch {
  const char* name;  // general.architecture, also the metadata key prefix
  bool permuted_qk;  // llama.cpp's converter permuted attn_q/attn_k rows (interleaved RoPE)
  bool qkv_bias;     // blk.N.attn_{q,k,v}.bias are present (Qwen2)
};

// The architecture called `name`, or nullptr.
const GgufArch* FindGgufArch(std::string_view name);
// "'llama', 'qwen2', ...": for error messages.
std::string SupportedGgufArchs();

// Reads the hyper-parameters of `f` into *config (arch, name, sizes, norm epsilon, RoPE base,
// scaling and factors, tied output) and returns the file's architecture. Errors: kUnsupported
// for another architecture or a feature the engine lacks (partial RoPE, an unknown scaling
// type); kCorruption or kNotFound naming the key or tensor for a bad or missing value.
Result<GgufArch> ReadGgufConfig(const GgufFile& f, ModelConfig* config);

}  // namespace impress
