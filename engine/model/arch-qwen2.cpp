// Qwen2 / Qwen2.5 (Qwen2ForCausalLM; GGUF 'qwen2'): Llama's graph with biases on the Q, K and V
// projections. Its GGUF rows are not permuted (it uses rotate-half RoPE, as the engine does).
#include "engine/model/arch-llama-family.h"
#include "engine/model/arch.h"

namespace impress {
namespace {

using L = LayerWeights;

constexpr const char* kHfClasses[] = {"Qwen2ForCausalLM"};

constexpr std::array<TensorSpec, 3> kQkvBiases = {{
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
}};

constexpr auto kLayerTensors = llama_family::LayerTensors(llama_family::GgufRows::kAsStored, kQkvBiases);

}  // namespace

extern constinit const ArchSpec kQwen2Arch = llama_family::Arch("qwen2", kHfClasses, kLayerTensors);

}  // namespace impress
