// Non-finite values: a model whose weights make NaN or inf must fail with an error naming the
// model and the first layer whose output went bad, never answer (an empty answer, rc 0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"
#include "engine/model/random-model.h"

namespace impress {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Model SmallLlama() {
  auto m = RandomModel(ModelConfig{.name = "tiny-nan",
                                   .n_vocab = 32,
                                   .n_ctx_train = 64,
                                   .n_embd = 16,
                                   .n_layer = 3,
                                   .n_head = 2,
                                   .n_head_kv = 1,
                                   .head_dim = 8,
                                   .n_ff = 32});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

// Evaluates a short prompt; the status of the last-token logits.
Status EvalPrompt(const Model& model, const std::vector<int32_t>& tokens) {
  auto be = MakeCpuBackend({2});
  auto g = Generator::Create(model, *be, {64, 4});
  if (!g.ok()) return g.status();
  std::vector<float> logits;
  return (*g)->Eval(tokens, &logits);
}

TEST(NonFinite, HealthyModelGivesFiniteLogits) {
  const Model m = SmallLlama();
  EXPECT_TRUE(CheckNormWeights(m).ok());
  EXPECT_TRUE(EvalPrompt(m, {1, 2, 3, 4, 5, 6}).ok());
}

TEST(NonFinite, NaNWeightNamesTheModelAndTheFirstBadLayer) {
  Model m = SmallLlama();
  m.weights.layers[1].w_up.data[5] = kNaN;  // a large matrix: not checked at load
  // Six tokens in ubatches of four: the bad logits come from the second ubatch, which is re-run.
  const Status st = EvalPrompt(m, {1, 2, 3, 4, 5, 6});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("tiny-nan"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("layer 1 is the first"), std::string::npos) << st.ToString();
}

TEST(NonFinite, InfiniteLmHeadIsBlamedOnTheOutputNotALayer) {
  Model m = SmallLlama();
  std::fill(m.weights.output.data.begin(), m.weights.output.data.end(), std::numeric_limits<float>::infinity());
  const Status st = EvalPrompt(m, {1, 2, 3});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("every layer's output was finite"), std::string::npos) << st.ToString();
}

TEST(NonFinite, ForwardLogitsFailWithoutTheLayerCheck) {
  Model m = SmallLlama();
  m.weights.layers[2].wq.data[0] = kNaN;
  auto be = MakeCpuBackend({2});
  auto f = Forward::Create(m, *be);
  ASSERT_TRUE(f.ok());
  Forward& fwd = **f;
  const std::vector<int32_t> toks = {3, 4}, pos = {0, 1};
  ASSERT_TRUE(fwd.Begin(toks, pos).ok());
  for (int il = 0; il < m.config.n_layer; ++il) {
    ASSERT_TRUE(fwd.ComputeQKV(il).ok());
    ASSERT_TRUE(fwd.Attend(il, PrefixKV{}).ok());
  }
  std::vector<float> out(size_t(m.config.n_vocab));
  const int row = 1;
  const Status st = fwd.Logits(std::span<const int>(&row, 1), out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(fwd.logits_non_finite());
  EXPECT_EQ(fwd.first_non_finite_layer(), Forward::kNoBadLayer) << "not checked: no per-layer copies";
}

TEST(NonFinite, NormWeightsAreCheckedAtLoad) {
  Model m = SmallLlama();
  m.weights.layers[2].ffn_norm.data[3] = kNaN;
  Status st = CheckNormWeights(m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 2's FFN norm weight"), std::string::npos) << st.ToString();
  m = SmallLlama();
  m.weights.output_norm.data[0] = -std::numeric_limits<float>::infinity();
  st = CheckNormWeights(m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output norm"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace impress
