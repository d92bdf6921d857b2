// The architecture registry and the table readers: see arch.h. One line per architecture below.
#include <string>

#include "engine/model/arch.h"

namespace impress {

extern const ArchSpec kLlamaArch;  // arch-llama.cpp
extern const ArchSpec kQwen2Arch;  // arch-qwen2.cpp
extern const ArchSpec kQwen3Arch;  // arch-qwen3.cpp
extern const ArchSpec kOptArch;    // arch-opt.cpp

namespace {

constexpr const ArchSpec* kRegistry[] = {
    &kLlamaArch,
    &kQwen2Arch,
    &kQwen3Arch,
    &kOptArch,
};

}  // namespace

constinit const Arch Arch::kLlama{&kLlamaArch};
constinit const Arch Arch::kOpt{&kOptArch};

const ArchSpec& Arch::spec() const { return spec_ ? *spec_ : kLlamaArch; }
const char* Arch::name() const { return spec().name; }

std::span<const ArchSpec* const> Architectures() { return kRegistry; }

const ArchSpec* FindGgufArch(std::string_view name) {
  for (const ArchSpec* a : kRegistry)
    if (a->gguf_name && name == a->gguf_name) return a;
  return nullptr;
}

const ArchSpec* FindHfArch(std::string_view class_name) {
  for (const ArchSpec* a : kRegistry)
    for (const char* c : a->hf_classes)
      if (class_name == c) return a;
  return nullptr;
}

const ArchSpec* FindHfModelType(std::string_view model_type) {
  for (const ArchSpec* a : kRegistry)
    if (a->hf_model_type && model_type == a->hf_model_type) return a;
  return nullptr;
}

const ArchSpec* FindArch(std::string_view name) {
  for (const ArchSpec* a : kRegistry)
    if (name == a->name) return a;
  return nullptr;
}

std::string SupportedGgufArchs() {
  std::string s;
  for (const ArchSpec* a : kRegistry)
    if (a->gguf_name) s += std::string(s.empty() ? "" : ", ") + "'" + a->gguf_name + "'";
  return s;
}

std::string SupportedHfArchs() {
  std::string s;
  for (const ArchSpec* a : kRegistry)
    for (const char* c : a->hf_classes) s += std::string(s.empty() ? "" : ", ") + c;
  return s;
}

int64_t ResolveDim(Dim d, const ModelConfig& c) {
  switch (d) {
    case Dim::kNone: return 0;
    case Dim::kVocab: return c.n_vocab;
    case Dim::kEmbd: return c.n_embd;
    case Dim::kEmbdIn: return c.word_embed_proj_dim > 0 ? c.word_embed_proj_dim : c.n_embd;
    case Dim::kQ: return int64_t(c.n_head) * c.head_dim;
    case Dim::kKV: return int64_t(c.n_head_kv) * c.head_dim;
    case Dim::kHeadDim: return c.head_dim;
    case Dim::kFf: return c.n_ff;
    case Dim::kPositions: return int64_t(c.n_ctx_train) + c.pos_offset;
  }
  return 0;
}

bool TensorPresent(const TensorSpec& t, const ModelConfig& c) {
  switch (t.when) {
    case When::kAlways: return true;
    case When::kUntied: return !c.tied_embeddings;
    case When::kFinalNorm: return c.do_layer_norm_before;
    case When::kEmbdProjected: return c.word_embed_proj_dim > 0;
  }
  return true;
}

std::vector<int64_t> TensorShape(const TensorSpec& t, const ModelConfig& c) {
  if (t.cols == Dim::kNone) return {ResolveDim(t.rows, c)};
  return {ResolveDim(t.rows, c), ResolveDim(t.cols, c)};
}

const Tensor& SpecTensor(const TensorSpec& t, const ModelWeights& w, int il) {
  return t.model ? w.*t.model : w.layers[size_t(il)].*t.layer;
}

Tensor& SpecTensor(const TensorSpec& t, ModelWeights& w, int il) {
  return t.model ? w.*t.model : w.layers[size_t(il)].*t.layer;
}

}  // namespace impress
