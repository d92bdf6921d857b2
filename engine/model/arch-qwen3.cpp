// Qwen3 (Qwen3ForCausalLM; GGUF 'qwen3'): the Qwen2 family without Q/K/V biases and with an
// RMSNorm over each head of Q and of K (q_norm, k_norm: head_dim weights) before RoPE. The head
// dimension is its own key (128 for a hidden size of 1024 with 16 heads). GGUF rows are not
// permuted (rotate-half RoPE, as the engine applies it).
#include "engine/model/arch.h"
#include "engine/model/hf-config.h"

namespace impress {
namespace {

using W = ModelWeights;
using L = LayerWeights;

constexpr const char* kHfClasses[] = {"Qwen3ForCausalLM"};

constexpr TensorSpec kModelTensors[] = {
    {.model = &W::tok_embd,
     .what = "token embedding",
     .gguf = "token_embd.weight",
     .hf = "model.embed_tokens.weight",
     .rows = Dim::kVocab,
     .cols = Dim::kEmbd,
     .role = Role::kEmbedding},
    {.model = &W::output_norm,
     .what = "output norm weight",
     .gguf = "output_norm.weight",
     .hf = "model.norm.weight",
     .rows = Dim::kEmbd,
     .role = Role::kNorm},
    {.model = &W::output,
     .what = "output projection",
     .gguf = "output.weight",
     .hf = "lm_head.weight",
     .rows = Dim::kVocab,
     .cols = Dim::kEmbd,
     .when = When::kUntied},
};

constexpr TensorSpec kLayerTensors[] = {
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
     .cols = Dim::kEmbd},
    {.layer = &L::wk,
     .what = "key projection",
     .gguf = "attn_k.weight",
     .hf = "self_attn.k_proj.weight",
     .rows = Dim::kKV,
     .cols = Dim::kEmbd},
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
};

// The variants of the config the graph lacks.
Status ReadQwen3Extras(const HfConfig& cfg, ModelConfig*) {
  IMPRESS_ASSIGN_OR_RETURN(const bool bias, cfg.Bool("attention_bias", false));
  IMPRESS_ASSIGN_OR_RETURN(const bool sliding, cfg.Bool("use_sliding_window", false));
  if (bias) return Status::Unsupported(cfg.path() + ": Qwen3 with attention_bias is not supported");
  if (sliding) return Status::Unsupported(cfg.path() + ": Qwen3 with use_sliding_window is not supported");
  return Status::Ok();
}

}  // namespace

extern constinit const ArchSpec kQwen3Arch = {
    .name = "qwen3",
    .gguf_name = "qwen3",
    .hf_classes = kHfClasses,
    .hf_model_type = "qwen3",
    .graph = {.norm = NormKind::kRms, .position = PositionKind::kRope, .ffn = FfnKind::kSwiGlu, .qk_norm = true},
    .read_hf_extras = ReadQwen3Extras,
    .model_tensors = kModelTensors,
    .layer_tensors = kLayerTensors,
};

}  // namespace impress
