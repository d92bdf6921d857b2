// Qwen3 (Qwen3ForCausalLM; GGUF 'qwen3'): the Qwen2 family without Q/K/V biases and with an
// RMSNorm over each head of Q and of K (q_norm, k_norm: head_dim weights) before RoPE. The head
// dimension is its own key (128 for a hidden size of 1024 with 16 heads). GGUF rows are not
// permuted (rotate-half RoPE, as the engine applies it).
#include "engine/model/arch-llama-family.h"
#include "engine/model/arch.h"
#include "engine/model/hf-config.h"

namespace impress {
namespace {

using L = LayerWeights;

constexpr const char* kHfClasses[] = {"Qwen3ForCausalLM"};

constexpr std::array<TensorSpec, 2> kQkNorms = {{
    {.layer = &L::q_norm,
     .what = "query norm weight",
     .gguf = "attn_q_norm.weight",
     .hf = "self_attn.q_norm.weight",
     .rows = Dim::kHeadDim,
     .role = Role::kNorm},
    {.layer = &L::k_norm,
     .what = "key norm weight",
     .gguf = "attn_k_norm.weight",
     .hf = "self_attn.k_norm.weight",
     .rows = Dim::kHeadDim,
     .role = Role::kNorm},
}};

constexpr auto kLayerTensors = llama_family::LayerTensors(llama_family::GgufRows::kAsStored, kQkNorms);

// The variants of the config the graph lacks.
Status ReadQwen3Extras(const HfConfig& cfg, ModelConfig*) {
  IMPRESS_ASSIGN_OR_RETURN(const bool bias, cfg.Bool("attention_bias", false));
  IMPRESS_ASSIGN_OR_RETURN(const bool sliding, cfg.Bool("use_sliding_window", false));
  if (bias) return Status::Unsupported(cfg.path() + ": Qwen3 with attention_bias is not supported");
  if (sliding) return Status::Unsupported(cfg.path() + ": Qwen3 with use_sliding_window is not supported");
  return Status::Ok();
}

}  // namespace

extern constinit const ArchSpec kQwen3Arch =
    llama_family::Arch("qwen3", kHfClasses, kLayerTensors, /*qk_norm=*/true, ReadQwen3Extras);

}  // namespace impress
