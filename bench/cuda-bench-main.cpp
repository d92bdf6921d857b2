// impress-cuda-bench: the forward pass on the CUDA backend (RunCudaEngineBenchmark), on a model
// file or on random weights of a known model's shapes (speed does not depend on the values; a
// device machine may not hold the model file).
//
//   impress-cuda-bench [--model PATH | --shape smollm2|llama2-7b] [--gemm fp32|tf32|f16|bf16]
//                      [--short N] [--long N] [--decode N] [--repeats N] [--json]
//
// Exit status 0 on success; 1 with a message on stderr otherwise (2 for bad arguments).
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda-bench.h"
#include "engine/model/model-loader.h"

namespace impress {
namespace {

// Fills t with small pseudo-random values (xorshift; fast enough for billions of values).
void FillRandom(Tensor& t, std::vector<int64_t> shape, float scale, uint64_t seed) {
  t.shape = shape;
  int64_t n = 1;
  for (auto d : shape) n *= d;
  t.data.resize(size_t(n));
  const int n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (int w = 0; w < n_threads; ++w)
    workers.emplace_back([&, w] {
      uint64_t x = seed * 0x9E3779B97F4A7C15ull + uint64_t(w) + 1;
      const size_t b = size_t(n) * w / n_threads, e = size_t(n) * (w + 1) / n_threads;
      for (size_t i = b; i < e; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t.data[i] = scale * (float(x >> 40) / float(1 << 24) - 0.5f);
      }
    });
  for (auto& th : workers) th.join();
}

Result<Model> ShapeModel(const std::string& shape) {
  Model m;
  ModelConfig& c = m.config;
  c.arch = Arch::kLlama;
  if (shape == "smollm2") {  // SmolLM2-135M
    c.name = "random (SmolLM2-135M shapes)";
    c.n_vocab = 49152, c.n_ctx_train = 8192, c.n_embd = 576, c.n_layer = 30, c.n_head = 9, c.n_head_kv = 3;
    c.head_dim = 64, c.n_ff = 1536, c.rope_theta = 100000.0f, c.tied_embeddings = true;
  } else if (shape == "llama2-7b") {  // the paper's Llama-2-7B
    c.name = "random (Llama-2-7B shapes)";
    c.n_vocab = 32000, c.n_ctx_train = 4096, c.n_embd = 4096, c.n_layer = 32, c.n_head = 32, c.n_head_kv = 32;
    c.head_dim = 128, c.n_ff = 11008, c.rope_theta = 10000.0f;
  } else {
    return Status::InvalidArgument("unknown --shape '" + shape + "' (smollm2|llama2-7b)");
  }
  c.norm_eps = 1e-5f;
  const int64_t e = c.n_embd, nq = int64_t(c.n_head) * c.head_dim, nkv = int64_t(c.n_head_kv) * c.head_dim;
  uint64_t seed = 1;
  auto lin = [&](Tensor& t, int64_t o, int64_t i) { FillRandom(t, {o, i}, 2.0f / std::sqrt(float(i)), seed++); };
  FillRandom(m.weights.tok_embd, {c.n_vocab, e}, 1.0f, seed++);
  FillRandom(m.weights.output_norm, {e}, 0.2f, seed++);
  for (float& x : m.weights.output_norm.data) x += 1.0f;
  if (!c.tied_embeddings) lin(m.weights.output, c.n_vocab, e);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights l;
    FillRandom(l.attn_norm, {e}, 0.2f, seed++);
    FillRandom(l.ffn_norm, {e}, 0.2f, seed++);
    for (float& x : l.attn_norm.data) x += 1.0f;
    for (float& x : l.ffn_norm.data) x += 1.0f;
    lin(l.wq, nq, e);
    lin(l.wk, nkv, e);
    lin(l.wv, nkv, e);
    lin(l.wo, e, nq);
    lin(l.w_gate, c.n_ff, e);
    lin(l.w_up, c.n_ff, e);
    lin(l.w_down, e, c.n_ff);
    m.weights.layers.push_back(std::move(l));
  }
  return m;
}

int Run(int argc, char** argv) {
  std::string model_path, shape, gemm_name;
  bool json = false;
  CudaBenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto int_value = [&](int* dst) {
      const char* v = value();
      if (!v || std::atoi(v) <= 0) return false;
      *dst = std::atoi(v);
      return true;
    };
    const char* v = nullptr;
    if (a == "--json") {
      json = true;
    } else if (a == "--model" && (v = value())) {
      model_path = v;
    } else if (a == "--shape" && (v = value())) {
      shape = v;
    } else if (a == "--gemm" && (v = value())) {
      gemm_name = v;
    } else if ((a == "--short" && int_value(&o.n_prefill_short)) || (a == "--long" && int_value(&o.n_prefill_long)) ||
               (a == "--decode" && int_value(&o.n_decode)) || (a == "--repeats" && int_value(&o.repeats))) {
    } else {
      std::cerr << "usage: impress-cuda-bench [--model PATH | --shape smollm2|llama2-7b] [--gemm fp32|tf32|f16|bf16]\n"
                   "                          [--short N] [--long N] [--decode N] [--repeats N] [--json]\n";
      return 2;
    }
  }
  if (!gemm_name.empty()) {
    auto g = ParseCudaGemmPrecision(gemm_name);
    if (!g.ok()) {
      std::cerr << g.status().ToString() << "\n";
      return 2;
    }
    o.gemm = *g;
  }
  if (auto n = CudaDeviceCount(); !n.ok()) {  // before building gigabytes of random weights
    std::cerr << n.status().ToString() << "\n";
    return 1;
  }
  if (model_path.empty() && shape.empty()) shape = "smollm2";
  Result<Model> model = model_path.empty() ? ShapeModel(shape) : LoadModel(model_path);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  auto r = RunCudaEngineBenchmark(*model, o);
  if (!r.ok()) {
    std::cerr << r.status().ToString() << "\n";
    return 1;
  }
  if (!json) {
    std::cout << "model                        " << model->config.name << "\n" << FormatCudaBench(*r);
    return 0;
  }
  std::cout << nlohmann::json{{"model", model->config.name},
                              {"device", r->device},
                              {"backend", r->backend},
                              {"prefill_tokens_short", r->n_prefill_short},
                              {"prefill_tokens_long", r->n_prefill_long},
                              {"decode_tokens", r->n_decode},
                              {"prefill_tok_s_short", r->prefill_tok_s_short},
                              {"prefill_tok_s_long", r->prefill_tok_s_long},
                              {"decode_tok_s", r->decode_tok_s},
                              {"decode_ms_per_token", r->decode_ms_per_token},
                              {"prefill_tflops", r->prefill_tflops},
                              {"model_gemm_tflops", r->model_gemm_tflops},
                              {"peak_gemm_tflops", r->peak_gemm_tflops},
                              {"peak_sgemm_tflops", r->peak_sgemm_tflops},
                              {"gemm_efficiency", r->gemm_efficiency},
                              {"prefill_vs_peak", r->prefill_vs_peak},
                              {"weights_mb", r->weights_mb},
                              {"kv_cache_mb", r->kv_cache_mb}}
                   .dump(2)
            << "\n";
  return 0;
}

}  // namespace
}  // namespace impress

int main(int argc, char** argv) { return impress::Run(argc, argv); }
