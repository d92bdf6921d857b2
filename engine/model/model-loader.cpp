#include "engine/model/model-loader.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "engine/model/dequant.h"
#include "engine/model/gguf-config.h"
#include "engine/model/gguf.h"
#include "engine/model/json-file.h"
#include "engine/model/quantize-blocks.h"
#include "engine/model/safetensors.h"
#include "engine/quant/quant-kernels.h"

namespace impress {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// One weight to fill: where it comes from and the (PyTorch-order) shape it must have.
struct WeightJob {
  std::string name;  // its name in the file, for errors and progress
  Tensor* dst = nullptr;
  std::vector<int64_t> shape;
  uint64_t n_elements = 0;
  const GgufFile* gguf_file = nullptr;
  const GgufTensorInfo* gguf = nullptr;   // GGUF source, or
  const SafetensorsTensor* st = nullptr;  // safetensors source
  const std::string* st_path = nullptr;
  int unpermute_heads = 0;   // > 0: undo llama.cpp's RoPE row permutation
  uint32_t convert_to = 0;   // != 0: the values are re-encoded in this GgmlType at load (LoadOptions::weights)
  bool keep_stored = false;  // the tensor views its stored rows (GGUF; F16/BF16 safetensors) instead of fp32 values
};

uint64_t NumElements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);  // bounded by the kMax* limits above
  return n;
}

// Fills the job's tensor with fp32 values (any readable GGUF type, or safetensors).
Status ToF32(WeightJob& j) {
  j.dst->data.resize(j.n_elements);
  float* out = j.dst->data.data();
  Status st;
  if (j.gguf) {
    st = Dequantize(j.gguf->type_id, j.gguf->data, j.gguf->n_bytes, out, j.n_elements, j.name, 1);
    // Keeps the peak near the fp32 weights alone: converted source pages leave memory.
    j.gguf_file->DiscardPages(j.gguf->data, j.gguf->n_bytes);
  } else {
    st = SafetensorsToF32(*j.st, *j.st_path, out);
  }
  if (st.ok() && j.unpermute_heads > 0) UnpermuteRopeRows(out, j.shape[0], j.shape[1], j.unpermute_heads);
  return st;
}

// Points the job's tensor at its stored GGUF rows. Rows llama.cpp permuted are copied once in
// HF order (still in the stored type: a row is a whole number of blocks), and the source pages
// are dropped so the copy does not double them.
void KeepStored(WeightJob& j) {
  Tensor& t = *j.dst;
  if (j.st) {  // Hugging Face rows are in the engine's layout already
    t.ggml_type = uint32_t(j.st->dtype == StDtype::kF16 ? GgmlType::kF16 : GgmlType::kBF16);
    t.view = j.st->data;
    return;
  }
  t.ggml_type = j.gguf->type_id;
  if (j.unpermute_heads <= 0) {
    t.view = j.gguf->data;
    return;
  }
  t.owned_bytes.assign(j.gguf->data, j.gguf->data + j.gguf->n_bytes);
  UnpermuteRopeRowBytes(t.owned_bytes.data(), j.shape[0], int64_t(j.gguf->n_bytes / uint64_t(j.shape[0])),
                        j.unpermute_heads);
  j.gguf_file->DiscardPages(j.gguf->data, j.gguf->n_bytes);
}

// Re-encodes the job's fp32 values (rows are contiguous and whole blocks) in j.convert_to.
Status ConvertValues(WeightJob& j) {
  Tensor& t = *j.dst;
  IMPRESS_ASSIGN_OR_RETURN(const uint64_t bytes, GgmlByteSize(j.convert_to, j.n_elements));
  t.owned_bytes.resize(bytes);
  const Status st = QuantizeRow(j.convert_to, t.data.data(), int64_t(j.n_elements), t.owned_bytes.data());
  if (!st.ok()) return Status(st.code(), j.name + ": " + st.message());
  t.ggml_type = j.convert_to;
  std::vector<float>().swap(t.data);
  return Status::Ok();
}

// Runs the jobs on n_threads threads (this one included), largest first. `first` (may be empty)
// runs before any job, concurrently with them on the other threads.
Status RunJobs(std::vector<WeightJob>& jobs, int n_threads, const ProgressFn& progress,
               const std::function<Status()>& first) {
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return jobs[a].n_elements > jobs[b].n_elements; });
  const size_t n_tasks = jobs.size() + (first ? 1 : 0);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards error and the progress callback
  Status error;
  uint64_t n_done = 0;

  auto worker = [&]() {
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t k = next.fetch_add(1);
      if (k >= n_tasks) return;
      Status st;
      const WeightJob* job = nullptr;
      if (first && k == 0) {
        st = first();
      } else {
        WeightJob& j = jobs[order[k - (first ? 1 : 0)]];
        job = &j;
        j.dst->shape = j.shape;
        if (j.keep_stored) {
          KeepStored(j);
        } else {
          st = ToF32(j);
          if (st.ok() && j.convert_to) st = ConvertValues(j);
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) {
        if (error.ok()) error = st;
        stop = true;
        return;
      }
      if (job) {
        ++n_done;
        if (!ReportProgress(progress, n_done, jobs.size(), job->name)) {
          if (error.ok()) error = Status::Cancelled("model load cancelled");
          stop = true;
          return;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < n_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return error;
}

std::string HexDigest(const XXH128_hash_t& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// A file for the fingerprint: its bytes in memory (a mapping) or, when data is null, on disk.
struct HashInput {
  std::string path;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Hashes files into one XXH3-128 digest: for each, its name (not the folder) and its bytes.
Result<std::string> FingerprintFiles(const std::vector<HashInput>& inputs) {
  XXH3_state_t* state = XXH3_createState();
  if (!state) return Status::ResourceExhausted("cannot allocate a hash state");
  XXH3_128bits_reset(state);
  Status st;
  for (const HashInput& in : inputs) {
    const std::string name = fs::path(in.path).filename().string();
    XXH3_128bits_update(state, name.data(), name.size() + 1);
    if (in.data) {
      XXH3_128bits_update(state, in.data, size_t(in.size));
      continue;
    }
    // Small files (config, tokenizer); read as hostile: a FIFO or link loop is an error.
    auto text = ReadRegularFile(in.path, kMaxJsonFileBytes);
    if (!text.ok()) {
      st = text.status();
      break;
    }
    XXH3_128bits_update(state, text->data(), text->size());
  }
  const std::string hex = HexDigest(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  if (!st.ok()) return st;
  return hex;
}

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t MemAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The memory check of LoadOptions::check_memory: `weights` bytes of weights in memory.
Status CheckFitsMemory(const std::string& path, const ModelConfig& c, uint64_t weights, const LoadOptions& opt) {
  if (!opt.check_memory) return Status::Ok();
  const uint64_t avail = opt.mem_available ? opt.mem_available : MemAvailableBytes();
  if (avail == 0) return Status::Ok();
  const uint64_t kv = KvBytes(c, opt.kv_tokens), need = weights + kv;
  if (need <= avail) return Status::Ok();
  auto mib = [](uint64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; };
  return Status::ResourceExhausted(path + ": the model needs about " + mib(need) + " (weights " + mib(weights) +
                                   " + KV of " + std::to_string(opt.kv_tokens) + " tokens " + mib(kv) + ") but only " +
                                   mib(avail) + " of memory are available (MemAvailable)");
}

// Bytes the jobs' weights take in memory: stored bytes for views, the converted size for
// re-encoded matrices, 4 per value otherwise.
uint64_t JobsMemoryBytes(const std::vector<WeightJob>& jobs) {
  uint64_t n = 0;
  for (const WeightJob& j : jobs) {
    if (j.convert_to) {
      auto b = GgmlByteSize(j.convert_to, j.n_elements);
      n += b.ok() ? *b : j.n_elements * sizeof(float);
    } else {
      n += !j.keep_stored ? j.n_elements * sizeof(float) : j.gguf ? j.gguf->n_bytes : j.st->n_bytes();
    }
  }
  return n;
}

// LoadOptions::weights: every matrix whose rows are whole blocks of the type is re-encoded in it
// (the others stay as they would otherwise load). kInvalidArgument for a type the kernels lack.
Status PlanConversion(std::vector<WeightJob>& jobs, uint32_t type) {
  if (type == 0) return Status::Ok();
  if (!quant::IsSupportedWeightType(type) || !CanQuantize(type)) {
    return Status::InvalidArgument("weights cannot be converted to " + GgmlTypeName(type));
  }
  const int64_t block = quant::BlockElements(static_cast<quant::WeightType>(type));
  for (WeightJob& j : jobs) {
    if (j.shape.size() != 2 || j.shape[1] % block != 0) continue;
    j.convert_to = type;
    j.keep_stored = false;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// GGUF

class GgufLoader {
 public:
  GgufLoader(const GgufFile& f, Model* m, bool dequantize) : f_(f), m_(*m), dequantize_(dequantize) {}

  Status ReadConfig() {
    IMPRESS_ASSIGN_OR_RETURN(arch_, ReadGgufConfig(f_, &m_.config));
    m_.config.qkv_bias = arch_.qkv_bias;
    return Status::Ok();
  }

  // Adds a job for `name` with PyTorch-order `shape`.
  Status Add(const std::string& name, Tensor* dst, std::vector<int64_t> shape, int unpermute_heads = 0) {
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

  Status PlanWeights() {
    const ModelConfig& c = m_.config;
    ModelWeights& w = m_.weights;
    const int64_t E = c.n_embd, F = c.n_ff, V = c.n_vocab;
    const int64_t Q = int64_t(c.n_head) * c.head_dim, KV = int64_t(c.n_head_kv) * c.head_dim;
    IMPRESS_RETURN_IF_ERROR(Add("token_embd.weight", &w.tok_embd, {V, E}));
    IMPRESS_RETURN_IF_ERROR(Add("output_norm.weight", &w.output_norm, {E}));
    if (!c.tied_embeddings) IMPRESS_RETURN_IF_ERROR(Add("output.weight", &w.output, {V, E}));
    w.layers.resize(size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      LayerWeights& l = w.layers[size_t(il)];
      const std::string p = "blk." + std::to_string(il) + ".";
      IMPRESS_RETURN_IF_ERROR(Add(p + "attn_norm.weight", &l.attn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "attn_q.weight", &l.wq, {Q, E}, arch_.permuted_qk ? c.n_head : 0));
      IMPRESS_RETURN_IF_ERROR(Add(p + "attn_k.weight", &l.wk, {KV, E}, arch_.permuted_qk ? c.n_head_kv : 0));
      IMPRESS_RETURN_IF_ERROR(Add(p + "attn_v.weight", &l.wv, {KV, E}));
      if (arch_.qkv_bias) {
        IMPRESS_RETURN_IF_ERROR(Add(p + "attn_q.bias", &l.bq, {Q}));
        IMPRESS_RETURN_IF_ERROR(Add(p + "attn_k.bias", &l.bk, {KV}));
        IMPRESS_RETURN_IF_ERROR(Add(p + "attn_v.bias", &l.bv, {KV}));
      }
      IMPRESS_RETURN_IF_ERROR(Add(p + "attn_output.weight", &l.wo, {E, Q}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "ffn_norm.weight", &l.ffn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "ffn_gate.weight", &l.w_gate, {F, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "ffn_up.weight", &l.w_up, {F, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "ffn_down.weight", &l.w_down, {E, F}));
    }
    return Status::Ok();
  }

  std::vector<WeightJob>& jobs() { return jobs_; }

 private:
  const GgufFile& f_;
  Model& m_;
  const bool dequantize_;
  GgufArch arch_{};
  std::vector<WeightJob> jobs_;
};

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
  auto hash = [&]() -> Status {
    // The whole file, from the mapping the weights are read from (it is in memory anyway).
    XXH128_hash_t h = XXH3_128bits(f.file_data(), size_t(f.file_size()));
    digest = HexDigest(h);
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
  // The mapping moves with the file object (its address is unchanged), so views stay valid.
  if (viewed) m.storage = std::make_shared<GgufFile>(std::move(f));
  if (viewed) m.mapped_files = {&static_cast<const GgufFile*>(m.storage.get())->image()};
  return m;
}

// ---------------------------------------------------------------------------------------------
// Hugging Face folders

class HfLoader {
 public:
  // keep_stored: F16/BF16 matrices of Llama-family models stay views into the mapping.
  HfLoader(std::string dir, const json& cfg, const SafetensorsSet& set, Model* m, bool keep_stored) :
      dir_(std::move(dir)), cfg_path_(dir_ + "/config.json"), cfg_(cfg), set_(set), m_(*m), keep_stored_(keep_stored) {}

  Result<int64_t> Int(const char* key, int64_t max, const int64_t* def = nullptr) {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) {
      if (def) return *def;
      return Status::NotFound(cfg_path_ + ": key '" + key + "' is missing");
    }
    if (!it->is_number_integer()) return Status::Corruption(cfg_path_ + ": key '" + key + "' is not an integer");
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > max) {
      return Status::Corruption(cfg_path_ + ": key '" + key + "' is " + std::to_string(v) + ", expected 1.." +
                                std::to_string(max));
    }
    return v;
  }

  Result<double> Num(const json& obj, const char* key, double def, bool required = false) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return Status::NotFound(cfg_path_ + ": key '" + key + "' is missing");
      return def;
    }
    if (!it->is_number()) return Status::Corruption(cfg_path_ + ": key '" + key + "' is not a number");
    const double v = it->get<double>();
    // Finite as the float the model keeps (1e300 is a finite double but an infinite float).
    if (!std::isfinite(float(v))) {
      return Status::Corruption(cfg_path_ + ": key '" + key + "' is " + std::to_string(v) +
                                ", not a finite 32-bit float");
    }
    return v;
  }

  Result<bool> Bool(const char* key, bool def) {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) return def;
    if (!it->is_boolean()) return Status::Corruption(cfg_path_ + ": key '" + key + "' is not a boolean");
    return it->get<bool>();
  }

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

  // LlamaForCausalLM, or Qwen2ForCausalLM (the same graph with Q/K/V biases) when qkv_bias.
  Status Llama(bool qkv_bias) {
    ModelConfig& c = m_.config;
    c.qkv_bias = qkv_bias;
    c.arch = Arch::kLlama;
    IMPRESS_ASSIGN_OR_RETURN(int64_t E, Int("hidden_size", kMaxEmbd));
    IMPRESS_ASSIGN_OR_RETURN(int64_t L, Int("num_hidden_layers", kMaxLayers));
    IMPRESS_ASSIGN_OR_RETURN(int64_t H, Int("num_attention_heads", kMaxHeads));
    IMPRESS_ASSIGN_OR_RETURN(int64_t HKV, Int("num_key_value_heads", kMaxHeads, &H));
    IMPRESS_ASSIGN_OR_RETURN(int64_t F, Int("intermediate_size", kMaxFf));
    IMPRESS_ASSIGN_OR_RETURN(int64_t V, Int("vocab_size", kMaxVocab));
    const int64_t def_ctx = 2048;
    IMPRESS_ASSIGN_OR_RETURN(int64_t ctx, Int("max_position_embeddings", kMaxCtx, &def_ctx));
    if (H % HKV != 0) {
      return Status::Corruption(cfg_path_ + ": num_attention_heads " + std::to_string(H) +
                                " is not a multiple of num_key_value_heads " + std::to_string(HKV));
    }
    if (!cfg_.contains("head_dim") && E % H != 0) {
      return Status::Corruption(cfg_path_ + ": hidden_size " + std::to_string(E) +
                                " is not a multiple of num_attention_heads " + std::to_string(H));
    }
    const int64_t def_hd = E / H;
    IMPRESS_ASSIGN_OR_RETURN(int64_t HD, Int("head_dim", kMaxEmbd, &def_hd));
    if (HD % 2 != 0) return Status::Corruption(cfg_path_ + ": head dimension " + std::to_string(HD) + " is odd");
    IMPRESS_ASSIGN_OR_RETURN(double eps, Num(cfg_, "rms_norm_eps", 1e-6));
    IMPRESS_ASSIGN_OR_RETURN(double theta, Num(cfg_, "rope_theta", 10000.0));
    if (!(eps > 0 && eps < 1)) return Status::Corruption(cfg_path_ + ": rms_norm_eps is not in (0, 1)");
    if (!(theta > 1)) return Status::Corruption(cfg_path_ + ": rope_theta is not > 1");
    IMPRESS_ASSIGN_OR_RETURN(c.tied_embeddings, Bool("tie_word_embeddings", false));
    auto rs = cfg_.find("rope_scaling");
    if (rs != cfg_.end() && !rs->is_null()) {
      if (!rs->is_object()) return Status::Corruption(cfg_path_ + ": rope_scaling is not an object");
      std::string type;
      for (const char* k : {"rope_type", "type"}) {
        auto t = rs->find(k);
        if (t != rs->end() && t->is_string()) {
          type = t->get<std::string>();
          break;
        }
      }
      IMPRESS_ASSIGN_OR_RETURN(double factor, Num(*rs, "factor", 1.0, type == "linear" || type == "llama3"));
      if (!(factor >= 1)) return Status::Corruption(cfg_path_ + ": rope_scaling.factor is not >= 1");
      c.rope_scaling.factor = float(factor);
      if (type == "linear") {
        c.rope_scaling.type = RopeScalingType::kLinear;
      } else if (type == "llama3") {
        c.rope_scaling.type = RopeScalingType::kLlama3;
        IMPRESS_ASSIGN_OR_RETURN(double lo, Num(*rs, "low_freq_factor", 1.0, true));
        IMPRESS_ASSIGN_OR_RETURN(double hi, Num(*rs, "high_freq_factor", 4.0, true));
        IMPRESS_ASSIGN_OR_RETURN(double orig, Num(*rs, "original_max_position_embeddings", 8192, true));
        if (!(lo > 0 && hi > lo && orig >= 1 && orig <= double(kMaxCtx))) {
          return Status::Corruption(cfg_path_ + ": rope_scaling llama3 parameters are inconsistent");
        }
        c.rope_scaling.low_freq_factor = float(lo);
        c.rope_scaling.high_freq_factor = float(hi);
        c.rope_scaling.original_ctx = int(orig);
      } else if (type == "default" || type.empty()) {
        c.rope_scaling.type = RopeScalingType::kNone;
      } else {
        return Status::Unsupported(cfg_path_ + ": rope_scaling type '" + type +
                                   "' is not supported (linear or llama3)");
      }
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
    c.rope_theta = float(theta);

    ModelWeights& w = m_.weights;
    const int64_t Q = H * HD, KV = HKV * HD;
    IMPRESS_RETURN_IF_ERROR(Add("model.embed_tokens.weight", &w.tok_embd, {V, E}));
    IMPRESS_RETURN_IF_ERROR(Add("model.norm.weight", &w.output_norm, {E}));
    if (!c.tied_embeddings) IMPRESS_RETURN_IF_ERROR(Add("lm_head.weight", &w.output, {V, E}));
    w.layers.resize(size_t(L));
    for (int il = 0; il < L; ++il) {
      LayerWeights& l = w.layers[size_t(il)];
      const std::string p = "model.layers." + std::to_string(il) + ".";
      IMPRESS_RETURN_IF_ERROR(Add(p + "input_layernorm.weight", &l.attn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.q_proj.weight", &l.wq, {Q, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.k_proj.weight", &l.wk, {KV, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.v_proj.weight", &l.wv, {KV, E}));
      if (qkv_bias) {
        IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.q_proj.bias", &l.bq, {Q}));
        IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.k_proj.bias", &l.bk, {KV}));
        IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.v_proj.bias", &l.bv, {KV}));
      }
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.o_proj.weight", &l.wo, {E, Q}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "post_attention_layernorm.weight", &l.ffn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "mlp.gate_proj.weight", &l.w_gate, {F, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "mlp.up_proj.weight", &l.w_up, {F, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "mlp.down_proj.weight", &l.w_down, {E, F}));
    }
    return Status::Ok();
  }

  Status Opt() {
    keep_stored_ = false;  // OPT's weights are converted to fp32 as before
    ModelConfig& c = m_.config;
    c.arch = Arch::kOpt;
    IMPRESS_ASSIGN_OR_RETURN(int64_t E, Int("hidden_size", kMaxEmbd));
    IMPRESS_ASSIGN_OR_RETURN(int64_t L, Int("num_hidden_layers", kMaxLayers));
    IMPRESS_ASSIGN_OR_RETURN(int64_t H, Int("num_attention_heads", kMaxHeads));
    IMPRESS_ASSIGN_OR_RETURN(int64_t F, Int("ffn_dim", kMaxFf));
    IMPRESS_ASSIGN_OR_RETURN(int64_t V, Int("vocab_size", kMaxVocab));
    IMPRESS_ASSIGN_OR_RETURN(int64_t ctx, Int("max_position_embeddings", kMaxCtx));
    IMPRESS_ASSIGN_OR_RETURN(int64_t P, Int("word_embed_proj_dim", kMaxEmbd, &E));
    IMPRESS_ASSIGN_OR_RETURN(bool pre_ln, Bool("do_layer_norm_before", true));
    IMPRESS_ASSIGN_OR_RETURN(bool bias, Bool("enable_bias", true));
    IMPRESS_ASSIGN_OR_RETURN(bool affine, Bool("layer_norm_elementwise_affine", true));
    if (E % H != 0) {
      return Status::Corruption(cfg_path_ + ": hidden_size " + std::to_string(E) +
                                " is not a multiple of num_attention_heads " + std::to_string(H));
    }
    auto act = cfg_.find("activation_function");
    if (act != cfg_.end() && !(act->is_string() && act->get<std::string>() == "relu")) {
      return Status::Unsupported(cfg_path_ + ": activation_function must be 'relu' for OPT");
    }
    if (!bias || !affine) {
      return Status::Unsupported(cfg_path_ + ": OPT without biases or without affine layer norms is not supported");
    }
    c.n_embd = int(E);
    c.n_layer = int(L);
    c.n_head = int(H);
    c.n_head_kv = int(H);
    c.head_dim = int(E / H);
    c.n_ff = int(F);
    c.n_vocab = int(V);
    c.n_ctx_train = int(ctx);
    c.norm_eps = 1e-5f;  // torch.nn.LayerNorm's default, which OPT uses
    c.pos_offset = 2;
    c.word_embed_proj_dim = P == E ? 0 : int(P);
    c.do_layer_norm_before = pre_ln;
    c.tied_embeddings = true;  // OPT's lm_head is always the input embedding

    // OPTForCausalLM names tensors model.decoder.*; a bare OPTModel decoder.*.
    std::string d = "model.decoder.";
    if (!set_.Find(d + "embed_tokens.weight") && set_.Find("decoder.embed_tokens.weight")) d = "decoder.";
    ModelWeights& w = m_.weights;
    IMPRESS_RETURN_IF_ERROR(Add(d + "embed_tokens.weight", &w.tok_embd, {V, P}));
    IMPRESS_RETURN_IF_ERROR(Add(d + "embed_positions.weight", &w.pos_embd, {ctx + c.pos_offset, E}));
    if (P != E) {
      IMPRESS_RETURN_IF_ERROR(Add(d + "project_in.weight", &w.project_in, {E, P}));
      IMPRESS_RETURN_IF_ERROR(Add(d + "project_out.weight", &w.project_out, {P, E}));
    }
    // Transformers drops the final layer norm of post-LN models (OPT-350m).
    if (pre_ln) {
      IMPRESS_RETURN_IF_ERROR(Add(d + "final_layer_norm.weight", &w.output_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(d + "final_layer_norm.bias", &w.output_norm_b, {E}));
    }
    w.layers.resize(size_t(L));
    for (int il = 0; il < L; ++il) {
      LayerWeights& l = w.layers[size_t(il)];
      const std::string p = d + "layers." + std::to_string(il) + ".";
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn_layer_norm.weight", &l.attn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn_layer_norm.bias", &l.attn_norm_b, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.q_proj.weight", &l.wq, {E, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.q_proj.bias", &l.bq, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.k_proj.weight", &l.wk, {E, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.k_proj.bias", &l.bk, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.v_proj.weight", &l.wv, {E, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.v_proj.bias", &l.bv, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.out_proj.weight", &l.wo, {E, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "self_attn.out_proj.bias", &l.bo, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "final_layer_norm.weight", &l.ffn_norm, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "final_layer_norm.bias", &l.ffn_norm_b, {E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "fc1.weight", &l.w_up, {F, E}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "fc1.bias", &l.b_up, {F}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "fc2.weight", &l.w_down, {E, F}));
      IMPRESS_RETURN_IF_ERROR(Add(p + "fc2.bias", &l.b_down, {E}));
    }
    return Status::Ok();
  }

  std::vector<WeightJob>& jobs() { return jobs_; }

 private:
  std::string dir_;
  std::string cfg_path_;
  const json& cfg_;
  const SafetensorsSet& set_;
  Model& m_;
  bool keep_stored_ = false;
  std::vector<WeightJob> jobs_;
};

Result<Model> LoadHfFolder(const std::string& dir, const ProgressFn& progress, const LoadOptions& opt) {
  const std::string cfg_path = dir + "/config.json";
  auto parsed = ReadJsonFile(cfg_path);
  if (parsed.status().code() == Status::Code::kNotFound) {
    return Status::NotFound(dir + ": no config.json (not a Hugging Face model folder)");
  }
  if (!parsed.ok()) return parsed.status();
  const json cfg = std::move(*parsed);
  if (!cfg.is_object()) return Status::Corruption(cfg_path + ": not a JSON object");

  std::string arch;
  if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    arch = (*a)[0].get<std::string>();
  } else if (auto t = cfg.find("model_type"); t != cfg.end() && t->is_string()) {
    arch = t->get<std::string>() == "llama"   ? "LlamaForCausalLM"
           : t->get<std::string>() == "qwen2" ? "Qwen2ForCausalLM"
           : t->get<std::string>() == "opt"   ? "OPTForCausalLM"
                                              : t->get<std::string>();
  } else {
    return Status::NotFound(cfg_path + ": neither 'architectures' nor 'model_type' says what the model is");
  }

  Model m;
  m.path = dir;
  IMPRESS_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::OpenFolder(dir));
  HfLoader loader(dir, cfg, set, &m, !opt.dequantize);
  if (arch == "LlamaForCausalLM" || arch == "Qwen2ForCausalLM") {
    IMPRESS_RETURN_IF_ERROR(loader.Llama(arch == "Qwen2ForCausalLM"));
  } else if (arch == "OPTForCausalLM") {
    IMPRESS_RETURN_IF_ERROR(loader.Opt());
  } else {
    return Status::Unsupported(cfg_path + ": architecture '" + arch +
                               "' is not supported (LlamaForCausalLM, Qwen2ForCausalLM or OPTForCausalLM)");
  }
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

}  // namespace

Status CheckNormWeights(const Model& model) {
  // Norm weights are small (n_embd each) and a single NaN in one silences the whole model, so
  // all are checked; the large matrices are not (a full scan would double the load time).
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
  IMPRESS_RETURN_IF_ERROR(check(w.output_norm, "the output norm weight"));
  IMPRESS_RETURN_IF_ERROR(check(w.output_norm_b, "the output norm bias"));
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& l = w.layers[il];
    const std::string layer = "layer " + std::to_string(il) + "'s ";
    IMPRESS_RETURN_IF_ERROR(check(l.attn_norm, layer + "attention norm weight"));
    IMPRESS_RETURN_IF_ERROR(check(l.attn_norm_b, layer + "attention norm bias"));
    IMPRESS_RETURN_IF_ERROR(check(l.bq, layer + "query bias"));
    IMPRESS_RETURN_IF_ERROR(check(l.bk, layer + "key bias"));
    IMPRESS_RETURN_IF_ERROR(check(l.bv, layer + "value bias"));
    IMPRESS_RETURN_IF_ERROR(check(l.ffn_norm, layer + "FFN norm weight"));
    IMPRESS_RETURN_IF_ERROR(check(l.ffn_norm_b, layer + "FFN norm bias"));
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

uint64_t KvBytes(const ModelConfig& c, int64_t n_tokens) {
  return uint64_t(std::max<int64_t>(n_tokens, 0)) * uint64_t(c.n_layer) * uint64_t(c.n_head_kv) * uint64_t(c.head_dim) *
         2 * sizeof(uint16_t);
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
  if (m.ok() && opt.weights != 0 && !opt.dequantize) m->config.fingerprint += "+" + GgmlTypeName(opt.weights);
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
