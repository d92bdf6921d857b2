// RandomModel and KnownModelShape: every tensor the forward pass asks for, with the documented
// distributions, reproducible from the seed whatever the thread count.
#include "engine/model/random-model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/compute/forward.h"

namespace impress {
namespace {

const ModelConfig kTinyLlama{.name = "tiny",
                             .n_vocab = 300,
                             .n_ctx_train = 64,
                             .n_embd = 96,
                             .n_layer = 2,
                             .n_head = 6,
                             .n_head_kv = 2,
                             .head_dim = 16,
                             .n_ff = 160};

// Mean and standard deviation of a tensor's values.
std::pair<double, double> Moments(const Tensor& t) {
  double sum = 0, sq = 0;
  for (float x : t.data) sum += x;
  const double mean = sum / double(t.data.size());
  for (float x : t.data) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / double(t.data.size()))};
}

TEST(RandomModel, LlamaHasEveryTensorTheForwardPassChecks) {
  auto m = RandomModel(kTinyLlama);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(ValidateModel(*m).ok()) << ValidateModel(*m).ToString();
  EXPECT_EQ(m->config.name, "tiny");
  EXPECT_EQ(m->weights.output.shape, (std::vector<int64_t>{300, 96}));
  EXPECT_TRUE(m->weights.pos_embd.empty());
  EXPECT_TRUE(m->weights.layers[1].bq.empty());

  ModelConfig tied = kTinyLlama;
  tied.tied_embeddings = true;
  auto t = RandomModel(tied);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->weights.output.empty());
  EXPECT_TRUE(ValidateModel(*t).ok());
}

TEST(RandomModel, OptHasBiasesPositionsAndProjections) {
  ModelConfig c = kTinyLlama;
  c.arch = Arch::kOpt;
  c.n_head_kv = c.n_head;
  c.word_embed_proj_dim = 48;
  auto m = RandomModel(c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(ValidateModel(*m).ok()) << ValidateModel(*m).ToString();
  EXPECT_EQ(m->weights.pos_embd.shape, (std::vector<int64_t>{64 + 2, 96}));
  EXPECT_EQ(m->weights.tok_embd.shape, (std::vector<int64_t>{300, 48}));
  EXPECT_EQ(m->weights.project_in.shape, (std::vector<int64_t>{96, 48}));
  EXPECT_EQ(m->weights.layers[0].b_up.shape, (std::vector<int64_t>{160}));
  EXPECT_TRUE(m->weights.layers[0].w_gate.empty());
  EXPECT_TRUE(m->weights.output.empty());  // OPT's head is the token embedding
}

TEST(RandomModel, ValuesFollowTheDocumentedScales) {
  auto m = RandomModel(kTinyLlama, {.seed = 3, .linear_gain = 2.0f});
  ASSERT_TRUE(m.ok());
  const auto [emb_mean, emb_sd] = Moments(m->weights.tok_embd);
  EXPECT_NEAR(emb_mean, 0.0, 0.02);
  EXPECT_NEAR(emb_sd, 1.0, 0.02);
  const auto [w_mean, w_sd] = Moments(m->weights.layers[0].w_down);  // n_in = n_ff = 160
  EXPECT_NEAR(w_mean, 0.0, 0.01);
  EXPECT_NEAR(w_sd, 2.0 / std::sqrt(160.0), 0.01);
  const auto [n_mean, n_sd] = Moments(m->weights.layers[1].ffn_norm);
  EXPECT_NEAR(n_mean, 1.0, 0.03);
  EXPECT_NEAR(n_sd, 0.1, 0.03);
}

TEST(RandomModel, SeedDeterminesTheValuesWhateverTheThreadCount) {
  auto a = RandomModel(kTinyLlama, {.seed = 9, .n_threads = 1});
  auto b = RandomModel(kTinyLlama, {.seed = 9, .n_threads = 3});
  auto c = RandomModel(kTinyLlama, {.seed = 10, .n_threads = 3});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->weights.tok_embd.data, b->weights.tok_embd.data);
  EXPECT_EQ(a->weights.layers[1].wq.data, b->weights.layers[1].wq.data);
  EXPECT_NE(a->weights.tok_embd.data, c->weights.tok_embd.data);
  // Two tensors of one shape are not copies of each other.
  EXPECT_NE(a->weights.layers[0].wk.data, a->weights.layers[0].wv.data);
}

TEST(RandomModel, BadDimensionsAreRefused) {
  ModelConfig c = kTinyLlama;
  c.n_head_kv = 4;  // 6 heads are not a multiple of 4
  EXPECT_EQ(RandomModel(c).status().code(), Status::Code::kInvalidArgument);
  c = kTinyLlama;
  c.n_ff = 0;
  EXPECT_EQ(RandomModel(c).status().code(), Status::Code::kInvalidArgument);
  c = kTinyLlama;
  c.n_vocab = 1 << 30;  // 2^30 x 4096 embeddings: past the 2^40 limit, refused before allocating
  c.n_embd = 4096;
  EXPECT_EQ(RandomModel(c).status().code(), Status::Code::kInvalidArgument);
}

TEST(KnownModelShape, NamesTheShapesItKnows) {
  auto s = KnownModelShape("smollm2");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_head, 9);
  EXPECT_EQ(s->n_head_kv, 3);
  EXPECT_EQ(s->n_layer, 30);
  EXPECT_TRUE(s->tied_embeddings);
  auto l = KnownModelShape("llama2-7b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->n_embd, 4096);
  EXPECT_EQ(l->n_ff, 11008);
  auto bad = KnownModelShape("gpt-5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("smollm2|llama2-7b"), std::string::npos);
}

}  // namespace
}  // namespace impress
