#include "engine/model/quantize-model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numbers>
#include <thread>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/dequant.h"
#include "engine/model/gguf-writer.h"
#include "engine/model/gguf.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-blocks.h"

namespace impress {
namespace {

struct Recipe {
  const char* name;
  GgmlType type;   // every matrix (q4_k_m: the default one)
  uint32_t ftype;  // general.file_type, as llama.cpp numbers its file types
};

constexpr Recipe kRecipes[] = {
    {"q8_0", GgmlType::kQ8_0, 7},  {"q4_0", GgmlType::kQ4_0, 2},  {"q4_1", GgmlType::kQ4_1, 3},
    {"q5_0", GgmlType::kQ5_0, 8},  {"q5_1", GgmlType::kQ5_1, 9},  {"q4_k", GgmlType::kQ4_K, 14},
    {"q5_k", GgmlType::kQ5_K, 16}, {"q6_k", GgmlType::kQ6_K, 18}, {"q4_k_m", GgmlType::kQ4_K, 15},
    {"f16", GgmlType::kF16, 1},    {"f32", GgmlType::kF32, 0},
};

const Recipe* FindRecipe(std::string_view name) {
  for (const Recipe& r : kRecipes)
    if (name == r.name) return &r;
  return nullptr;
}

// The type a row of n_cols values can take when `t` needs longer blocks.
GgmlType Fallback(GgmlType t, int64_t n_cols) {
  if (n_cols % 256 != 0) {
    if (t == GgmlType::kQ4_K) t = GgmlType::kQ5_0;
    if (t == GgmlType::kQ5_K) t = GgmlType::kQ5_1;
    if (t == GgmlType::kQ6_K) t = GgmlType::kQ8_0;
  }
  if (n_cols % 32 != 0 && t != GgmlType::kF32 && t != GgmlType::kBF16) t = GgmlType::kF16;
  return t;
}

enum class Kind { kEmbd, kMatrix, kVector };

// One tensor of the output file; `src` is the source model's tensor (null for random weights).
struct Planned {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch order
  int layer = -1;
  Kind kind = Kind::kMatrix;
  float scale = 0;  // random weights: N(offset, scale^2)
  float offset = 0;
  const Tensor* src = nullptr;
  int permute_heads = 0;        // > 0: rows reordered for llama.cpp's interleaved RoPE
  std::vector<float> constant;  // values known up front (rope_freqs)
};

// The RoPE frequency divisors a llama3 (or linear) scaling amounts to, as rope_freqs.weight
// carries them (the engine divides the base frequencies by them).
std::vector<float> RopeFactors(const ModelConfig& c) {
  if (!c.rope_freq_factors.empty()) return c.rope_freq_factors;
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kLlama3) return {};
  std::vector<float> out(size_t(c.head_dim / 2));
  for (size_t i = 0; i < out.size(); ++i) {
    const double f = 1.0 / std::pow(double(c.rope_theta), 2.0 * double(i) / c.head_dim);
    const double low_wavelen = s.original_ctx / s.low_freq_factor, high_wavelen = s.original_ctx / s.high_freq_factor;
    const double wavelen = 2.0 * std::numbers::pi / f;
    double scaled = f;
    if (wavelen > low_wavelen) {
      scaled = f / s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      scaled = (1 - smooth) * f / s.factor + smooth * f;
    }
    out[i] = float(f / scaled);
  }
  return out;
}

// Whether every tensor of c's architecture has a GGUF name (and the architecture one).
bool HasGgufNames(const ModelConfig& c) {
  const ArchSpec& a = c.arch.spec();
  if (!a.gguf_name) return false;
  for (const auto* list : {&a.model_tensors, &a.layer_tensors})
    for (const TensorSpec& t : *list)
      if (!t.gguf) return false;
  return true;
}

// The tensors of `c`'s architecture table that a model of that configuration has, under their
// GGUF names (rope_freqs.weight after the token embedding when the RoPE scaling asks for it).
std::vector<Planned> Plan(const ModelConfig& c, const ModelWeights* w) {
  const ArchSpec& arch = c.arch.spec();
  std::vector<Planned> p;
  auto add = [&](const TensorSpec& spec, const std::string& prefix, int layer) {
    if (!TensorPresent(spec, c)) return;
    Planned t;
    t.name = prefix + spec.gguf;
    t.layer = layer;
    t.src = w ? &SpecTensor(spec, *w, layer < 0 ? 0 : layer) : nullptr;
    t.shape = TensorShape(spec, c);
    t.permute_heads = spec.gguf_permute == Permute::kQHeads    ? c.n_head
                      : spec.gguf_permute == Permute::kKVHeads ? c.n_head_kv
                                                               : 0;
    switch (spec.role) {
      case Role::kEmbedding:
      case Role::kPositions: t.kind = Kind::kEmbd, t.scale = 0; break;  // set by the caller for random weights
      case Role::kLinear: t.kind = Kind::kMatrix, t.scale = 1.0f / std::sqrt(float(t.shape.back())); break;
      case Role::kNorm: t.kind = Kind::kVector, t.scale = 0.1f, t.offset = 1.0f; break;
      case Role::kBias: t.kind = Kind::kVector, t.scale = 0.1f; break;
    }
    p.push_back(std::move(t));
    if (spec.role != Role::kEmbedding) return;
    if (std::vector<float> f = RopeFactors(c); !f.empty()) {
      Planned r;
      r.name = "rope_freqs.weight";
      r.layer = -1;
      r.kind = Kind::kVector;
      r.shape = {int64_t(f.size())};
      r.constant = std::move(f);
      p.push_back(std::move(r));
    }
  };
  for (const TensorSpec& t : arch.model_tensors) add(t, "", -1);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    for (const TensorSpec& t : arch.layer_tensors) add(t, b, il);
  }
  return p;
}

// llama.cpp's converter order of Q/K rows: GGUF row (h, j, i) is Hugging Face row (h, i, j),
// i in {0, 1}, j < head_dim / 2 (the inverse of UnpermuteRopeRows).
void PermuteRopeRows(float* w, int64_t n_rows, int64_t n_cols, int n_head) {
  const int64_t hd = n_rows / n_head, half = hd / 2;
  std::vector<float> tmp(size_t(hd * n_cols));
  for (int h = 0; h < n_head; ++h) {
    float* head = w + h * hd * n_cols;
    std::memcpy(tmp.data(), head, tmp.size() * sizeof(float));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(head + (2 * j + i) * n_cols, tmp.data() + (i * half + j) * n_cols, size_t(n_cols) * sizeof(float));
  }
}

// Runs fn(begin, end) over [0, n) split into n_threads contiguous parts.
void ParallelFor(int64_t n, int n_threads, const std::function<void(int64_t, int64_t)>& fn) {
  const int k = int(std::clamp<int64_t>(n_threads, 1, std::max<int64_t>(n, 1)));
  std::vector<std::thread> threads;
  for (int t = 1; t < k; ++t) threads.emplace_back(fn, n * t / k, n * (t + 1) / k);
  fn(0, n / k);
  for (auto& th : threads) th.join();
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Random values: an approximately normal variate per 64-bit draw (the sum of its four 16-bit
// parts, scaled to unit variance); chunks of 2^16 values are seeded on their own, so the values
// do not depend on the thread count.
void RandomValues(const Planned& t, uint64_t seed, int n_threads, float* out, int64_t n) {
  uint64_t h = seed;
  for (char ch : t.name) h = SplitMix64(h ^ uint8_t(ch));
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  ParallelFor(n_chunks, n_threads, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t s = SplitMix64(h + uint64_t(c));
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        s = SplitMix64(s);
        const float sum = float(s & 0xffff) + float(s >> 16 & 0xffff) + float(s >> 32 & 0xffff) + float(s >> 48);
        out[i] = t.offset + t.scale * (sum / 65536.0f - 2.0f) * 1.7320508f;
      }
    }
  });
}

void SetArchKeys(const ModelConfig& c, const Recipe& r, GgufWriter* w) {
  const std::string a = c.arch.spec().gguf_name;
  w->SetString("general.architecture", a);
  w->SetString("general.name", c.name);
  w->SetU32("general.file_type", r.ftype);
  w->SetU32("general.quantization_version", 2);
  w->SetU32(a + ".context_length", uint32_t(c.n_ctx_train > 0 ? c.n_ctx_train : 4096));
  w->SetU32(a + ".embedding_length", uint32_t(c.n_embd));
  w->SetU32(a + ".block_count", uint32_t(c.n_layer));
  w->SetU32(a + ".feed_forward_length", uint32_t(c.n_ff));
  w->SetU32(a + ".attention.head_count", uint32_t(c.n_head));
  w->SetU32(a + ".attention.head_count_kv", uint32_t(c.n_head_kv));
  w->SetU32(a + ".rope.dimension_count", uint32_t(c.head_dim));
  if (int64_t(c.head_dim) * c.n_head != c.n_embd) {
    w->SetU32(a + ".attention.key_length", uint32_t(c.head_dim));
    w->SetU32(a + ".attention.value_length", uint32_t(c.head_dim));
  }
  w->SetF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  w->SetF32(a + ".rope.freq_base", c.rope_theta);
  w->SetU32(a + ".vocab_size", uint32_t(c.n_vocab));
  if (c.rope_scaling.type == RopeScalingType::kLinear) {
    w->SetString(a + ".rope.scaling.type", "linear");
    w->SetF32(a + ".rope.scaling.factor", c.rope_scaling.factor);
  }
}

// Copies the keys of `src` that describe no architecture (general.*, tokenizer.*) except
// those SetArchKeys writes; with tokenizer_only, the tokenizer.* keys alone.
void CopyKeys(const GgufFile& src, bool tokenizer_only, GgufWriter* w) {
  auto arch = src.GetString("general.architecture");
  for (const GgufKv& kv : src.kvs()) {
    const std::string& k = kv.key;
    if (k.rfind("tokenizer.", 0) != 0) {
      if (tokenizer_only || (arch.ok() && k.rfind(*arch + ".", 0) == 0)) continue;
      if (k == "general.architecture" || k == "general.file_type" || k == "general.quantization_version" ||
          k == "general.alignment" || k == "general.name") {
        continue;
      }
    }
    w->SetValue(k, kv.value);
  }
}

// Adds the planned tensors with the recipe's types and writes the file; `values` gives each
// tensor's fp32 values (PyTorch layout, Hugging Face row order).
Status WritePlanned(const std::vector<Planned>& plan, const ModelConfig& c, const Recipe& r, GgufWriter* w,
                    const std::string& out, int n_threads,
                    const std::function<Status(const Planned&, std::vector<float>*)>& values,
                    const ProgressFn& progress) {
  std::vector<uint32_t> types;
  for (const Planned& t : plan) {
    const bool is_output = t.name == "output.weight" || (c.tied_embeddings && t.kind == Kind::kEmbd);
    types.push_back(RecipeType(r.name, t.name, t.layer, c.n_layer, t.shape.back(), t.kind != Kind::kVector, is_output));
    IMPRESS_RETURN_IF_ERROR(w->AddTensor(t.name, t.shape, types.back()));
  }
  std::vector<float> f32;
  auto fill = [&](size_t i, std::vector<uint8_t>* bytes) -> Status {
    const Planned& t = plan[i];
    IMPRESS_RETURN_IF_ERROR(values(t, &f32));
    const int64_t cols = t.shape.back(), rows = int64_t(f32.size()) / cols;
    if (t.permute_heads > 0) PermuteRopeRows(f32.data(), rows, cols, t.permute_heads);
    IMPRESS_ASSIGN_OR_RETURN(const uint64_t row_bytes, GgmlByteSize(types[i], uint64_t(cols)));
    bytes->resize(size_t(row_bytes * uint64_t(rows)));
    std::vector<Status> errors(size_t(std::max(1, n_threads)));
    std::atomic<int> slot{0};
    ParallelFor(rows, n_threads, [&](int64_t r0, int64_t r1) {
      Status& err = errors[size_t(slot.fetch_add(1))];
      for (int64_t row = r0; row < r1 && err.ok(); ++row) {
        err = QuantizeRow(types[i], f32.data() + row * cols, cols, bytes->data() + uint64_t(row) * row_bytes);
      }
    });
    for (const Status& st : errors)
      if (!st.ok()) return Status(st.code(), "tensor '" + t.name + "': " + st.message());
    return Status::Ok();
  };
  return w->Write(out, fill, progress);
}

}  // namespace

const char* QuantizeRecipes() { return "q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m|f16|f32"; }

Status CheckRecipe(std::string_view recipe) {
  if (FindRecipe(recipe)) return Status::Ok();
  return Status::InvalidArgument("unknown quantization type '" + std::string(recipe) + "' (" + QuantizeRecipes() + ")");
}

uint32_t RecipeType(std::string_view recipe, std::string_view gguf_name, int layer, int n_layers, int64_t n_cols,
                    bool is_matrix, bool is_output) {
  const Recipe* r = FindRecipe(recipe);
  if (!r || !is_matrix) return uint32_t(GgmlType::kF32);
  GgmlType t = r->type;
  if (recipe == "q4_k_m") {
    const bool more_bits =
        layer >= 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2);
    if (is_output) t = GgmlType::kQ6_K;
    if (more_bits && (gguf_name.ends_with(".attn_v.weight") || gguf_name.ends_with(".ffn_down.weight"))) {
      t = GgmlType::kQ6_K;
    }
  }
  return uint32_t(Fallback(t, n_cols));
}

Status QuantizeModel(const std::string& in, const std::string& out, const QuantizeOptions& options,
                     const ProgressFn& progress) {
  IMPRESS_RETURN_IF_ERROR(CheckRecipe(options.type));
  const Recipe& r = *FindRecipe(options.type);
  IMPRESS_ASSIGN_OR_RETURN(Model m, LoadModel(in, {}, LoadOptions{.n_threads = options.n_threads}));
  const ModelConfig& c = m.config;
  if (!HasGgufNames(c)) {
    return Status::Unsupported(in + ": architecture '" + c.arch.name() + "' has no GGUF names (GGUF files are " +
                               SupportedGgufArchs() + ")");
  }
  GgufWriter w;
  std::error_code ec;
  if (!std::filesystem::is_directory(in, ec)) {
    IMPRESS_ASSIGN_OR_RETURN(GgufFile src, GgufFile::Open(in));
    CopyKeys(src, false, &w);
  } else {
    spdlog::warn("{}: the tokenizer of a Hugging Face folder is not converted; {} holds weights only", in, out);
  }
  SetArchKeys(c, r, &w);
  const std::vector<Planned> plan = Plan(c, &m.weights);
  auto values = [&](const Planned& t, std::vector<float>* v) -> Status {
    if (!t.constant.empty()) {
      *v = t.constant;
      return Status::Ok();
    }
    IMPRESS_ASSIGN_OR_RETURN(*v, TensorValues(*t.src));
    return Status::Ok();
  };
  return WritePlanned(plan, c, r, &w, out, options.n_threads, values, progress);
}

Status WriteRandomModel(const ModelConfig& config, const std::string& out, const QuantizeOptions& options,
                        const RandomWeightsOptions& random, const ProgressFn& progress) {
  IMPRESS_RETURN_IF_ERROR(CheckRecipe(options.type));
  const Recipe& r = *FindRecipe(options.type);
  const ModelConfig& c = config;
  if (!HasGgufNames(c) || c.n_vocab < 1 || c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_head_kv < 1 ||
      c.head_dim < 2 || c.head_dim % 2 != 0 || c.n_ff < 1 || c.n_head % c.n_head_kv != 0) {
    return Status::InvalidArgument("random model '" + c.name + "': not a well-formed Llama configuration");
  }
  GgufWriter w;
  if (!random.tokenizer_from.empty()) {
    IMPRESS_ASSIGN_OR_RETURN(GgufFile src, GgufFile::Open(random.tokenizer_from));
    IMPRESS_ASSIGN_OR_RETURN(const uint64_t n_tokens, src.GetArrayLength("tokenizer.ggml.tokens"));
    if (n_tokens > uint64_t(c.n_vocab)) {
      return Status::InvalidArgument(random.tokenizer_from + ": its " + std::to_string(n_tokens) +
                                     " tokens do not fit a vocabulary of " + std::to_string(c.n_vocab));
    }
    CopyKeys(src, true, &w);
  }
  SetArchKeys(c, r, &w);
  std::vector<Planned> plan = Plan(c, nullptr);
  for (Planned& t : plan)
    if (t.kind == Kind::kEmbd) t.scale = random.embd_scale;
  auto values = [&](const Planned& t, std::vector<float>* v) -> Status {
    if (!t.constant.empty()) {
      *v = t.constant;
      return Status::Ok();
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    v->resize(size_t(n));
    RandomValues(t, random.seed, options.n_threads, v->data(), n);
    return Status::Ok();
  };
  return WritePlanned(plan, c, r, &w, out, options.n_threads, values, progress);
}

}  // namespace impress
