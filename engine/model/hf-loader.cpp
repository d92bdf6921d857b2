// The Hugging Face folder loader: see hf-loader.h.
#include "engine/model/hf-loader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/fingerprint.h"
#include "engine/model/gguf-config.h"
#include "engine/model/hf-config.h"
#include "engine/model/json-file.h"
#include "engine/model/memory-fit.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight-jobs.h"

namespace impress {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class HfLoader {
 public:
  // keep_stored: F16/BF16 matrices stay views into the mapping (when the table allows it).
  HfLoader(std::string dir, const HfConfig& cfg, const SafetensorsSet& set, const ArchSpec& arch, Model* m,
           bool keep_stored) :
      dir_(std::move(dir)),
      cfg_(cfg),
      set_(set),
      arch_(arch),
      m_(*m),
      keep_stored_(keep_stored && arch.hf_keep_stored) {}

  Status Add(const std::string& name, Tensor* dst, std::vector<int64_t> shape) {
    const std::string* file = nullptr;
    const SafetensorsTensor* t = set_.Find(name, &file);
    if (!t) return Status::NotFound(dir_ + ": tensor '" + name + "' is missing from the safetensors files");
    if (t->shape != shape) {
      return Status::Corruption(*file + ": tensor '" + name + "' has shape " + t->ShapeString() + ", expected " +
                                ShapeStr(shape));
    }
    if (t->dtype != StDtype::kF32 && t->dtype != StDtype::kF16 && t->dtype != StDtype::kBF16) {
      return Status::Unsupported(*file + ": tensor '" + name + "' has dtype " + StDtypeName(t->dtype) +
                                 " (weights must be F32, F16 or BF16)");
    }
    WeightJob j;
    // The kernels compute on F16/BF16 rows as they are; F32 and vectors become owned fp32 values.
    j.keep_stored = keep_stored_ && shape.size() == 2 && (t->dtype == StDtype::kF16 || t->dtype == StDtype::kBF16);
    j.name = name;
    j.dst = dst;
    j.n_elements = NumElements(shape);
    j.shape = std::move(shape);
    j.st = t;
    j.st_path = file;
    jobs_.push_back(std::move(j));
    return Status::Ok();
  }

  // The hyper-parameters, under the names the table's hf_keys gives, then the table's extras.
  Status ReadConfig() {
    const HfConfigKeys& k = arch_.hf_keys;
    const std::string& path = cfg_.path();
    ModelConfig& c = m_.config;
    c.arch = Arch(&arch_);
    IMPRESS_ASSIGN_OR_RETURN(const int64_t E, cfg_.Int(k.n_embd, kMaxEmbd));
    IMPRESS_ASSIGN_OR_RETURN(const int64_t L, cfg_.Int(k.n_layer, kMaxLayers));
    IMPRESS_ASSIGN_OR_RETURN(const int64_t H, cfg_.Int(k.n_head, kMaxHeads));
    int64_t HKV = H;
    if (k.n_head_kv) {
      IMPRESS_ASSIGN_OR_RETURN(HKV, cfg_.Int(k.n_head_kv, kMaxHeads, &H));
    }
    IMPRESS_ASSIGN_OR_RETURN(const int64_t F, cfg_.Int(k.n_ff, kMaxFf));
    IMPRESS_ASSIGN_OR_RETURN(const int64_t V, cfg_.Int(k.n_vocab, kMaxVocab));
    IMPRESS_ASSIGN_OR_RETURN(const int64_t ctx,
                             cfg_.Int(k.n_ctx, kMaxCtx, k.default_ctx > 0 ? &k.default_ctx : nullptr));
    if (H % HKV != 0) {
      return Status::Corruption(path + ": " + k.n_head + " " + std::to_string(H) + " is not a multiple of " +
                                k.n_head_kv + " " + std::to_string(HKV));
    }
    const bool has_head_dim = k.head_dim && cfg_.json().contains(k.head_dim);
    if (!has_head_dim && E % H != 0) {
      return Status::Corruption(path + ": " + k.n_embd + " " + std::to_string(E) + " is not a multiple of " + k.n_head +
                                " " + std::to_string(H));
    }
    const int64_t def_hd = E / H;
    int64_t HD = def_hd;
    if (k.head_dim) {
      IMPRESS_ASSIGN_OR_RETURN(HD, cfg_.Int(k.head_dim, kMaxEmbd, &def_hd));
    }
    double eps = k.default_norm_eps;
    if (k.norm_eps) {
      IMPRESS_ASSIGN_OR_RETURN(eps, cfg_.Num(k.norm_eps, k.default_norm_eps));
    }
    if (!(eps > 0 && eps < 1)) {
      return Status::Corruption(path + ": " + (k.norm_eps ? k.norm_eps : "the norm epsilon") + " is not in (0, 1)");
    }
    if (arch_.graph.position == PositionKind::kRope) {
      if (HD % 2 != 0) return Status::Corruption(path + ": head dimension " + std::to_string(HD) + " is odd");
      IMPRESS_RETURN_IF_ERROR(ReadRope());
    }
    c.tied_embeddings = true;
    if (k.tied) {
      IMPRESS_ASSIGN_OR_RETURN(c.tied_embeddings, cfg_.Bool(k.tied, false));
    }
    c.n_embd = int(E);
    c.n_layer = int(L);
    c.n_head = int(H);
    c.n_head_kv = int(HKV);
    c.head_dim = int(HD);
    c.n_ff = int(F);
    c.n_vocab = int(V);
    c.n_ctx_train = int(ctx);
    c.norm_eps = float(eps);
    if (arch_.read_hf_extras) IMPRESS_RETURN_IF_ERROR(arch_.read_hf_extras(cfg_, &c));
    return Status::Ok();
  }

  // rope_theta and rope_scaling (none, linear, llama3).
  Status ReadRope() {
    const std::string& path = cfg_.path();
    ModelConfig& c = m_.config;
    const char* theta_key = arch_.hf_keys.rope_theta ? arch_.hf_keys.rope_theta : "rope_theta";
    IMPRESS_ASSIGN_OR_RETURN(const double theta, cfg_.Num(theta_key, 10000.0));
    if (!(theta > 1)) return Status::Corruption(path + ": " + theta_key + " is not > 1");
    c.rope_theta = float(theta);
    auto rs = cfg_.json().find("rope_scaling");
    if (rs == cfg_.json().end() || rs->is_null()) return Status::Ok();
    if (!rs->is_object()) return Status::Corruption(path + ": rope_scaling is not an object");
    std::string type;
    for (const char* key : {"rope_type", "type"}) {
      auto t = rs->find(key);
      if (t != rs->end() && t->is_string()) {
        type = t->get<std::string>();
        break;
      }
    }
    IMPRESS_ASSIGN_OR_RETURN(double factor, cfg_.Num(*rs, "factor", 1.0, type == "linear" || type == "llama3"));
    if (!(factor >= 1)) return Status::Corruption(path + ": rope_scaling.factor is not >= 1");
    c.rope_scaling.factor = float(factor);
    if (type == "linear") {
      c.rope_scaling.type = RopeScalingType::kLinear;
    } else if (type == "llama3") {
      c.rope_scaling.type = RopeScalingType::kLlama3;
      IMPRESS_ASSIGN_OR_RETURN(double lo, cfg_.Num(*rs, "low_freq_factor", 1.0, true));
      IMPRESS_ASSIGN_OR_RETURN(double hi, cfg_.Num(*rs, "high_freq_factor", 4.0, true));
      IMPRESS_ASSIGN_OR_RETURN(double orig, cfg_.Num(*rs, "original_max_position_embeddings", 8192, true));
      if (!(lo > 0 && hi > lo && orig >= 1 && orig <= double(kMaxCtx))) {
        return Status::Corruption(path + ": rope_scaling llama3 parameters are inconsistent");
      }
      c.rope_scaling.low_freq_factor = float(lo);
      c.rope_scaling.high_freq_factor = float(hi);
      c.rope_scaling.original_ctx = int(orig);
    } else if (type == "default" || type.empty()) {
      c.rope_scaling.type = RopeScalingType::kNone;
    } else {
      return Status::Unsupported(path + ": rope_scaling type '" + type + "' is not supported (linear or llama3)");
    }
    return Status::Ok();
  }

  // One job per tensor of the architecture's table that the configuration has. A bare base
  // model (OPTModel, LlamaModel: no causal-LM wrapper) names its tensors without "model.".
  Status PlanWeights() {
    const ModelConfig& c = m_.config;
    ModelWeights& w = m_.weights;
    std::string strip;
    const char* first_name = arch_.model_tensors.empty() ? nullptr : arch_.model_tensors[0].hf;
    const std::string first = first_name ? first_name : "";
    if (first.starts_with("model.") && !set_.Find(first) && set_.Find(first.substr(6))) strip = "model.";
    auto named = [&](std::string n) { return !strip.empty() && n.starts_with(strip) ? n.substr(strip.size()) : n; };
    auto add = [&](const TensorSpec& t, const std::string& prefix, int il) -> Status {
      if (!TensorPresent(t, c)) return Status::Ok();
      if (!t.hf) {
        return Status::Unsupported(dir_ + ": architecture '" + arch_.name + "' has no Hugging Face name for its " +
                                   t.what);
      }
      return Add(prefix.empty() ? named(t.hf) : prefix + t.hf, &SpecTensor(t, w, il), TensorShape(t, c));
    };
    for (const TensorSpec& t : arch_.model_tensors) IMPRESS_RETURN_IF_ERROR(add(t, "", 0));
    w.layers.resize(size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string p = named(arch_.hf_layer_prefix) + std::to_string(il) + ".";
      for (const TensorSpec& t : arch_.layer_tensors) IMPRESS_RETURN_IF_ERROR(add(t, p, il));
    }
    return Status::Ok();
  }

  std::vector<WeightJob>& jobs() { return jobs_; }

 private:
  std::string dir_;
  const HfConfig& cfg_;
  const SafetensorsSet& set_;
  const ArchSpec& arch_;
  Model& m_;
  const bool keep_stored_;
  std::vector<WeightJob> jobs_;
};

// The table config.json names: architectures[0], else model_type. kUnsupported naming it.
Result<const ArchSpec*> FindArchOf(const json& cfg, const std::string& cfg_path) {
  std::string name;
  const ArchSpec* arch = nullptr;
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    name = (*a)[0].get<std::string>();
    arch = FindHfArch(name);
  } else if (auto t = cfg.find("model_type"); t != cfg.end() && t->is_string()) {
    name = t->get<std::string>();
    arch = FindHfModelType(name);
  } else {
    return Status::NotFound(cfg_path + ": neither 'architectures' nor 'model_type' says what the model is");
  }
  if (!arch) {
    return Status::Unsupported(cfg_path + ": architecture '" + name + "' is not supported (" + SupportedHfArchs() +
                               ")");
  }
  return arch;
}

}  // namespace

Result<Model> LoadHfFolder(const std::string& dir, const ProgressFn& progress, const LoadOptions& opt) {
  const std::string cfg_path = dir + "/config.json";
  auto parsed = ReadJsonFile(cfg_path);
  if (parsed.status().code() == Status::Code::kNotFound) {
    return Status::NotFound(dir + ": no config.json (not a Hugging Face model folder)");
  }
  if (!parsed.ok()) return parsed.status();
  const json cfg = std::move(*parsed);
  if (!cfg.is_object()) return Status::Corruption(cfg_path + ": not a JSON object");
  IMPRESS_ASSIGN_OR_RETURN(const ArchSpec* arch, FindArchOf(cfg, cfg_path));

  Model m;
  m.path = dir;
  IMPRESS_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::OpenFolder(dir));
  const HfConfig config(cfg_path, cfg);
  HfLoader loader(dir, config, set, *arch, &m, !opt.dequantize);
  IMPRESS_RETURN_IF_ERROR(loader.ReadConfig());
  IMPRESS_RETURN_IF_ERROR(loader.PlanWeights());
  auto nm = cfg.find("_name_or_path");
  m.config.name = nm != cfg.end() && nm->is_string() && !nm->get<std::string>().empty()
                      ? nm->get<std::string>()
                      : fs::path(dir).lexically_normal().filename().string();
  if (m.config.name.empty()) m.config.name = fs::path(dir).lexically_normal().parent_path().filename().string();

  // Fingerprint: config, weights (as mapped), tokenizer files; names sorted for stability.
  // Weight files are hashed from their mappings (already in memory for the conversion).
  std::vector<HashInput> files = {{cfg_path}};
  for (const SafetensorsFile& f : set.files()) files.push_back({f.path(), f.file_data(), f.file_size()});
  for (const char* t : {"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json",
                        "special_tokens_map.json", "generation_config.json"}) {
    std::error_code ec;
    if (fs::exists(dir + "/" + t, ec)) files.push_back({dir + "/" + t});
  }
  std::sort(files.begin() + 1, files.end(), [](const HashInput& a, const HashInput& b) { return a.path < b.path; });
  std::string digest;
  auto hash = [&]() -> Status {
    IMPRESS_ASSIGN_OR_RETURN(digest, FingerprintFiles(files));
    return Status::Ok();
  };
  IMPRESS_RETURN_IF_ERROR(PlanConversion(loader.jobs(), opt.dequantize ? 0 : opt.weights));
  IMPRESS_RETURN_IF_ERROR(CheckFitsMemory(dir, m.config, JobsMemoryBytes(loader.jobs()), opt));
  IMPRESS_RETURN_IF_ERROR(RunJobs(loader.jobs(), opt.n_threads, progress, hash));
  m.config.fingerprint = digest;
  bool viewed = false;
  for (const WeightJob& j : loader.jobs()) viewed |= j.keep_stored;
  for (const SafetensorsFile& f : set.files()) IMPRESS_RETURN_IF_ERROR(f.image().CheckUnchanged());
  // The mappings move with the set (their addresses are unchanged), so views stay valid.
  if (viewed) m.storage = std::make_shared<SafetensorsSet>(std::move(set));
  if (viewed) {
    for (const SafetensorsFile& f : static_cast<const SafetensorsSet*>(m.storage.get())->files())
      m.mapped_files.push_back(&f.image());
  }
  return m;
}

}  // namespace impress
