// The Llama family's table (Llama, Qwen2, Qwen3): the tensors every member has, named alike in
// GGUF and Hugging Face files (token embedding, final norm, an untied output projection; per
// layer the two RMSNorms, Q/K/V/O and the SwiGLU FFN), and the ArchSpec around them. A member
// adds its own layer tensors (Qwen2's Q/K/V biases, Qwen3's per-head Q/K norms) after the shared
// ones and says whether llama.cpp's converter permuted its attn_q / attn_k rows (Llama only).
//
// Constants and constexpr functions: safe from any thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>

#include "engine/model/arch.h"

namespace impress::llama_family {

inline constexpr TensorSpec kModelTensors[] = {
    {.model = &ModelWeights::tok_embd,
     .what = "token embedding",
     .gguf = "token_embd.weight",
     .hf = "model.embed_tokens.weight",
     .rows = Dim::kVocab,
     .cols = Dim::kEmbd,
     .role = Role::kEmbedding},
    {.model = &ModelWeights::output_norm,
     .what = "output norm weight",
     .gguf = "output_norm.weight",
     .hf = "model.norm.weight",
     .rows = Dim::kEmbd,
     .role = Role::kNorm},
    {.model = &ModelWeights::output,
     .what = "output projection",
     .gguf = "output.weight",
     .hf = "lm_head.weight",
     .rows = Dim::kVocab,
     .cols = Dim::kEmbd,
     .when = When::kUntied},
};

// Whether the member's GGUF files hold attn_q / attn_k in llama.cpp's interleaved-RoPE row order
// (undone at load), or as Hugging Face stores them (rotate-half RoPE, as the engine applies it).
enum class GgufRows : bool { kAsStored, kRopePermuted };

inline constexpr std::size_t kNumSharedLayerTensors = 9;

// The shared layer tensors, then `extra`, in RandomModel's fill order.
template <std::size_t N>
consteval std::array<TensorSpec, kNumSharedLayerTensors + N> LayerTensors(GgufRows rows,
                                                                          const std::array<TensorSpec, N>& extra) {
  using L = LayerWeights;
  const bool permuted = rows == GgufRows::kRopePermuted;
  std::array<TensorSpec, kNumSharedLayerTensors + N> t = {{
      {.layer = &L::attn_norm,
       .what = "attention norm weight",
       .gguf = "attn_norm.weight",
       .hf = "input_layernorm.weight",
       .rows = Dim::kEmbd,
       .role = Role::kNorm},
      {.layer = &L::ffn_norm,
       .what = "FFN norm weight",
       .gguf = "ffn_norm.weight",
       .hf = "post_attention_layernorm.weight",
       .rows = Dim::kEmbd,
       .role = Role::kNorm},
      {.layer = &L::wq,
       .what = "query projection",
       .gguf = "attn_q.weight",
       .hf = "self_attn.q_proj.weight",
       .rows = Dim::kQ,
       .cols = Dim::kEmbd,
       .gguf_permute = permuted ? Permute::kQHeads : Permute::kNone},
      {.layer = &L::wk,
       .what = "key projection",
       .gguf = "attn_k.weight",
       .hf = "self_attn.k_proj.weight",
       .rows = Dim::kKV,
       .cols = Dim::kEmbd,
       .gguf_permute = permuted ? Permute::kKVHeads : Permute::kNone},
      {.layer = &L::wv,
       .what = "value projection",
       .gguf = "attn_v.weight",
       .hf = "self_attn.v_proj.weight",
       .rows = Dim::kKV,
       .cols = Dim::kEmbd},
      {.layer = &L::wo,
       .what = "attention output projection",
       .gguf = "attn_output.weight",
       .hf = "self_attn.o_proj.weight",
       .rows = Dim::kEmbd,
       .cols = Dim::kQ},
      {.layer = &L::w_up,
       .what = "FFN up projection",
       .gguf = "ffn_up.weight",
       .hf = "mlp.up_proj.weight",
       .rows = Dim::kFf,
       .cols = Dim::kEmbd},
      {.layer = &L::w_down,
       .what = "FFN down projection",
       .gguf = "ffn_down.weight",
       .hf = "mlp.down_proj.weight",
       .rows = Dim::kEmbd,
       .cols = Dim::kFf},
      {.layer = &L::w_gate,
       .what = "FFN gate projection",
       .gguf = "ffn_gate.weight",
       .hf = "mlp.gate_proj.weight",
       .rows = Dim::kFf,
       .cols = Dim::kEmbd},
  }};
  std::copy(extra.begin(), extra.end(), t.begin() + kNumSharedLayerTensors);
  return t;
}

// A member's ArchSpec: `name` is ours, its GGUF general.architecture and its config.json
// model_type alike; the graph is RMSNorm, RoPE and SwiGLU, with per-head Q/K norms when `qk_norm`.
constexpr ArchSpec Arch(const char* name, std::span<const char* const> hf_classes,
                        std::span<const TensorSpec> layer_tensors, bool qk_norm = false,
                        Status (*read_hf_extras)(const HfConfig&, ModelConfig*) = nullptr) {
  return {
      .name = name,
      .gguf_name = name,
      .hf_classes = hf_classes,
      .hf_model_type = name,
      .graph = {.norm = NormKind::kRms, .position = PositionKind::kRope, .ffn = FfnKind::kSwiGlu, .qk_norm = qk_norm},
      .read_hf_extras = read_hf_extras,
      .model_tensors = kModelTensors,
      .layer_tensors = layer_tensors,
  };
}

}  // namespace impress::llama_family
