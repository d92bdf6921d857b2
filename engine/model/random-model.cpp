// RandomModel and KnownModelShape: see random-model.h.
#include "engine/model/random-model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/model/arch.h"

namespace impress {

namespace {

constexpr size_t kBlockValues = size_t(1) << 16;  // values per independently seeded block
constexpr int64_t kMaxValues = int64_t(1) << 40;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One tensor to fill: offset + scale * N(0, 1), element by element.
struct Fill {
  Tensor* t;
  float scale;
  float offset;
};

// The tensors of `c`, in the order of its architecture's table (the order is part of the
// values: tensor i's blocks are seeded with i), shaped but not yet filled.
std::vector<Fill> Plan(const ModelConfig& c, float linear_gain, ModelWeights& w) {
  const ArchSpec& arch = c.arch.spec();
  std::vector<Fill> fills;
  auto add = [&](const TensorSpec& t, int il) {
    if (!TensorPresent(t, c)) return;
    Tensor& dst = SpecTensor(t, w, il);
    dst.shape = TensorShape(t, c);
    switch (t.role) {
      case Role::kEmbedding: fills.push_back({&dst, 1.0f, 0.0f}); break;
      case Role::kPositions: fills.push_back({&dst, 0.5f, 0.0f}); break;
      case Role::kLinear: fills.push_back({&dst, linear_gain / std::sqrt(float(dst.shape.back())), 0.0f}); break;
      case Role::kNorm: fills.push_back({&dst, 0.1f, 1.0f}); break;
      case Role::kBias: fills.push_back({&dst, 0.1f, 0.0f}); break;
    }
  };
  for (const TensorSpec& t : arch.model_tensors) add(t, 0);
  w.layers.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il)
    for (const TensorSpec& t : arch.layer_tensors) add(t, il);
  return fills;
}

int64_t Elements(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;  // no overflow: each dimension < 2^31, at most two
  return n;
}

// Fills every planned tensor, block by block, on n_threads workers.
void FillAll(const std::vector<Fill>& fills, uint64_t seed, int n_threads) {
  std::vector<std::pair<uint32_t, uint64_t>> jobs;  // (fill, block)
  for (uint32_t i = 0; i < fills.size(); ++i) {
    const size_t n = fills[i].t->data.size();
    for (uint64_t b = 0; b * kBlockValues < n; ++b) jobs.emplace_back(i, b);
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < jobs.size();) {
      const auto [i, b] = jobs[j];
      const Fill& f = fills[i];
      std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64((uint64_t(i) << 40) | b)));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float>& d = f.t->data;
      const size_t end = std::min(d.size(), size_t(b + 1) * kBlockValues);
      for (size_t k = size_t(b) * kBlockValues; k < end; ++k) d[k] = f.offset + f.scale * nd(rng);
    }
  };
  n_threads = int(std::min<size_t>(size_t(std::max(1, n_threads)), std::max<size_t>(1, jobs.size())));
  std::vector<std::thread> workers;
  for (int w = 1; w < n_threads; ++w) workers.emplace_back(work);
  work();
  for (auto& t : workers) t.join();
}

}  // namespace

Result<Model> RandomModel(const ModelConfig& config, const RandomModelOptions& options) {
  const ModelConfig& c = config;
  const bool learned_positions = c.arch.spec().graph.position == PositionKind::kLearned;
  if (c.n_vocab <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 ||
      c.n_ff <= 0 || c.n_head % c.n_head_kv != 0 || c.word_embed_proj_dim < 0 ||
      (learned_positions && (c.n_ctx_train <= 0 || c.pos_offset < 0)))
    return Status::InvalidArgument("random model '" + c.name + "': bad dimensions (n_vocab " +
                                   std::to_string(c.n_vocab) + ", n_embd " + std::to_string(c.n_embd) + ", n_layer " +
                                   std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_head_kv " +
                                   std::to_string(c.n_head_kv) + ", head_dim " + std::to_string(c.head_dim) +
                                   ", n_ff " + std::to_string(c.n_ff) + ")");
  Model m;
  m.config = c;
  const std::vector<Fill> fills = Plan(c, options.linear_gain, m.weights);
  int64_t total = 0;
  for (const Fill& f : fills) {
    total += Elements(*f.t);
    if (total > kMaxValues) return Status::InvalidArgument("random model '" + c.name + "': more than 2^40 weights");
  }
  for (const Fill& f : fills) f.t->data.resize(size_t(Elements(*f.t)));
  const int n_threads = options.n_threads > 0 ? options.n_threads : int(std::thread::hardware_concurrency());
  FillAll(fills, options.seed, n_threads);
  return m;
}

const char* KnownModelShapeNames() { return "smollm2|llama2-7b|llama-3.2-1b|llama-3.1-8b|qwen2.5-0.5b|qwen3-0.6b"; }

Result<ModelConfig> KnownModelShape(std::string_view name) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.norm_eps = 1e-5f;
  if (name == "smollm2") {  // SmolLM2-135M
    c.name = "random (SmolLM2-135M shapes)";
    c.n_vocab = 49152, c.n_ctx_train = 8192, c.n_embd = 576, c.n_layer = 30, c.n_head = 9, c.n_head_kv = 3;
    c.head_dim = 64, c.n_ff = 1536, c.rope_theta = 100000.0f, c.tied_embeddings = true;
  } else if (name == "llama2-7b") {  // the paper's Llama-2-7B
    c.name = "random (Llama-2-7B shapes)";
    c.n_vocab = 32000, c.n_ctx_train = 4096, c.n_embd = 4096, c.n_layer = 32, c.n_head = 32, c.n_head_kv = 32;
    c.head_dim = 128, c.n_ff = 11008, c.rope_theta = 10000.0f;
  } else if (name == "llama-3.2-1b") {  // Llama-3.2-1B: tied, llama3 RoPE scaling
    c.name = "random (Llama-3.2-1B shapes)";
    c.n_vocab = 128256, c.n_ctx_train = 131072, c.n_embd = 2048, c.n_layer = 16, c.n_head = 32, c.n_head_kv = 8;
    c.head_dim = 64, c.n_ff = 8192, c.rope_theta = 500000.0f, c.tied_embeddings = true;
    c.rope_scaling = {RopeScalingType::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  } else if (name == "llama-3.1-8b") {
    c.name = "random (Llama-3.1-8B shapes)";
    c.n_vocab = 128256, c.n_ctx_train = 131072, c.n_embd = 4096, c.n_layer = 32, c.n_head = 32, c.n_head_kv = 8;
    c.head_dim = 128, c.n_ff = 14336, c.rope_theta = 500000.0f;
    c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  } else if (name == "qwen2.5-0.5b") {  // Qwen2.5-0.5B: tied, Q/K/V biases
    c.name = "random (Qwen2.5-0.5B shapes)";
    c.n_vocab = 151936, c.n_ctx_train = 32768, c.n_embd = 896, c.n_layer = 24, c.n_head = 14, c.n_head_kv = 2;
    c.head_dim = 64, c.n_ff = 4864, c.rope_theta = 1000000.0f, c.tied_embeddings = true;
    c.arch = Arch(FindArch("qwen2"));
    c.norm_eps = 1e-6f;
  } else if (name == "qwen3-0.6b") {  // Qwen3-0.6B: tied, per-head Q/K norms, 16 heads of 128 over 1024
    c.name = "random (Qwen3-0.6B shapes)";
    c.n_vocab = 151936, c.n_ctx_train = 40960, c.n_embd = 1024, c.n_layer = 28, c.n_head = 16, c.n_head_kv = 8;
    c.head_dim = 128, c.n_ff = 3072, c.rope_theta = 1000000.0f, c.tied_embeddings = true;
    c.arch = Arch(FindArch("qwen3"));
    c.norm_eps = 1e-6f;
  } else {
    return Status::InvalidArgument("unknown model shape '" + std::string(name) + "' (" + KnownModelShapeNames() + ")");
  }
  return c;
}

}  // namespace impress
