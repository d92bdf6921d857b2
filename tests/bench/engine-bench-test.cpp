// RunEngineBenchmark: a smoke test on a small random model (every number is measured and
// plausible), and the real benchmark on the default model when IMPRESS_BENCH=1 (prints JSON).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/engine-bench.h"
#include "engine/model/model-loader.h"
#include "engine/model/random-model.h"

namespace impress {
namespace {

TEST(EngineBench, SmokeOnSmallRandomLlama) {
  const ModelConfig c{.n_vocab = 500,
                      .n_ctx_train = 512,
                      .n_embd = 64,
                      .n_layer = 2,
                      .n_head = 4,
                      .n_head_kv = 2,
                      .head_dim = 16,
                      .n_ff = 128,
                      .tied_embeddings = true};
  auto random = RandomModel(c, {.seed = 1, .linear_gain = 0.8f});
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  const Model& m = *random;
  EngineBenchOptions o;
  o.forward.n_prefill_short = 64;
  o.forward.n_prefill_long = 256;
  o.forward.n_decode = 8;
  o.forward.ubatch = 64;
  int n_steps = 0;
  o.progress = [&](uint64_t, uint64_t, std::string_view) { return ++n_steps > 0; };
  auto r = RunEngineBenchmark(m, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->speed.n_prefill_long, 256);
  EXPECT_GT(r->speed.prefill_tok_s_short, 0);
  EXPECT_GT(r->speed.prefill_tok_s_long, 0);
  EXPECT_GT(r->speed.decode_tok_s, 0);
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
  const std::string path =
      env && *env ? env : std::string(std::getenv("HOME")) + "/.cache/impress/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto r = RunEngineBenchmark(*m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf(
      "{\"prefill_tok_s_512\": %.1f, \"prefill_tok_s_4096\": %.1f, \"decode_tok_s\": %.1f, "
      "\"prefill_gflops\": %.1f, \"sgemm_gflops\": %.1f, \"prefill_vs_sgemm\": %.3f, \"peak_rss_mb\": %.0f, "
      "\"weights_mb\": %.0f, \"kv_cache_mb\": %.0f}\n",
      r->speed.prefill_tok_s_short, r->speed.prefill_tok_s_long, r->speed.decode_tok_s, r->prefill_gflops,
      r->sgemm_gflops, r->prefill_vs_sgemm, r->peak_rss_mb, r->weights_mb, r->kv_cache_mb);
}

}  // namespace
}  // namespace impress
