// The fidelity check's pure helpers (pipeline/fidelity.h): log softmax against a direct softmax
// in double, and KL divergence against values worked out by hand. CheckFidelity itself runs on
// the real model in impress-pipeline-test.cpp.
#include "pipeline/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace impress {
namespace {

TEST(LogSoftmax, MatchesDirectSoftmax) {
  const std::vector<float> logits = {1.0f, -2.0f, 0.5f, 3.0f};
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  const std::vector<double> got = LogSoftmax(logits);
  ASSERT_EQ(got.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(got[i], std::log(std::exp(double(logits[i])) / z), 1e-12);
}

TEST(LogSoftmax, LargeLogitsDoNotOverflowAndShiftChangesNothing) {
  const std::vector<float> small = {0.0f, 1.0f, 2.0f};
  const std::vector<float> large = {1000.0f, 1001.0f, 1002.0f};  // exp(1000) overflows a double
  const std::vector<double> a = LogSoftmax(small), b = LogSoftmax(large);
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(b[i]));
    EXPECT_NEAR(a[i], b[i], 1e-9);
    total += std::exp(b[i]);
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_TRUE(LogSoftmax({}).empty());
}

TEST(KlDivergence, KnownValuesAndIdentity) {
  const std::vector<double> p = {std::log(0.5), std::log(0.5)};
  const std::vector<double> q = {std::log(0.25), std::log(0.75)};
  // 0.5 ln(0.5 / 0.25) + 0.5 ln(0.5 / 0.75)
  EXPECT_NEAR(KlDivergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-12);
  // Not symmetric: 0.25 ln(0.25 / 0.5) + 0.75 ln(0.75 / 0.5)
  EXPECT_NEAR(KlDivergence(q, p), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-12);
  EXPECT_DOUBLE_EQ(KlDivergence(p, p), 0.0);
  const std::vector<double> l = LogSoftmax(std::vector<float>{0.3f, -1.0f, 4.0f, 2.5f});
  EXPECT_GE(KlDivergence(l, l), 0.0);  // clamped: rounding never makes it negative
  EXPECT_LT(KlDivergence(l, l), 1e-12);
}

}  // namespace
}  // namespace impress
