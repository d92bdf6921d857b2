// Llama (LlamaForCausalLM; GGUF 'llama'): RMSNorm, RoPE, a SwiGLU FFN, grouped-query attention,
// no biases. The output projection is absent when tied to the token embedding (SmolLM2,
// Llama 3.2). llama.cpp's converter permutes the rows of attn_q / attn_k for its interleaved
// RoPE; the GGUF loader undoes it, so both file kinds load alike.
#include "engine/model/arch.h"

namespace impress {
namespace {

using W = ModelWeights;
using L = LayerWeights;

constexpr const char* kHfClasses[] = {"LlamaForCausalLM"};

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
     .cols = Dim::kEmbd,
     .gguf_permute = Permute::kQHeads},
    {.layer = &L::wk,
     .what = "key projection",
     .gguf = "attn_k.weight",
     .hf = "self_attn.k_proj.weight",
     .rows = Dim::kKV,
     .cols = Dim::kEmbd,
     .gguf_permute = Permute::kKVHeads},
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
};

}  // namespace

extern constinit const ArchSpec kLlamaArch = {
    .name = "llama",
    .gguf_name = "llama",
    .hf_classes = kHfClasses,
    .hf_model_type = "llama",
    .graph = {.norm = NormKind::kRms, .position = PositionKind::kRope, .ffn = FfnKind::kSwiGlu},
    .model_tensors = kModelTensors,
    .layer_tensors = kLayerTensors,
};

}  // namespace impress
