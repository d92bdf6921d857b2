// RunEngineBenchmark: a smoke test on a small random model (every number is measured and
// plausible), and the real benchmark on the default model when IMPRESS_BENCH=1 (prints JSON).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "bench/engine-bench.h"
#include "engine/model/model-loader.h"

namespace impress {
namespace {

Tensor Rand(std::mt19937& rng, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
  Tensor t;
  t.shape = shape;
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  t.data.resize(n);
  for (auto& x : t.data) x = offset + scale * nd(rng);
  return t;
}

TEST(EngineBench, SmokeOnSmallRandomLlama) {
  std::mt19937 rng(1);
  Model m;
  ModelConfig& c = m.config;
  c.n_vocab = 500;
  c.n_ctx_train = 512;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_ff = 128;
  m.weights.tok_embd = Rand(rng, {c.n_vocab, c.n_embd}, 1.0f);
  m.weights.output_norm = Rand(rng, {c.n_embd}, 0.1f, 1.0f);
  c.tied_embeddings = true;
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights l;
    l.attn_norm = Rand(rng, {c.n_embd}, 0.1f, 1.0f);
    l.ffn_norm = Rand(rng, {c.n_embd}, 0.1f, 1.0f);
    l.wq = Rand(rng, {64, 64}, 0.1f);
    l.wk = Rand(rng, {32, 64}, 0.1f);
    l.wv = Rand(rng, {32, 64}, 0.1f);
    l.wo = Rand(rng, {64, 64}, 0.1f);
    l.w_gate = Rand(rng, {128, 64}, 0.1f);
    l.w_up = Rand(rng, {128, 64}, 0.1f);
    l.w_down = Rand(rng, {64, 128}, 0.1f);
    m.weights.layers.push_back(std::move(l));
  }
  EngineBenchOptions o;
  o.n_prefill_short = 64;
  o.n_prefill_long = 256;
  o.n_decode = 8;
  o.ubatch = 64;
  int n_steps = 0;
  o.progress = [&](uint64_t, uint64_t, std::string_view) { return ++n_steps > 0; };
  auto r = RunEngineBenchmark(m, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n_prefill_long, 256);
  EXPECT_GT(r->prefill_tok_s_512, 0);
  EXPECT_GT(r->prefill_tok_s_4096, 0);
  EXPECT_GT(r->decode_tok_s, 0);
  EXPECT_GT(r->prefill_gflops, 0);
  EXPECT_GT(r->sgemm_gflops, 0);
  EXPECT_GT(r->peak_rss_mb, 1);
  EXPECT_GE(n_steps, 5);
  // Cancellation through progress.
  o.progress = [](uint64_t, uint64_t, std::string_view) { return false; };
  EXPECT_EQ(RunEngineBenchmark(m, o).status().code(), Status::Code::kCancelled);
}

TEST(EngineBench, DefaultModelWhenAsked) {
  const char* want = std::getenv("IMPRESS_BENCH");
  if (!want || std::string(want) != "1") GTEST_SKIP() << "set IMPRESS_BENCH=1 to run the engine benchmark";
  const char* env = std::getenv("IMPRESS_DEFAULT_MODEL");
  const std::string path = env && *env ? env : std::string(std::getenv("HOME")) + "/.cache/impress/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto r = RunEngineBenchmark(*m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("{\"prefill_tok_s_512\": %.1f, \"prefill_tok_s_4096\": %.1f, \"decode_tok_s\": %.1f, "
              "\"prefill_gflops\": %.1f, \"sgemm_gflops\": %.1f, \"prefill_vs_sgemm\": %.3f, \"peak_rss_mb\": %.0f, "
              "\"weights_mb\": %.0f, \"kv_cache_mb\": %.0f}\n",
              r->prefill_tok_s_512, r->prefill_tok_s_4096, r->decode_tok_s, r->prefill_gflops, r->sgemm_gflops,
              r->prefill_vs_sgemm, r->peak_rss_mb, r->weights_mb, r->kv_cache_mb);
}

}  // namespace
}  // namespace impress
