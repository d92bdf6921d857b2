// RunEngineBenchmark: a smoke test on a small random model (every number is measured and
// plausible). The real numbers come from `impress bench engine`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench/engine-bench.h"
#include "engine/model/gguf.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-model.h"
#include "engine/model/random-model.h"
#include "tests/model/gguf-builder.h"

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
  EXPECT_GT(r->prefill_tok_s_16, 0);
  EXPECT_GT(r->prefill_tok_s_32, 0);
  EXPECT_GT(r->prefill_tok_s_64, 0);
  EXPECT_GT(r->question_gflops_frac, 0);  // paired runs of 32 and 64 rows (the short prefill)
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
  EXPECT_GT(r->decode_bw_fraction, 0);
  // No file: the weights as held stand in for it.
  EXPECT_EQ(r->model_file_mb, r->weights_mb);
  EXPECT_GT(r->rss_vs_file_kv, 0);
  EXPECT_EQ(r->decode_tok_s_8k, 0);  // the context is 512 tokens, so no 8,000-token decode
  // Cancellation through progress.
  o.progress = [](uint64_t, uint64_t, std::string_view) { return false; };
  EXPECT_EQ(RunEngineBenchmark(m, o).status().code(), Status::Code::kCancelled);
}

// A /proc/self/status field in MiB ("VmHWM", "VmRSS"; the kernel gives KiB); -1 when absent.
double ProcStatusMb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return -1;
}

// The benchmark's derived numbers against quantities measured here without its formulas: the
// weight bytes a decode token reads from the tensor sizes the GGUF file itself records, the KV
// cache from the test's own geometry, the peak RSS from the kernel's counters of this process.
TEST(EngineBench, DecodeBytesKvAndPeakRssAgainstTheFileAndTheKernel) {
  const std::string dir = test::MakeTempDir("engine-bench");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/tiny.gguf";
  constexpr int kLayers = 2, kHeadsKv = 2, kHeadDim = 16, kVocab = 500, kCtx = 300;
  const ModelConfig c{.name = "tiny",
                      .n_vocab = kVocab,
                      .n_ctx_train = 512,
                      .n_embd = 64,
                      .n_layer = kLayers,
                      .n_head = 4,
                      .n_head_kv = kHeadsKv,
                      .head_dim = kHeadDim,
                      .n_ff = 128,
                      .tied_embeddings = true};
  ASSERT_TRUE(WriteRandomModel(c, path, {.type = "q8_0", .n_threads = 1}, {.seed = 1}).ok());
  const double rss_before_mb = ProcStatusMb("VmRSS");
  ASSERT_GT(rss_before_mb, 0);
  {
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EngineBenchOptions o;
    o.bw_probe_bytes = 0;
    o.model_file_bytes = double(std::filesystem::file_size(path));
    o.forward.n_prefill_short = 64;
    o.forward.n_prefill_long = 128;
    o.forward.n_decode = 8;
    o.forward.ubatch = 64;
    o.forward.n_decode_ctx = 0;
    o.forward.n_ctx = kCtx;  // the cache holds kCtx tokens, more than any timed run needs
    auto r = RunEngineBenchmark(*m, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const double hwm_after_mb = ProcStatusMb("VmHWM");

    // Every tensor a decode token reads, once, as the file stores it: each layer's matrices and
    // norms (all of blk.N.*), the output norm, the head (tied: the embeddings) and one embedding
    // row; the KV of the mean decode context (64 + 8 / 2 tokens) in fp16.
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    double file_bytes = 0;
    int n_layer_tensors = 0;
    for (const GgufTensorInfo& t : gguf->tensors()) {
      if (t.name.rfind("blk.", 0) == 0 || t.name == "output_norm.weight" || t.name == "output.weight") {
        file_bytes += double(t.n_bytes);
        n_layer_tensors += t.name.rfind("blk.", 0) == 0 ? 1 : 0;
      }
    }
    EXPECT_EQ(n_layer_tensors, kLayers * 9);  // q, k, v, o, gate, up, down and two norms
    const GgufTensorInfo* embd = gguf->FindTensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    ASSERT_EQ(gguf->FindTensor("output.weight"), nullptr);  // tied: the head reads the embeddings
    ASSERT_EQ(embd->ne[1], kVocab);
    file_bytes += double(embd->n_bytes) + double(embd->n_bytes) / double(kVocab);
    const double kv_per_token = double(kLayers) * 2 * kHeadsKv * kHeadDim * 2;
    EXPECT_DOUBLE_EQ(r->weights_bytes_per_token, file_bytes);
    EXPECT_DOUBLE_EQ(r->decode_bytes_per_token, file_bytes + (64 + 8 / 2.0) * kv_per_token);

    // The KV cache: kCtx tokens x layers x K and V x kv heads x head_dim x fp16.
    EXPECT_EQ(r->speed.n_cache, kCtx);
    EXPECT_DOUBLE_EQ(r->kv_cache_mb, kCtx * kv_per_token / (1 << 20));

    // Peak RSS: the kernel's high-water mark of this process, at least what it held before the
    // run and at most what /proc says it ever held, read after the run.
    EXPECT_GE(r->peak_rss_mb, rss_before_mb - 1.0 / 1024);
    EXPECT_LE(r->peak_rss_mb, hwm_after_mb + 1.0 / 1024);
    EXPECT_DOUBLE_EQ(r->rss_vs_file_kv,
                     r->peak_rss_mb / std::max(1.0, o.model_file_bytes / (1 << 20) + kCtx * kv_per_token / (1 << 20)));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(EngineBench, ReadBandwidthProbeMeasuresAndRefusesNothingToRead) {
  EXPECT_GT(MeasureReadBandwidth(2, size_t(32) << 20, 1), 0);
  EXPECT_GT(MeasureReadBandwidth(3, 1000, 1), 0);  // rounded down to whole 128-byte strides per thread
  EXPECT_EQ(MeasureReadBandwidth(2, 100, 1), 0);   // less than one stride per thread
}

}  // namespace
}  // namespace impress
