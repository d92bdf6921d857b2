// Llama (LlamaForCausalLM; GGUF 'llama'): RMSNorm, RoPE, a SwiGLU FFN, grouped-query attention,
// no biases. The output projection is absent when tied to the token embedding (SmolLM2,
// Llama 3.2). llama.cpp's converter permutes the rows of attn_q / attn_k for its interleaved
// RoPE; the GGUF loader undoes it, so both file kinds load alike.
#include "engine/model/arch-llama-family.h"
#include "engine/model/arch.h"

namespace impress {
namespace {

constexpr const char* kHfClasses[] = {"LlamaForCausalLM"};

constexpr auto kLayerTensors =
    llama_family::LayerTensors(llama_family::GgufRows::kRopePermuted, std::array<TensorSpec, 0>{});

}  // namespace

extern constinit const ArchSpec kLlamaArch = llama_family::Arch("llama", kHfClasses, kLayerTensors);

}  // namespace impress
