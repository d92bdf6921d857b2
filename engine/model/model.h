// The in-memory model: architecture hyper-parameters and weights.
//
// Filled by the loaders (model-loader.h: GGUF files and Hugging Face folders), read by the
// forward pass (engine/compute). A Model is immutable after loading and may be read from any
// thread. Weights are row-major, in PyTorch's (out_features, in_features) orientation, so
// y = W x is a GEMM with W transposed as the B operand. A tensor is either owned fp32 values or
// rows in the type the file stores them in (GGML F16, BF16, Q8_0, Q4_K, ...), used in place from
// the file mapping that Model::storage keeps alive: quantized weights are never expanded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress {

class MappedFile;  // engine/model/mapped-file.h

struct ArchSpec;  // engine/model/arch.h

// Which architecture a model is: a handle to its table in the registry (engine/model/arch.h),
// compared by identity. Default: Llama. kLlama and kOpt name two built-in ones for code that
// builds models by hand (tests, benchmarks); any other is found by name (FindArch).
class Arch {
 public:
  constexpr Arch() = default;
  constexpr explicit Arch(const ArchSpec* spec) : spec_(spec) {}
  const ArchSpec& spec() const;  // arch-registry.cpp
  const char* name() const;      // "llama", "qwen2", "opt", ...
  friend bool operator==(Arch a, Arch b) { return &a.spec() == &b.spec(); }

  static const Arch kLlama;
  static const Arch kOpt;

 private:
  const ArchSpec* spec_ = nullptr;  // nullptr: Llama
};

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;            // linear: positions are divided by it; llama3: the base factor
  float low_freq_factor = 1.0f;   // llama3 only
  float high_freq_factor = 4.0f;  // llama3 only
  int original_ctx = 8192;        // llama3 only: original_max_position_embeddings
};

// Every member has a default, so a test or benchmark may name only what it sets:
// ModelConfig{.n_vocab = 97, .n_embd = 48, ...}.
struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name{};  // for humans: general.name or the folder name
  int n_vocab = 0;
  int n_ctx_train = 0;  // context length the model was trained for
  int n_embd = 0;       // hidden size
  int n_layer = 0;
  int n_head = 0;          // query heads
  int n_head_kv = 0;       // key/value heads (GQA when < n_head)
  int head_dim = 0;        // usually n_embd / n_head
  int n_ff = 0;            // FFN inner size
  float norm_eps = 1e-5f;  // RMSNorm (Llama) or LayerNorm (OPT) epsilon

  // RoPE (PositionKind::kRope)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling{};
  // GGUF `rope_freqs.weight` (Llama 3.1/3.2): head_dim / 2 factors dividing the RoPE frequencies,
  // on top of rope_scaling; empty when the file has none.
  std::vector<float> rope_freq_factors{};
  bool tied_embeddings = false;  // output projection is tok_embd

  // Learned positions and OPT's variants
  int pos_offset = 2;                // learned positions are looked up at pos + offset
  int word_embed_proj_dim = 0;       // OPT-350m: embeddings live in 512 dims, projected to n_embd
  bool do_layer_norm_before = true;  // pre-norm (every model but OPT-350m: post-LN)

  // A digest of the weights and tokenizer; KV made with one model is never reused by another.
  std::string fingerprint{};
};

// A row-major tensor; shape[0] is the slowest dimension. Either owned fp32 values (`data`) or,
// when stored() is true, n rows of the GGML type `ggml_type` at stored_bytes(): a view into the
// model's file mapping (`view`) or, where the loader had to reorder rows, its own copy of the
// stored bytes (`owned_bytes`). Copies of a Tensor stay valid (the view's owner is the Model).
struct Tensor {
  std::vector<int64_t> shape{};
  std::vector<float> data{};  // fp32 values; empty when stored()

  uint32_t ggml_type = 0;              // GgmlType id of the stored bytes (0 = F32: `data` holds them)
  const uint8_t* view = nullptr;       // stored rows inside Model::storage's mapping, or
  std::vector<uint8_t> owned_bytes{};  // stored rows rewritten by the loader (takes precedence)

  bool stored() const { return view != nullptr || !owned_bytes.empty(); }
  bool empty() const { return data.empty() && !stored(); }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
  int64_t numel() const {
    if (!stored()) return int64_t(data.size());
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  const float* ptr() const { return data.data(); }  // the fp32 values (nullptr when stored())
  const uint8_t* stored_bytes() const { return owned_bytes.empty() ? view : owned_bytes.data(); }
};

struct LayerWeights {
  Tensor attn_norm;       // (n_embd)            Llama RMSNorm weight / OPT self_attn_layer_norm.weight
  Tensor attn_norm_b;     // (n_embd)            OPT only
  Tensor wq;              // (n_head*head_dim, n_embd)
  Tensor wk;              // (n_head_kv*head_dim, n_embd)
  Tensor wv;              // (n_head_kv*head_dim, n_embd)
  Tensor wo;              // (n_embd, n_head*head_dim)
  Tensor bq, bk, bv, bo;  // biases (rows of the matching weight): OPT; bq/bk/bv for Qwen2; else empty
  Tensor q_norm, k_norm;  // (head_dim)          Qwen3: RMSNorm weights of each Q / K head
  Tensor ffn_norm;        // (n_embd)            Llama post_attention_layernorm / OPT final_layer_norm
  Tensor ffn_norm_b;      // (n_embd)            OPT only
  Tensor w_gate;          // (n_ff, n_embd)      Llama only: gate_proj
  Tensor w_up;            // (n_ff, n_embd)      Llama up_proj / OPT fc1
  Tensor w_down;          // (n_embd, n_ff)      Llama down_proj / OPT fc2
  Tensor b_up, b_down;    // OPT fc1/fc2 biases
};

struct ModelWeights {
  Tensor tok_embd;       // (n_vocab, n_embd or word_embed_proj_dim)
  Tensor pos_embd;       // OPT: (n_ctx_train + pos_offset, n_embd)
  Tensor project_in;     // OPT-350m: (n_embd, word_embed_proj_dim)
  Tensor project_out;    // OPT-350m: (word_embed_proj_dim, n_embd)
  Tensor output_norm;    // (n_embd)  Llama norm / OPT final_layer_norm (when pre-LN)
  Tensor output_norm_b;  // (n_embd)  OPT only
  Tensor output;         // (n_vocab, n_embd); empty when tied_embeddings (use tok_embd)
  std::vector<LayerWeights> layers;
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string path;  // the GGUF file or Hugging Face folder it came from
  // Keeps alive what stored tensors view: for a GGUF load, the GgufFile (engine/model/gguf.h)
  // whose mapping they point into; null when no tensor views anything.
  std::shared_ptr<const void> storage;
  // The file mappings inside `storage` (at fixed addresses while it lives), for CheckModelFiles.
  std::vector<const MappedFile*> mapped_files;
};

// Ok while every file the model's stored tensors are read from is as it was when loaded;
// DataLoss naming the file when one was truncated or rewritten on disk since (its weights may
// then have been read as zeros or as another file's bytes: MappedFile::CheckUnchanged). Cheap (an
// atomic load and an fstat per file), so it runs after every forward pass. Safe from any thread.
Status CheckModelFiles(const Model& model);

}  // namespace impress
