#include "engine/model/gguf-config.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "engine/model/dequant.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

class ConfigReader {
 public:
  ConfigReader(const GgufFile& f, ModelConfig* c) : f_(f), c_(*c) {}

  const ArchSpec* arch() const { return arch_; }

  Result<int64_t> PosInt(const std::string& key, int64_t max, const int64_t* def = nullptr) {
    auto v = f_.GetInt(key);
    if (!v.ok()) {
      if (def && v.status().code() == Status::Code::kNotFound) return *def;
      return v.status();
    }
    if (*v < 1 || *v > max) {
      return Status::Corruption(f_.path() + ": metadata key '" + key + "' is " + std::to_string(*v) + ", expected 1.." +
                                std::to_string(max));
    }
    return *v;
  }

  // A float hyperparameter: f64 values beyond float's range (1e300 -> inf) and NaN are
  // refused here, naming the key, rather than reaching the forward pass as inf.
  Result<double> FloatParam(const std::string& key) {
    IMPRESS_ASSIGN_OR_RETURN(const double v, f_.GetFloat(key));
    if (!std::isfinite(float(v))) {
      return Status::Corruption(f_.path() + ": metadata key '" + key + "' is " + std::to_string(v) +
                                ", not a finite 32-bit float");
    }
    return v;
  }

  Status Read() {
    ModelConfig& c = c_;
    IMPRESS_ASSIGN_OR_RETURN(std::string arch, f_.GetString("general.architecture"));
    arch_ = FindGgufArch(arch);
    if (!arch_) {
      return Status::Unsupported(f_.path() + ": architecture '" + arch + "' is not supported (GGUF files must be " +
                                 SupportedGgufArchs() + ")");
    }
    c.arch = Arch(arch_);
    auto name = f_.GetString("general.name");
    c.name = name.ok() ? *name : fs::path(f_.path()).stem().string();
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_embd, PosInt(K("embedding_length"), kMaxEmbd));
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_layer, PosInt(K("block_count"), kMaxLayers));
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_ff, PosInt(K("feed_forward_length"), kMaxFf));
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_head, PosInt(K("attention.head_count"), kMaxHeads));
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_head_kv, PosInt(K("attention.head_count_kv"), kMaxHeads, &n_head));
    const int64_t def_ctx = 4096;
    IMPRESS_ASSIGN_OR_RETURN(int64_t n_ctx, PosInt(K("context_length"), kMaxCtx, &def_ctx));
    if (n_head % n_head_kv != 0) {
      return Status::Corruption(f_.path() + ": attention.head_count " + std::to_string(n_head) +
                                " is not a multiple of head_count_kv " + std::to_string(n_head_kv));
    }
    int64_t head_dim = n_embd / n_head;
    if (f_.Has(K("attention.key_length"))) {
      IMPRESS_ASSIGN_OR_RETURN(head_dim, PosInt(K("attention.key_length"), kMaxEmbd));
    } else if (n_embd % n_head != 0) {
      return Status::Corruption(f_.path() + ": embedding_length " + std::to_string(n_embd) +
                                " is not a multiple of head_count " + std::to_string(n_head));
    }
    if (head_dim % 2 != 0)
      return Status::Corruption(f_.path() + ": head dimension " + std::to_string(head_dim) + " is odd");
    if (f_.Has(K("rope.dimension_count"))) {
      IMPRESS_ASSIGN_OR_RETURN(int64_t rot, PosInt(K("rope.dimension_count"), kMaxEmbd));
      if (rot != head_dim) {
        return Status::Unsupported(f_.path() + ": rope.dimension_count " + std::to_string(rot) +
                                   " differs from the head dimension " + std::to_string(head_dim) + " (partial RoPE)");
      }
    }
    IMPRESS_ASSIGN_OR_RETURN(double eps, FloatParam(K("attention.layer_norm_rms_epsilon")));
    if (!(eps > 0 && eps < 1)) {
      return Status::Corruption(f_.path() + ": attention.layer_norm_rms_epsilon " + std::to_string(eps) +
                                " is not in (0, 1)");
    }
    double theta = 10000.0;
    if (f_.Has(K("rope.freq_base"))) {
      IMPRESS_ASSIGN_OR_RETURN(theta, FloatParam(K("rope.freq_base")));
      if (!(theta > 1 && std::isfinite(theta))) {
        return Status::Corruption(f_.path() + ": rope.freq_base " + std::to_string(theta) +
                                  " is not a finite number > 1");
      }
    }
    if (f_.Has(K("rope.scaling.type"))) {
      IMPRESS_ASSIGN_OR_RETURN(std::string type, f_.GetString(K("rope.scaling.type")));
      if (type == "linear") {
        IMPRESS_ASSIGN_OR_RETURN(double factor, FloatParam(K("rope.scaling.factor")));
        if (!(factor >= 1 && std::isfinite(factor))) {
          return Status::Corruption(f_.path() + ": rope.scaling.factor " + std::to_string(factor) + " is not >= 1");
        }
        c.rope_scaling.type = factor == 1 ? RopeScalingType::kNone : RopeScalingType::kLinear;
        c.rope_scaling.factor = float(factor);
      } else if (type != "none") {
        return Status::Unsupported(f_.path() + ": rope.scaling.type '" + type + "' is not supported (linear or none)");
      }
    } else if (f_.Has(K("rope.scale_linear"))) {  // older converters
      IMPRESS_ASSIGN_OR_RETURN(double factor, FloatParam(K("rope.scale_linear")));
      if (!(factor >= 1 && std::isfinite(factor))) {
        return Status::Corruption(f_.path() + ": rope.scale_linear " + std::to_string(factor) + " is not >= 1");
      }
      if (factor != 1) {
        c.rope_scaling.type = RopeScalingType::kLinear;
        c.rope_scaling.factor = float(factor);
      }
    }
    const char* emb_name = GgufName(Role::kEmbedding, When::kAlways);
    const GgufTensorInfo* emb = emb_name ? f_.FindTensor(emb_name) : nullptr;
    if (!emb) {
      return Status::NotFound(f_.path() + ": tensor '" + (emb_name ? emb_name : "token embedding") + "' is missing");
    }
    int64_t n_vocab = emb->n_dims == 2 ? emb->ne[1] : 0;
    if (f_.Has(K("vocab_size"))) {
      IMPRESS_ASSIGN_OR_RETURN(n_vocab, PosInt(K("vocab_size"), kMaxVocab));
    }
    if (n_vocab < 1 || n_vocab > kMaxVocab) {
      return Status::Corruption(f_.path() + ": vocabulary size " + std::to_string(n_vocab) + " is out of range");
    }
    c.n_vocab = int(n_vocab);
    c.n_ctx_train = int(n_ctx);
    c.n_embd = int(n_embd);
    c.n_layer = int(n_layer);
    c.n_head = int(n_head);
    c.n_head_kv = int(n_head_kv);
    c.head_dim = int(head_dim);
    c.n_ff = int(n_ff);
    c.norm_eps = float(eps);
    c.rope_theta = float(theta);
    // The output projection is absent from the file when tied to the token embedding.
    const char* output_name = GgufName(Role::kLinear, When::kUntied);
    c.tied_embeddings = !output_name || f_.FindTensor(output_name) == nullptr;
    return ReadRopeFactors();
  }

  // Llama 3.1/3.2: `rope_freqs.weight` holds head_dim / 2 factors that divide the RoPE
  // frequencies (the converter's rendering of transformers' llama3 scaling).
  Status ReadRopeFactors() {
    const GgufTensorInfo* t = f_.FindTensor("rope_freqs.weight");
    if (!t) return Status::Ok();
    const int64_t half = c_.head_dim / 2;
    if (t->n_dims != 1 || t->ne[0] != half) {
      return Status::Corruption(f_.path() + ": tensor 'rope_freqs.weight' has shape " + t->ShapeString() +
                                ", expected [" + std::to_string(half) + "]");
    }
    std::vector<float> v(static_cast<size_t>(half));
    IMPRESS_RETURN_IF_ERROR(Dequantize(t->type_id, t->data, t->n_bytes, v.data(), uint64_t(half), "rope_freqs.weight"));
    for (int64_t i = 0; i < half; ++i) {
      if (!(std::isfinite(v[size_t(i)]) && v[size_t(i)] > 0)) {
        return Status::Corruption(f_.path() + ": tensor 'rope_freqs.weight' has value " + std::to_string(v[size_t(i)]) +
                                  " at index " + std::to_string(i) + " (factors must be finite and > 0)");
      }
    }
    c_.rope_freq_factors = std::move(v);
    return Status::Ok();
  }

 private:
  // The GGUF name of the architecture's model-level tensor of this role and presence, or nullptr.
  const char* GgufName(Role role, When when) const {
    for (const TensorSpec& t : arch_->model_tensors)
      if (t.role == role && t.when == when) return t.gguf;
    return nullptr;
  }
  std::string K(const char* suffix) const { return std::string(arch_->gguf_name) + "." + suffix; }

  const GgufFile& f_;
  ModelConfig& c_;
  const ArchSpec* arch_ = nullptr;
};

}  // namespace

Result<const ArchSpec*> ReadGgufConfig(const GgufFile& f, ModelConfig* config) {
  ConfigReader r(f, config);
  IMPRESS_RETURN_IF_ERROR(r.Read());
  return r.arch();
}

}  // namespace impress
