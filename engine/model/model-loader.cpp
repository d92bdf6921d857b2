// LoadModel: see model-loader.h. The work is split by job: gguf-loader.cpp and hf-loader.cpp
// read the two kinds of model files (under the architecture tables of arch.h), weight-jobs.cpp
// fills the tensors on a few threads, fingerprint.cpp and memory-fit.cpp do what their names
// say. This file dispatches and holds the checks and helpers shared by both kinds.
#include "engine/model/model-loader.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/ggml-type.h"
#include "engine/model/gguf-loader.h"
#include "engine/model/hf-loader.h"

namespace impress {

namespace fs = std::filesystem;

Status CheckNormWeights(const Model& model) {
  // Norm weights and biases are small (n_embd each) and a single NaN in one silences the whole
  // model, so all are checked; the large matrices are not (a full scan would double the load time).
  const ModelWeights& w = model.weights;
  auto check = [&](const Tensor& t, const std::string& what) -> Status {
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (!std::isfinite(t.data[i])) {
        return Status::Corruption(model.path + ": " + what + " has a non-finite value (" + std::to_string(t.data[i]) +
                                  ") at index " + std::to_string(i));
      }
    }
    return Status::Ok();
  };
  const ArchSpec& arch = model.config.arch.spec();
  auto small = [](const TensorSpec& t) { return t.role == Role::kNorm || t.role == Role::kBias; };
  for (const TensorSpec& t : arch.model_tensors) {
    if (!small(t)) continue;
    std::string what = "the ";
    what.append(t.what);
    IMPRESS_RETURN_IF_ERROR(check(w.*t.model, what));
  }
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const std::string layer = "layer " + std::to_string(il) + "'s ";
    for (const TensorSpec& t : arch.layer_tensors)
      if (small(t)) IMPRESS_RETURN_IF_ERROR(check(w.layers[il].*t.layer, layer + t.what));
  }
  return Status::Ok();
}

void UnpermuteRopeRowBytes(uint8_t* w, int64_t n_rows, int64_t row_bytes, int n_head) {
  const int64_t hd = n_rows / n_head, half = hd / 2;
  std::vector<uint8_t> tmp(size_t(hd * row_bytes));
  for (int ih = 0; ih < n_head; ++ih) {
    uint8_t* head = w + ih * hd * row_bytes;
    std::memcpy(tmp.data(), head, tmp.size());
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        // HF row (i, j) of this head <- GGUF row (j, i)
        std::memcpy(head + (i * half + j) * row_bytes, tmp.data() + (2 * j + i) * row_bytes, size_t(row_bytes));
      }
    }
  }
}

void UnpermuteRopeRows(float* w, int64_t n_rows, int64_t n_cols, int n_head) {
  UnpermuteRopeRowBytes(reinterpret_cast<uint8_t*>(w), n_rows, n_cols * int64_t(sizeof(float)), n_head);
}

Result<Model> LoadModel(const std::string& path, const ProgressFn& progress) {
  return LoadModel(path, progress, LoadOptions{});
}

Result<Model> LoadModel(const std::string& path, const ProgressFn& progress, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such file or folder");
  LoadOptions opt = options;
  if (opt.n_threads < 1) opt.n_threads = 1;
  Result<Model> m = fs::is_directory(path, ec) ? LoadHfFolder(path, progress, opt) : LoadGguf(path, progress, opt);
  if (m.ok()) IMPRESS_RETURN_IF_ERROR(CheckNormWeights(*m));
  if (m.ok() && opt.weights != 0 && !opt.dequantize) {
    m->config.fingerprint.push_back('+');
    m->config.fingerprint.append(GgmlTypeName(opt.weights));
  }
  return m;
}

Result<uint32_t> ParseWeightsOption(std::string_view text) {
  std::string t(text);
  for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (t.empty()) return uint32_t(0);
  if (t == "q8_0") return static_cast<uint32_t>(GgmlType::kQ8_0);
  if (t == "q4_k") return static_cast<uint32_t>(GgmlType::kQ4_K);
  if (t == "f16") return static_cast<uint32_t>(GgmlType::kF16);
  return Status::InvalidArgument("unknown weights type '" + std::string(text) + "' (q8_0, q4_k or f16)");
}

}  // namespace impress
