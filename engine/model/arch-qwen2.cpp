// Qwen2 / Qwen2.5 (Qwen2ForCausalLM; GGUF 'qwen2'): Llama's graph with biases on the Q, K and V
// projections. Its GGUF rows are not permuted (it uses rotate-half RoPE, as the engine does).
#include "engine/model/arch.h"

namespace impress {
namespace {

using W = ModelWeights;
using L = LayerWeights;

constexpr const char* kHfClasses[] = {"Qwen2ForCausalLM"};

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
    {.layer = &L::bq,
     .what = "query bias",
     .gguf = "attn_q.bias",
     .hf = "self_attn.q_proj.bias",
     .rows = Dim::kQ,
     .role = Role::kBias},
    {.layer = &L::bk,
     .what = "key bias",
     .gguf = "attn_k.bias",
     .hf = "self_attn.k_proj.bias",
     .rows = Dim::kKV,
     .role = Role::kBias},
    {.layer = &L::bv,
     .what = "value bias",
     .gguf = "attn_v.bias",
     .hf = "self_attn.v_proj.bias",
     .rows = Dim::kKV,
     .role = Role::kBias},
};

}  // namespace

extern constinit const ArchSpec kQwen2Arch = {
    .name = "qwen2",
    .gguf_name = "qwen2",
    .hf_classes = kHfClasses,
    .hf_model_type = "qwen2",
    .graph = {.norm = NormKind::kRms, .position = PositionKind::kRope, .ffn = FfnKind::kSwiGlu},
    .model_tensors = kModelTensors,
    .layer_tensors = kLayerTensors,
};

}  // namespace impress
