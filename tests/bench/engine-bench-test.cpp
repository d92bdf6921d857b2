// RunEngineBenchmark: a smoke test on a small random model (every number is measured and
// plausible). The real numbers come from `impress bench engine`.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace impress
