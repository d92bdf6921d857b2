// Random-weight models of real shapes, written by WriteRandomModel (what `impress quantize
// --random` runs) in the Q4_K_M-like recipe, with few layers and a small vocabulary so they run
// in seconds: Qwen2.5-0.5B (Q/K/V biases, rows of 896 values that fall back from the K-quants),
// Qwen3-0.6B (per-head Q/K norms, a head dimension of its own) and Llama-3.2-1B (llama3 RoPE
// scaling carried as rope_freqs.weight). Each is loaded, answers a
// prompt (greedy continuation) and is checked against the numpy reference forward pass of the
// same file (tests/reference/reference.py, reading it with the gguf package): logits within
// 2e-4 relative on the reference's arithmetic (weights decoded to fp32), identical greedy
// continuations, and the quantized path (weights used in their stored type) agreeing on top-1.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/gguf.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-model.h"
#include "engine/model/random-model.h"
#include "tests/model/gguf-builder.h"
#include "tests/model/reference-compare.h"

namespace impress {
namespace {

struct Made {
  std::string dir, path;
  ModelConfig config;
};

Made MakeModel(const std::string& shape, int layers, int vocab, const std::string& type) {
  Made m;
  m.dir = test::MakeTempDir("shapes");
  m.path = m.dir + "/" + shape + ".gguf";
  auto c = KnownModelShape(shape);
  EXPECT_TRUE(c.ok());
  m.config = *c;
  m.config.n_layer = layers;
  m.config.n_vocab = vocab;
  const Status st = WriteRandomModel(m.config, m.path, {.type = type, .n_threads = 2}, {.seed = 3});
  EXPECT_TRUE(st.ok()) << st.ToString();
  return m;
}

std::vector<test::RefSequence> Prompts(int vocab) {
  std::mt19937 rng(11);
  std::vector<test::RefSequence> seqs(2);
  for (int i = 0; i < 40; ++i) seqs[0].tokens.push_back(int32_t(rng() % uint32_t(vocab)));
  for (int i = 0; i < 7; ++i) seqs[1].tokens.push_back(int32_t(rng() % uint32_t(vocab)));
  seqs[0].rows = {0, 17, 39};
  seqs[1].rows = {6};
  seqs[0].greedy = 8;
  seqs[1].greedy = 8;
  return seqs;
}

// Loads the file both ways and compares with the reference.
void CheckAgainstReference(const Made& m) {
  const auto seqs = Prompts(m.config.n_vocab);
  test::RefResult ref;
  const int rc = test::RunNumpyReference(m.path, seqs, m.dir, &ref);
  if (rc == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  ASSERT_EQ(rc, 0) << "reference.py failed";
  ASSERT_EQ(ref.n_vocab, m.config.n_vocab);
  const size_t V = size_t(ref.n_vocab);
  for (bool dequantize : {true, false}) {
    SCOPED_TRACE(dequantize ? "weights decoded to fp32" : "weights in their stored types");
    auto model = LoadModel(m.path, {}, LoadOptions{.dequantize = dequantize});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto be = MakeCpuBackend({2});
    auto gen = Generator::Create(*model, *be, {64, 16});
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    test::LogitStats st;
    for (size_t i = 0; i < seqs.size(); ++i) {
      (*gen)->Reset();
      std::vector<float> got(seqs[i].rows.size() * V);
      ASSERT_TRUE((*gen)->EvalRows(seqs[i].tokens, seqs[i].rows, got.data()).ok());
      test::AddLogitRows(got.data(), ref.logits[i].data(), seqs[i].rows.size(), V, &st);
      (*gen)->Reset();
      GenerateOptions o;
      o.max_tokens = seqs[i].greedy;
      auto r = (*gen)->Generate(seqs[i].tokens, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (dequantize) {
        EXPECT_EQ(r->tokens, ref.greedy[i]) << "sequence " << i;
      }
    }
    std::printf("%s (%s): max relative logit error %.3g, top-1 %d/%d, mean KL %.3g\n", m.config.name.c_str(),
                dequantize ? "fp32" : "stored", st.max_rel, st.n_top1, st.n_rows, st.mean_kl());
    if (dequantize) {
      EXPECT_LT(st.max_rel, 2e-4);  // fp32 arithmetic in a different order
    } else {
      EXPECT_GE(st.top1(), 0.75);
      EXPECT_LT(st.mean_kl(), 0.05);
    }
  }
}

TEST(RealShapes, Qwen25HalfBWithBiases) {
  const Made m = MakeModel("qwen2.5-0.5b", 2, 512, "q4_k_m");
  auto f = GgufFile::Open(m.path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("general.architecture"), "qwen2");
  // 896-value rows are not whole 256-blocks: attn_q falls back to Q5_0; ffn_down (4864) is K.
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ5_0);
  EXPECT_EQ(f->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kQ4_K);
  EXPECT_EQ(f->FindTensor("blk.1.ffn_down.weight")->type, GgmlType::kQ6_K);  // the last layer: more bits
  EXPECT_EQ(f->FindTensor("blk.1.attn_v.weight")->type, GgmlType::kQ8_0);    // Q6_K's fallback
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.bias")->type, GgmlType::kF32);
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);  // tied

  auto model = LoadModel(m.path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = model->config;
  EXPECT_STREQ(c.arch.name(), "qwen2");  // Q/K/V biases
  EXPECT_EQ(c.n_embd, 896);
  EXPECT_EQ(c.n_head, 14);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_ff, 4864);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(model->weights.layers[1].bk.shape, (std::vector<int64_t>{128}));
  CheckAgainstReference(m);
  std::error_code ec;
  std::filesystem::remove_all(m.dir, ec);
}

TEST(RealShapes, Qwen3SixHundredMWithQkNorms) {
  const Made m = MakeModel("qwen3-0.6b", 2, 512, "q4_k_m");
  auto f = GgufFile::Open(m.path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("general.architecture"), "qwen3");
  ASSERT_NE(f->FindTensor("blk.1.attn_k_norm.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.bias"), nullptr);

  auto model = LoadModel(m.path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = model->config;
  EXPECT_STREQ(c.arch.name(), "qwen3");
  EXPECT_EQ(c.n_embd, 1024);
  EXPECT_EQ(c.head_dim, 128);  // 16 heads of 128 over a hidden size of 1024
  EXPECT_EQ(model->weights.layers[1].q_norm.shape, (std::vector<int64_t>{128}));
  CheckAgainstReference(m);
  std::error_code ec;
  std::filesystem::remove_all(m.dir, ec);
}

TEST(RealShapes, Llama32OneBWithLlama3RopeFactors) {
  const Made m = MakeModel("llama-3.2-1b", 1, 512, "q4_k_m");
  auto model = LoadModel(m.path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_embd, 2048);
  EXPECT_EQ(c.n_head, 32);
  EXPECT_EQ(c.n_head_kv, 8);
  EXPECT_EQ(c.n_ff, 8192);
  ASSERT_EQ(c.rope_freq_factors.size(), 32u);
  // The factors in the file reproduce transformers' llama3 scaling of the shape's config.
  const std::vector<float> want = RopeInvFreq(m.config), got = RopeInvFreq(c);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << i;
  EXPECT_EQ(model->weights.layers[0].wv.ggml_type, uint32_t(GgmlType::kQ6_K));  // layer 0 of 1: more bits
  EXPECT_EQ(model->weights.layers[0].wq.ggml_type, uint32_t(GgmlType::kQ4_K));
  CheckAgainstReference(m);
  std::error_code ec;
  std::filesystem::remove_all(m.dir, ec);
}

}  // namespace
}  // namespace impress
