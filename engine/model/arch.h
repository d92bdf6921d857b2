// Model architectures as data. For each architecture one table (ArchSpec) says how its files
// name things (GGUF metadata keys and tensor names, Hugging Face config keys and tensor names),
// which optional parts it has (biases, norms, tied output, learned positions, per-head Q/K norms)
// and which graph the forward pass runs (ArchGraph). The loaders (gguf-loader.cpp,
// hf-loader.cpp), RandomModel, ValidateModel, CheckNormWeights and Forward read these tables and
// nothing else about an architecture: adding one is a file arch-<name>.cpp defining its ArchSpec
// plus one line in arch-registry.cpp (docs/adding-an-architecture.md).
//
// Tables are constants; everything here is safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

// ---- the graph the forward pass runs (engine/compute/forward.cpp executes it) --------------

enum class NormKind : uint8_t {
  kRms,    // RMSNorm: x / sqrt(mean(x^2) + eps) * w
  kLayer,  // LayerNorm: (x - mean) / sqrt(var + eps) * w + b
};
enum class PositionKind : uint8_t {
  kRope,     // rotary embedding of Q and K (rotate-half; RopeInvFreq), after the Q/K norms
  kLearned,  // a learned table (pos_embd) row added to the token embedding, at pos + pos_offset
};
enum class FfnKind : uint8_t {
  kSwiGlu,  // down(silu(gate(x)) * up(x))
  kRelu,    // down(relu(up(x) + b_up)) + b_down
};

// One layer is: [norm] -> Q/K/V (+ biases) -> [Q/K norms] -> [RoPE] -> attention -> out proj
// (+ bias) + residual -> [norm] -> FFN + residual. Norms sit before their sublayer when
// ModelConfig::do_layer_norm_before, else after the residual add (OPT-350m). Biases are added
// wherever the model has the tensor. After the last layer: the final norm (when the model has
// one), project_out (when present), the LM head.
struct ArchGraph {
  NormKind norm = NormKind::kRms;
  PositionKind position = PositionKind::kRope;
  FfnKind ffn = FfnKind::kSwiGlu;
  bool qk_norm = false;  // RMSNorm of each head's Q and K (weights q_norm, k_norm) before RoPE
};

// ---- the tensors ------------------------------------------------------------------------------

// Symbolic tensor dimensions, resolved against a ModelConfig by ResolveDim.
enum class Dim : uint8_t {
  kNone,       // no dimension: the cols of a vector
  kVocab,      // n_vocab
  kEmbd,       // n_embd
  kEmbdIn,     // the token embedding width: word_embed_proj_dim when set, else n_embd
  kQ,          // n_head * head_dim
  kKV,         // n_head_kv * head_dim
  kHeadDim,    // head_dim
  kFf,         // n_ff
  kPositions,  // n_ctx_train + pos_offset: the learned position table
};

// When a model of the architecture has the tensor, given its configuration.
enum class When : uint8_t {
  kAlways,
  kUntied,         // !tied_embeddings: the output projection (else the token embedding is used)
  kFinalNorm,      // do_layer_norm_before: post-norm OPT (350m) has no final norm
  kEmbdProjected,  // word_embed_proj_dim > 0: OPT-350m's project_in / project_out
};

// What the tensor is: RandomModel's initialization, CheckNormWeights' finiteness check.
enum class Role : uint8_t { kEmbedding, kPositions, kLinear, kNorm, kBias };

// GGUF rows that llama.cpp's converter permuted for its interleaved RoPE, undone at load
// (UnpermuteRopeRows) over n_head or n_head_kv heads.
enum class Permute : uint8_t { kNone, kQHeads, kKVHeads };

struct TensorSpec {
  // Exactly one is set: a model-level tensor, or one every layer has.
  Tensor ModelWeights::*model = nullptr;
  Tensor LayerWeights::*layer = nullptr;
  const char* what = "";       // for messages: "attention norm weight"
  const char* gguf = nullptr;  // GGUF name; a layer's after "blk.N."; nullptr: not in GGUF files
  const char* hf = nullptr;    // Hugging Face name; a layer's after ArchSpec::hf_layer_prefix + "N."
  Dim rows = Dim::kNone;       // PyTorch (out, in) order: rows, then cols
  Dim cols = Dim::kNone;
  Role role = Role::kLinear;
  When when = When::kAlways;
  Permute gguf_permute = Permute::kNone;
};

// ---- the Hugging Face config.json keys --------------------------------------------------------

// Names of the hyper-parameters in config.json; nullptr where the architecture has no such key
// (then the value that follows applies).
struct HfConfigKeys {
  const char* n_embd = "hidden_size";
  const char* n_layer = "num_hidden_layers";
  const char* n_head = "num_attention_heads";
  const char* n_head_kv = "num_key_value_heads";  // nullptr: n_head
  const char* n_ff = "intermediate_size";
  const char* n_vocab = "vocab_size";
  const char* n_ctx = "max_position_embeddings";
  int64_t default_ctx = 2048;             // when the key is absent; 0: required
  const char* head_dim = "head_dim";      // nullptr or absent: n_embd / n_head, which must divide
  const char* norm_eps = "rms_norm_eps";  // nullptr: default_norm_eps
  double default_norm_eps = 1e-6;
  const char* rope_theta = "rope_theta";     // with PositionKind::kRope; also reads rope_scaling
  const char* tied = "tie_word_embeddings";  // nullptr: always tied
};

class HfConfig;  // engine/model/hf-config.h

struct ArchSpec {
  const char* name = "";                      // ours, for messages and Arch::name(): "llama"
  const char* gguf_name = nullptr;            // general.architecture and key prefix; nullptr: no GGUF
  std::span<const char* const> hf_classes{};  // config.json "architectures"[0]
  const char* hf_model_type = nullptr;        // config.json "model_type" (when no architectures)
  const char* hf_layer_prefix = "model.layers.";
  // F16/BF16 safetensors matrices stay in their type (views into the mapping); false: every
  // weight is converted to fp32 at load.
  bool hf_keep_stored = true;
  // The tokenizer prepends its BOS to every prompt when the folder's tokenizer config does not
  // say (OPT prepends </s>).
  bool hf_add_bos = false;
  ArchGraph graph{};
  HfConfigKeys hf_keys{};
  // Reads what this architecture's config.json holds beyond hf_keys into *config, and refuses
  // features the engine lacks (kUnsupported naming the key). nullptr: nothing more.
  Status (*read_hf_extras)(const HfConfig& cfg, ModelConfig* config) = nullptr;
  std::span<const TensorSpec> model_tensors{};  // in RandomModel's fill order (part of its values)
  std::span<const TensorSpec> layer_tensors{};
};

// ---- the registry (arch-registry.cpp) ---------------------------------------------------------

// Every architecture, in registry order.
std::span<const ArchSpec* const> Architectures();
// The architecture whose gguf_name, hf class or hf model_type is `name`, or nullptr.
const ArchSpec* FindGgufArch(std::string_view name);
const ArchSpec* FindHfArch(std::string_view class_name);
const ArchSpec* FindHfModelType(std::string_view model_type);
// By ArchSpec::name ("llama", "qwen2", "qwen3", "opt"), or nullptr.
const ArchSpec* FindArch(std::string_view name);
// "'llama', 'qwen2', ..." and "LlamaForCausalLM, ...": for error messages.
std::string SupportedGgufArchs();
std::string SupportedHfArchs();

// ---- reading a table against a configuration --------------------------------------------------

// The size `d` stands for in `c` (0 for kNone).
int64_t ResolveDim(Dim d, const ModelConfig& c);
// Whether a model configured as `c` has the tensor.
bool TensorPresent(const TensorSpec& t, const ModelConfig& c);
// Its shape in `c`: {rows} for a vector, {rows, cols} for a matrix.
std::vector<int64_t> TensorShape(const TensorSpec& t, const ModelConfig& c);
// The tensor a spec names in a model's weights (layer il for a layer tensor).
const Tensor& SpecTensor(const TensorSpec& t, const ModelWeights& w, int il);
Tensor& SpecTensor(const TensorSpec& t, ModelWeights& w, int il);

}  // namespace impress
