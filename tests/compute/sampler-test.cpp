// Sampling for chat: min-p against the distribution it should leave, the chat defaults, and the
// repetition guard on constructed loops and on real text (lists, code, prose) that must go on.
#include "engine/compute/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "tests/support/default-model.h"

namespace impress {
namespace {

// logits whose softmax at temperature 1 is `probs` (any positive weights).
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

TEST(MinP, KeepsOnlyTokensAtLeastMinPTimesTheBestAndRenormalises) {
  // Probabilities .40 .25 .15 .12 .05 .03; min_p 0.25 keeps p >= .10: the first four.
  const std::vector<double> probs = {0.40, 0.25, 0.15, 0.12, 0.05, 0.03};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.min_p = 0.25f;
  o.seed = 99;
  Sampler s(o);
  const std::vector<float> logits = LogitsOf(probs);
  std::map<int32_t, int> count;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[s.Sample(logits, {})];
  EXPECT_EQ(count.count(4), 0u);
  EXPECT_EQ(count.count(5), 0u);
  const double kept = 0.40 + 0.25 + 0.15 + 0.12;
  for (int t = 0; t < 4; ++t) {
    // 40,000 draws: the standard error of a frequency is below 0.0025; allow 4 of them.
    EXPECT_NEAR(double(count[t]) / n, probs[size_t(t)] / kept, 0.01) << "token " << t;
  }
}

TEST(MinP, OffAtZeroAndNeverEmptiesTheCandidates) {
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.2});
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = 5;
  Sampler all(o);
  std::map<int32_t, int> count;
  for (int i = 0; i < 3000; ++i) ++count[all.Sample(logits, {})];
  EXPECT_EQ(count.size(), 3u);  // min_p 0: every token occurs
  o.min_p = 1.0f;               // only the best token reaches 1.0 x itself
  Sampler best(o);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(best.Sample(logits, {}), 0);
  o.temperature = 0.0f;  // greedy ignores min-p
  o.min_p = 0.9f;
  Sampler greedy(o);
  EXPECT_EQ(greedy.Sample(LogitsOf({0.1, 0.6, 0.3}), {}), 1);
}

TEST(MinP, AppliesAfterTheTemperature) {
  // At temperature 2 the weights .64 .36 become .57 .43 (square roots): min_p 0.7 keeps both;
  // at temperature 1 .36 / .64 = .56 < 0.7 drops the second.
  const std::vector<float> logits = LogitsOf({0.64, 0.36});
  SamplerOptions o;
  o.min_p = 0.7f;
  o.seed = 1;
  o.temperature = 1.0f;
  Sampler cold(o);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(cold.Sample(logits, {}), 0);
  o.temperature = 2.0f;
  Sampler warm(o);
  int ones = 0;
  for (int i = 0; i < 3000; ++i) ones += warm.Sample(logits, {}) == 1;
  EXPECT_NEAR(ones / 3000.0, 0.6 / 1.4, 0.04);
}

TEST(ChatSamplerDefaults, SampleModeratelyWithTopPAndMinP) {
  const SamplerOptions o = ChatSamplerDefaults();
  EXPECT_FLOAT_EQ(o.temperature, 0.7f);
  EXPECT_FLOAT_EQ(o.top_p, 0.9f);
  EXPECT_FLOAT_EQ(o.min_p, 0.05f);
  EXPECT_FLOAT_EQ(o.repeat_penalty, 1.0f);
  // The library's own default stays greedy: tests and benchmarks rely on it.
  EXPECT_EQ(SamplerOptions{}.temperature, 0.0f);
}

// Pushes tokens until the guard fires; returns how many were pushed then (0: never).
size_t FiresAfter(RepetitionGuard* g, const std::vector<int32_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (g->Push(tokens[i])) return i + 1;
  return 0;
}

TEST(RepetitionGuard, StopsConstructedLoopsAsSoonAsTheyQualify) {
  // Period 1: the 48th identical token.
  RepetitionGuard one;
  EXPECT_EQ(FiresAfter(&one, std::vector<int32_t>(100, 7)), 48u);
  EXPECT_EQ(one.period(), 1);
  // A 12-token phrase after a 30-token preamble: 4 repeats = 48 tokens.
  std::vector<int32_t> t;
  for (int i = 0; i < 30; ++i) t.push_back(1000 + i);
  for (int r = 0; r < 10; ++r)
    for (int i = 0; i < 12; ++i) t.push_back(2000 + i);
  RepetitionGuard twelve;
  EXPECT_EQ(FiresAfter(&twelve, t), 30u + 48u);
  EXPECT_EQ(twelve.period(), 12);
  EXPECT_TRUE(twelve.Push(5));  // stays fired
  // A 30-token block needs 4 repeats: 120 tokens.
  t.clear();
  for (int r = 0; r < 6; ++r)
    for (int i = 0; i < 30; ++i) t.push_back(i);
  RepetitionGuard thirty;
  EXPECT_EQ(FiresAfter(&thirty, t), 120u);
  EXPECT_EQ(thirty.period(), 30);
  // Longer than max_period: not looked for.
  RepetitionGuard short_window({.max_period = 16});
  EXPECT_EQ(FiresAfter(&short_window, t), 0u);
  RepetitionGuard off({.enabled = false});
  EXPECT_EQ(FiresAfter(&off, std::vector<int32_t>(100, 7)), 0u);
}

TEST(RepetitionGuard, ListsAndVaryingLinesGoOn) {
  // "N. item K\n" for 100 items: the same shape, different numbers.
  std::vector<int32_t> list;
  for (int i = 0; i < 100; ++i) {
    for (int32_t tok : {500 + i % 10, 600 + i / 10, 46, 300, 700 + i, 10}) list.push_back(tok);
  }
  RepetitionGuard g;
  EXPECT_EQ(FiresAfter(&g, list), 0u);
  // Three repeats of a 20-token block (a short refrain) is not yet a loop.
  std::vector<int32_t> refrain;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 20; ++i) refrain.push_back(i);
  RepetitionGuard h;
  EXPECT_EQ(FiresAfter(&h, refrain), 0u);
}

class RepetitionGuardText : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test_support::DefaultModel()))
        << "the default model is missing; scripts/setup.sh downloads it";
    auto tok = Tokenizer::Load(test_support::DefaultModel());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tok_ = std::make_unique<Tokenizer>(std::move(*tok));
  }
  size_t FiresAfterText(const std::string& text) {
    RepetitionGuard g;
    return FiresAfter(&g, tok_->Encode(text, false, false));
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(RepetitionGuardText, TheLoopOfAGreedyAnswerStops) {
  std::string answer = "The GPL is a free software licence. It is ";
  for (int i = 0; i < 12; ++i) answer += "free in the sense that it is 'free' in the sense that it is ";
  const size_t n_tokens = tok_->Encode(answer, false, false).size();
  const size_t at = FiresAfterText(answer);
  EXPECT_GT(at, 0u);
  EXPECT_LT(at, n_tokens / 2) << "stops well before the end of " << n_tokens << " tokens";
}

TEST_F(RepetitionGuardText, ListsCodeAndProseGoOn) {
  std::string list = "Here are the steps:\n";
  for (int i = 1; i <= 40; ++i) list += std::to_string(i) + ". Copy the file to the backup folder.\n";
  EXPECT_EQ(FiresAfterText(list), 0u);
  std::string code = "switch (op) {\n";
  for (const char* name : {"add", "sub", "mul", "div", "mod", "and", "or", "xor", "shl", "shr", "min", "max"}) {
    code += "  case Op::k" + std::string(name) + ":\n    return Apply(" + name + ", a, b);\n";
  }
  code += "}\n";
  EXPECT_EQ(FiresAfterText(code), 0u);
  std::string table = "| name | value |\n|------|-------|\n";
  for (int i = 0; i < 30; ++i) table += "| row" + std::to_string(i) + " | " + std::to_string(i * 7) + " |\n";
  EXPECT_EQ(FiresAfterText(table), 0u);
  std::string prose;
  for (int i = 0; i < 8; ++i) {
    prose += "Section " + std::to_string(i) +
             " explains how the licence treats copies, modified versions and the source code that goes with "
             "them.\n";
  }
  EXPECT_EQ(FiresAfterText(prose), 0u);
}

}  // namespace
}  // namespace impress
