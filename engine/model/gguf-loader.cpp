// The GGUF loader: see gguf-loader.h.
#include "engine/model/gguf-loader.h"

#include <memory>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/dequant.h"
#include "engine/model/fingerprint-cache.h"
#include "engine/model/fingerprint.h"
#include "engine/model/gguf-config.h"
#include "engine/model/gguf.h"
#include "engine/model/memory-fit.h"
#include "engine/model/weight-jobs.h"
#include "engine/quant/quant-kernels.h"

namespace impress {
namespace {

class GgufLoader {
 public:
  GgufLoader(const GgufFile& f, Model* m, bool dequantize) : f_(f), m_(*m), dequantize_(dequantize) {}

  Status ReadConfig() {
    IMPRESS_ASSIGN_OR_RETURN(arch_, ReadGgufConfig(f_, &m_.config));
    return Status::Ok();
  }

  // Adds a job for `name` with PyTorch-order `shape`.
  Status Add(const std::string& name, Tensor* dst, std::vector<int64_t> shape, int unpermute_heads) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return Status::NotFound(f_.path() + ": tensor '" + name + "' is missing");
    bool ok = t->n_dims == shape.size();
    for (size_t k = 0; ok && k < shape.size(); ++k) ok = t->ne[k] == shape[shape.size() - 1 - k];
    if (!ok) {
      std::vector<int64_t> want(shape.rbegin(), shape.rend());
      return Status::Corruption(f_.path() + ": tensor '" + name + "' has shape " + t->ShapeString() +
                                " (ggml order), expected " + ShapeStr(want));
    }
    // Matrices stay in their stored type when the kernels compute on it; F32 and vectors
    // (norms) become owned fp32 values.
    const bool keep = !dequantize_ && shape.size() == 2 && t->type_id != uint32_t(GgmlType::kF32) &&
                      quant::IsSupportedWeightType(t->type_id);
    if (!keep && !CanDequantize(t->type_id)) {
      return Status::Unsupported(f_.path() + ": tensor '" + name + "' has type " + GgmlTypeName(t->type_id) +
                                 ", which this build cannot read (supported: " + SupportedDequantTypes() + ")");
    }
    WeightJob j;
    j.keep_stored = keep;
    j.name = name;
    j.dst = dst;
    j.n_elements = NumElements(shape);
    j.shape = std::move(shape);
    j.gguf = t;
    j.gguf_file = &f_;
    j.unpermute_heads = unpermute_heads;
    jobs_.push_back(std::move(j));
    return Status::Ok();
  }

  // One job per tensor of the architecture's table that the configuration has.
  Status PlanWeights() {
    const ModelConfig& c = m_.config;
    ModelWeights& w = m_.weights;
    w.layers.resize(size_t(c.n_layer));
    auto add = [&](const TensorSpec& t, const std::string& prefix, int il) -> Status {
      if (!TensorPresent(t, c)) return Status::Ok();
      if (!t.gguf) {
        return Status::Unsupported(f_.path() + ": architecture '" + arch_->name + "' has no GGUF name for its " +
                                   t.what);
      }
      const int heads = t.gguf_permute == Permute::kQHeads    ? c.n_head
                        : t.gguf_permute == Permute::kKVHeads ? c.n_head_kv
                                                              : 0;
      return Add(prefix + t.gguf, &SpecTensor(t, w, il), TensorShape(t, c), heads);
    };
    for (const TensorSpec& t : arch_->model_tensors) IMPRESS_RETURN_IF_ERROR(add(t, "", 0));
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      for (const TensorSpec& t : arch_->layer_tensors) IMPRESS_RETURN_IF_ERROR(add(t, p, il));
    }
    return Status::Ok();
  }

  std::vector<WeightJob>& jobs() { return jobs_; }

 private:
  const GgufFile& f_;
  Model& m_;
  const bool dequantize_;
  const ArchSpec* arch_ = nullptr;
  std::vector<WeightJob> jobs_;
};

}  // namespace

Result<Model> LoadGguf(const std::string& path, const ProgressFn& progress, const LoadOptions& opt) {
  Model m;
  m.path = path;
  IMPRESS_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  GgufLoader loader(f, &m, opt.dequantize);
  IMPRESS_RETURN_IF_ERROR(loader.ReadConfig());
  IMPRESS_RETURN_IF_ERROR(loader.PlanWeights());
  IMPRESS_RETURN_IF_ERROR(PlanConversion(loader.jobs(), opt.dequantize ? 0 : opt.weights));
  IMPRESS_RETURN_IF_ERROR(CheckFitsMemory(
      path, m.config, opt.dequantize || opt.weights ? JobsMemoryBytes(loader.jobs()) : f.file_size(), opt));
  std::string digest;
  const std::string cache = opt.fingerprint_cache.value_or(DefaultFingerprintCache());
  const std::optional<FileIdentity> identity = IdentityOf(f.image().fd());
  std::optional<std::string> remembered;
  if (identity) remembered = LookupFingerprint(cache, *identity);
  auto hash = [&]() -> Status {
    if (remembered) {
      digest = *remembered;
      f.image().Populate();  // the pages the hash would have touched, mapped in one call
    } else {
      // The whole file, from the mapping the weights are read from (it is in memory anyway).
      digest = FingerprintBytes(f.file_data(), f.file_size());
    }
    return Status::Ok();
  };
  IMPRESS_RETURN_IF_ERROR(RunJobs(loader.jobs(), opt.n_threads, progress, hash));
  m.config.fingerprint = digest;
  // The header and metadata (the tokenizer's vocabulary and merges, 1.7 MB of SmolLM2's file)
  // were parsed into the config above; their pages leave memory and come back only if read.
  f.DiscardPages(f.file_data(), f.data_offset());
  bool viewed = false;
  for (const WeightJob& j : loader.jobs()) viewed |= j.keep_stored && j.unpermute_heads <= 0;
  // Nothing above may come from a file that changed while it was read (the digest, converted weights).
  IMPRESS_RETURN_IF_ERROR(f.image().CheckUnchanged());
  if (identity && !remembered) RememberFingerprint(cache, *identity, digest);
  // The mapping moves with the file object (its address is unchanged), so views stay valid.
  if (viewed) m.storage = std::make_shared<GgufFile>(std::move(f));
  if (viewed) m.mapped_files = {&static_cast<const GgufFile*>(m.storage.get())->image()};
  return m;
}

}  // namespace impress
