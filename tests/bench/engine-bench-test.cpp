// RunEngineBenchmark: a smoke test on a small random model (every number is measured and
// plausible). The real numbers come from `impress bench engine`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

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
  o.bw_probe_bytes = size_t(64) << 20;
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
  // Decode against memory speed: the weights a token reads, counted here by hand (fp32: per
  // layer wq 64x64, wk and wv 32x64, wo 64x64, gate and up 128x64, down 64x128 and two norms of
  // 64; the tied head 500x64, the output norm and one embedding row of 64).
  const double per_layer = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128 + 2 * 64;
  EXPECT_EQ(r->weights_bytes_per_token, 4.0 * (2 * per_layer + 500 * 64 + 64 + 64));
  // KV of the mean decode context (64 + 8 / 2 tokens): 2 layers x K and V x 2 kv heads x 16 x fp16.
  EXPECT_EQ(r->decode_bytes_per_token - r->weights_bytes_per_token, 68.0 * 2 * 2 * 2 * 16 * 2);
  EXPECT_GT(r->mem_bw_gbs, 0);
  EXPECT_NEAR(r->decode_bw_fraction, r->decode_bytes_per_token * r->speed.decode_tok_s / (r->mem_bw_gbs * 1e9),
              1e-9 * r->decode_bw_fraction);
  // No file: the weights as held stand in for it (the ratio's denominator is at least 1 MB).
  EXPECT_EQ(r->model_file_mb, r->weights_mb);
  EXPECT_NEAR(r->rss_vs_file_kv, r->peak_rss_mb / std::max(1.0, r->weights_mb + r->kv_cache_mb), 1e-9);
  EXPECT_EQ(r->decode_tok_s_8k, 0);  // the context is 512 tokens, so no 8,000-token decode
  // Cancellation through progress.
  o.progress = [](uint64_t, uint64_t, std::string_view) { return false; };
  EXPECT_EQ(RunEngineBenchmark(m, o).status().code(), Status::Code::kCancelled);
}

TEST(EngineBench, ReadBandwidthProbeMeasuresAndRefusesNothingToRead) {
  EXPECT_GT(MeasureReadBandwidth(2, size_t(32) << 20, 1), 0);
  EXPECT_GT(MeasureReadBandwidth(3, 1000, 1), 0);  // rounded down to whole 128-byte strides per thread
  EXPECT_EQ(MeasureReadBandwidth(2, 100, 1), 0);   // less than one stride per thread
}

}  // namespace
}  // namespace impress
