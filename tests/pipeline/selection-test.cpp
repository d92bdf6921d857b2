// The pure selection math (pipeline/selection.h) against naive references (here and in
// selection-reference.h): top-k by a full stable sort, Jaccard over std::set, the threshold
// formula, normalised importance in double, token selection by the rule spelled out step by step
// (sinks, then the recent window from the end, then the best of the rest), all counted toward k,
// and the linear-time per-layer path against them (the group rule itself: select-groups-test.cpp).
#include "pipeline/selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <utility>

#include "tests/pipeline/selection-reference.h"

namespace impress {
namespace {

using selection_reference::NaiveSelect;
using selection_reference::NaiveSelectGroups;
using selection_reference::ShuffledGroups;

// ---- naive references ----------------------------------------------------------------------

// The first k of a stable sort by descending value (ties: lower index first), ascending.
std::vector<int> NaiveTopK(const std::vector<float>& v, int k) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  std::vector<int> out(order.begin(), order.begin() + std::clamp(k, 0, int(v.size())));
  std::sort(out.begin(), out.end());
  return out;
}

double NaiveJaccard(const std::vector<int>& a, const std::vector<int>& b) {
  const std::set<int> sa(a.begin(), a.end()), sb(b.begin(), b.end());
  std::set<int> inter, uni;
  std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(inter, inter.begin()));
  std::set_union(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(uni, uni.begin()));
  return uni.empty() ? 1.0 : double(inter.size()) / double(uni.size());
}

double NaiveMeanJaccard(const std::vector<std::vector<int>>& sets) {
  double sum = 0;
  int pairs = 0;
  for (size_t a = 0; a < sets.size(); ++a) {
    for (size_t b = a + 1; b < sets.size(); ++b) {
      sum += NaiveJaccard(sets[a], sets[b]);
      ++pairs;
    }
  }
  return pairs ? sum / pairs : 1.0;
}

std::vector<float> RandomValues(std::mt19937& rng, int n, int n_distinct) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = float(rng() % uint32_t(n_distinct));  // few distinct values: many ties
  return v;
}

// ---- keep ratio -----------------------------------------------------------------------------

TEST(KeepRatio, ShortPrefixesKeepAtLeastHalf) {
  EXPECT_FLOAT_EQ(EffectiveKeep(100, 0.25f), 0.5f);
  EXPECT_FLOAT_EQ(EffectiveKeep(255, 0.25f), 0.5f);
  EXPECT_FLOAT_EQ(EffectiveKeep(256, 0.25f), 0.25f);
  EXPECT_FLOAT_EQ(EffectiveKeep(100, 0.75f), 0.75f);  // already more than half
}

TEST(KeepRatio, KeepCountIsCeilingClampedToOneAndN) {
  EXPECT_EQ(KeepCount(1000, 0.25f), 250);
  EXPECT_EQ(KeepCount(1001, 0.25f), 251);  // ceil
  EXPECT_EQ(KeepCount(100, 0.25f), 50);    // short prefix
  EXPECT_EQ(KeepCount(1000, 1.0f), 1000);
  EXPECT_EQ(KeepCount(1000, 1e-6f), 1);  // never zero tokens
  EXPECT_EQ(KeepCount(1, 0.25f), 1);
  EXPECT_EQ(KeepCount(0, 0.25f), 0);
  EXPECT_EQ(KeepCount(-3, 0.25f), 0);
  for (int n = 256; n < 2000; n += 37) {
    EXPECT_EQ(KeepCount(n, 0.3f), int(std::ceil(double(0.3f) * n))) << "n=" << n;
  }
}

// ---- top-k ----------------------------------------------------------------------------------

TEST(TopK, MatchesStableSortReferenceWithTies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 300);
    const std::vector<float> v = RandomValues(rng, n, 50);
    const int k = int(rng() % uint32_t(n + 1));
    EXPECT_EQ(TopK(v, k), NaiveTopK(v, k)) << "n=" << n << " k=" << k;
  }
}

TEST(TopK, TiesGoToTheLowerIndex) {
  const std::vector<float> v = {1, 3, 3, 2, 3};
  EXPECT_EQ(TopK(v, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(TopK(v, 3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(TopK(v, 4), (std::vector<int>{1, 2, 3, 4}));
}

TEST(TopK, KIsClampedAndEmptyInputsGiveEmptySets) {
  const std::vector<float> v = {0.5f, 0.1f, 0.9f};
  EXPECT_EQ(TopK(v, 10), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(TopK(v, 0).empty());
  EXPECT_TRUE(TopK(v, -4).empty());
  EXPECT_TRUE(TopK(std::vector<float>{}, 3).empty());
  EXPECT_EQ(TopK(std::vector<float>{7.0f}, 1), (std::vector<int>{0}));
}

// ---- Jaccard and the threshold ----------------------------------------------------------------

TEST(Jaccard, KnownSets) {
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{0, 1, 2}, {0, 1, 2}}, 5), 1.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{0, 1}, {2, 3}}, 5), 0.0);
  // {0,1,2} vs {1,2,3}: 2/4; vs {0,1,2}: 1; {1,2,3} vs {0,1,2}: 2/4 -> mean 2/3.
  EXPECT_NEAR(MeanPairwiseJaccard({{0, 1, 2}, {1, 2, 3}, {0, 1, 2}}, 5), 2.0 / 3.0, 1e-12);
}

TEST(Jaccard, MatchesStdSetReferenceOnRandomSets) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 200);
    const int n_sets = 2 + int(rng() % 5);
    std::vector<std::vector<int>> sets;
    for (int h = 0; h < n_sets; ++h) {
      // Sets of different sizes, distinct indices, in no particular order.
      std::vector<int> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(rng() % uint32_t(n + 1));
      sets.push_back(all);
    }
    EXPECT_NEAR(MeanPairwiseJaccard(sets, n), NaiveMeanJaccard(sets), 1e-12) << "trial " << trial;
  }
}

TEST(Jaccard, FewerThanTwoSetsAndEmptySetsAgreeFully) {
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({}, 10), 1.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{1, 2, 3}}, 10), 1.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{}, {}}, 10), 1.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{}, {4}}, 10), 0.0);
  EXPECT_DOUBLE_EQ(MeanPairwiseJaccard({{}, {}}, 0), 1.0);
}

TEST(Threshold, IsExpectedRandomJaccardToAlpha) {
  EXPECT_DOUBLE_EQ(JaccardThreshold(0.25, 0.0), 1.0);
  EXPECT_NEAR(JaccardThreshold(0.25, 1.0), 0.25 / 1.75, 1e-12);
  EXPECT_NEAR(JaccardThreshold(0.25, 0.6), std::pow(0.25 / 1.75, 0.6), 1e-12);
  EXPECT_NEAR(JaccardThreshold(0.5, 2.0), std::pow(0.5 / 1.5, 2.0), 1e-12);
  EXPECT_LT(JaccardThreshold(0.25, 2.0), JaccardThreshold(0.25, 0.6));  // larger alpha, lower t
  // The expectation itself: random k-of-n sets have mean Jaccard close to p / (2 - p).
  std::mt19937 rng(3);
  const int n = 2000, k = 500;
  double sum = 0;
  for (int t = 0; t < 200; ++t) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> a(all.begin(), all.begin() + k);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> b(all.begin(), all.begin() + k);
    sum += MeanPairwiseJaccard({a, b}, n);
  }
  EXPECT_NEAR(sum / 200, JaccardThreshold(double(k) / n, 1.0), 0.01);
}

TEST(Threshold, EndsOfTheRangeIgnoreAlpha) {
  for (double alpha : {0.0, 0.6, 2.0}) {
    EXPECT_DOUBLE_EQ(JaccardThreshold(0.0, alpha), 0.0);
    EXPECT_DOUBLE_EQ(JaccardThreshold(-0.5, alpha), 0.0);
    EXPECT_DOUBLE_EQ(JaccardThreshold(1.0, alpha), 1.0);
    EXPECT_DOUBLE_EQ(JaccardThreshold(1.5, alpha), 1.0);
  }
}

// ---- summed normalised importance -------------------------------------------------------------

// Random importance rows (n_heads x n) and, in double, each head's row over its own total combined
// over the heads by `combine`.
template <typename Combine>
std::pair<std::vector<float>, std::vector<double>> RowsAndNormalised(uint32_t seed, int n_heads, int n,
                                                                     Combine combine) {
  std::mt19937 rng(seed);
  std::vector<float> imp(size_t(n_heads) * n);
  for (float& x : imp) x = float(rng() % 1000) / 100.0f;
  std::vector<double> want(size_t(n), 0.0);
  for (int h = 0; h < n_heads; ++h) {
    double total = 0;
    for (int i = 0; i < n; ++i) total += imp[size_t(h) * n + i];
    for (int i = 0; i < n; ++i) want[size_t(i)] = combine(want[size_t(i)], imp[size_t(h) * n + i] / total);
  }
  return {imp, want};
}

TEST(SumNormalised, MatchesDoubleReferenceAndIgnoresRowScale) {
  const int n_heads = 4, n = 37;
  auto [imp, want] = RowsAndNormalised(5, n_heads, n, [](double a, double b) { return a + b; });
  const std::vector<float> got = SumNormalisedImportance(imp, n_heads, n);
  ASSERT_EQ(got.size(), size_t(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 1e-6) << "token " << i;
    sum += got[size_t(i)];
  }
  EXPECT_NEAR(sum, n_heads, 1e-4);  // each head contributes a total of 1
  // Scaling one head's row (a sharper softmax somewhere) changes nothing.
  for (int i = 0; i < n; ++i) imp[size_t(2) * n + i] *= 1000.0f;
  const std::vector<float> scaled = SumNormalisedImportance(imp, n_heads, n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(scaled[size_t(i)], got[size_t(i)], 1e-5);
}

TEST(SumNormalised, HeadMaxTakesEachTokensLargestShare) {
  const int n_heads = 3, n = 29;
  const auto [imp, want] = RowsAndNormalised(11, n_heads, n, [](double a, double b) { return std::max(a, b); });
  std::vector<float> got;
  CombineNormalisedImportanceInto(imp, n_heads, n, /*head_max=*/true, &got);
  ASSERT_EQ(got.size(), size_t(n));
  for (int i = 0; i < n; ++i) EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 1e-6) << "token " << i;
  // One sharp head's favourite outranks a token every head gives a middling share: the sum ranks
  // them the other way round.
  const std::vector<float> sharp = {0.6f, 0.2f, 0.2f, 0.1f, 0.5f, 0.4f, 0.1f, 0.5f, 0.4f};
  CombineNormalisedImportanceInto(sharp, 3, 3, true, &got);
  EXPECT_GT(got[0], got[1]);
  CombineNormalisedImportanceInto(sharp, 3, 3, false, &got);
  EXPECT_LT(got[0], got[1]);
}

TEST(SumNormalised, ZeroRowsContributeNothing) {
  const std::vector<float> imp = {0, 0, 0, 1, 3, 0};  // head 0 all zero; head 1 sums to 4
  EXPECT_EQ(SumNormalisedImportance(imp, 2, 3), (std::vector<float>{0.25f, 0.75f, 0.0f}));
  EXPECT_TRUE(SumNormalisedImportance({}, 0, 0).empty());
}

// ---- the probe verdict ------------------------------------------------------------------------

TEST(Probe, VerdictMatchesTopKSetsJaccardAndThreshold) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    const int n_heads = 1 + int(rng() % 4), n = 1 + int(rng() % 120);
    const int k = 1 + int(rng() % uint32_t(n));
    const double alpha = double(rng() % 200) / 100.0;
    const std::vector<float> imp = RandomValues(rng, n_heads * n, 8);
    std::vector<std::vector<int>> sets;
    for (int h = 0; h < n_heads; ++h) {
      sets.push_back(NaiveTopK(std::vector<float>(imp.begin() + h * n, imp.begin() + (h + 1) * n), k));
    }
    const double s = NaiveMeanJaccard(sets);
    const double t = k == n ? 1.0 : std::pow((double(k) / n) / (2.0 - double(k) / n), alpha);
    const ProbeVerdict v = JudgeProbe(imp, n_heads, n, k, alpha);
    EXPECT_NEAR(v.s, s, 1e-12);
    EXPECT_NEAR(v.t, t, 1e-12);
    // Compare the decision away from the knife edge, where rounding could tip it.
    if (std::fabs(s - t) > 1e-9) {
      EXPECT_EQ(v.passed, s >= t) << "s=" << s << " t=" << t;
    }
  }
}

TEST(Probe, AgreeingHeadsPassAtAnyAlphaAndAlphaZeroNeedsFullAgreement) {
  const int n = 8, k = 2;
  // Two heads with the same top-2 {6, 7} (different values), one that prefers {0, 1}.
  const std::vector<float> same = {0, 0, 0, 0, 0, 0, 5, 9, 1, 1, 1, 1, 1, 1, 8, 7};
  const std::vector<float> differ = {0, 0, 0, 0, 0, 0, 5, 9, 9, 8, 0, 0, 0, 0, 0, 0};
  for (double alpha : {0.0, 0.6, 2.0}) {
    const ProbeVerdict v = JudgeProbe(same, 2, n, k, alpha);
    EXPECT_DOUBLE_EQ(v.s, 1.0);
    EXPECT_TRUE(v.passed) << "alpha " << alpha;
  }
  const ProbeVerdict zero = JudgeProbe(differ, 2, n, k, 0.0);
  EXPECT_DOUBLE_EQ(zero.s, 0.0);
  EXPECT_DOUBLE_EQ(zero.t, 1.0);
  EXPECT_FALSE(zero.passed);
  // Disjoint sets never beat a positive threshold, whatever alpha.
  EXPECT_FALSE(JudgeProbe(differ, 2, n, k, 2.0).passed);
  // Keeping everything: every set is the whole prefix, s = t = 1.
  const ProbeVerdict all = JudgeProbe(differ, 2, n, n, 0.6);
  EXPECT_DOUBLE_EQ(all.s, 1.0);
  EXPECT_DOUBLE_EQ(all.t, 1.0);
  EXPECT_TRUE(all.passed);
}

// ---- token selection --------------------------------------------------------------------------

TEST(SelectTokens, MatchesStepByStepReference) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = int(rng() % 150);
    const std::vector<float> score = RandomValues(rng, n, 10);
    const int k = int(rng() % uint32_t(n + 3)) - 1;  // includes -1 and k > n
    const int sinks = int(rng() % 10), recent = int(rng() % 40);
    EXPECT_EQ(SelectTokens(score, k, sinks, recent), NaiveSelect(score, k, sinks, recent))
        << "n=" << n << " k=" << k << " sinks=" << sinks << " recent=" << recent;
  }
}

TEST(SelectTokens, SinksAndRecentAreKeptAndCountTowardK) {
  // Scores favour the middle, so sinks and recent get in only because they are forced.
  std::vector<float> score(100, 0.0f);
  for (int i = 40; i < 60; ++i) score[size_t(i)] = 1.0f + float(i);
  const std::vector<uint32_t> sel = SelectTokens(score, 25, 4, 8);
  ASSERT_EQ(sel.size(), 25u);  // 4 sinks + 8 recent + 13 by score, not 25 by score
  for (uint32_t i : {0u, 1u, 2u, 3u, 92u, 93u, 99u}) {
    EXPECT_TRUE(std::binary_search(sel.begin(), sel.end(), i)) << "token " << i;
  }
  // The 13 best of the middle: 47..59.
  for (uint32_t i = 47; i < 60; ++i) EXPECT_TRUE(std::binary_search(sel.begin(), sel.end(), i)) << i;
  EXPECT_FALSE(std::binary_search(sel.begin(), sel.end(), 46u));
  EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
  EXPECT_EQ(std::adjacent_find(sel.begin(), sel.end()), sel.end());
}

TEST(SelectTokens, WhenForcedTokensExceedKSinksWinThenTheLatest) {
  const std::vector<float> score(50, 1.0f);
  EXPECT_EQ(SelectTokens(score, 3, 4, 32), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(SelectTokens(score, 6, 4, 32), (std::vector<uint32_t>{0, 1, 2, 3, 48, 49}));
  // Sinks and the window overlap on a tiny prefix: each token counts once.
  EXPECT_EQ(SelectTokens(std::vector<float>(5, 0.0f), 5, 4, 32), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(SelectTokens, KIsClampedAndEmptyInputsGiveEmptySelections) {
  const std::vector<float> score = {3, 1, 2};
  EXPECT_EQ(SelectTokens(score, 10, 0, 0), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(SelectTokens(score, 0, 4, 32).empty());
  EXPECT_TRUE(SelectTokens(score, -2, 4, 32).empty());
  EXPECT_TRUE(SelectTokens({}, 5, 4, 32).empty());
  EXPECT_EQ(SelectTokens(score, 1, 0, 0), (std::vector<uint32_t>{0}));       // best score
  EXPECT_EQ(SelectTokens(score, 2, -1, -1), (std::vector<uint32_t>{0, 2}));  // negative = none forced
}

// ---- the linear-time per-layer path ------------------------------------------------------------

std::vector<int> BitsToSet(const std::vector<uint64_t>& bits, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if ((bits[size_t(i) / 64] >> (i % 64)) & 1) out.push_back(i);
  return out;
}

// One scratch through many sizes and shapes, as a pipeline reuses it across layers and requests:
// nothing left from an earlier call may leak into a later one.
TEST(LinearPath, TopKBitsMatchesStableSortReferenceWithTies) {
  std::mt19937 rng(21);
  SelectionScratch scratch;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 400), k = int(rng() % uint32_t(n + 2)) - 1;
    const std::vector<float> v = RandomValues(rng, n, 1 + int(rng() % 12));
    std::vector<uint64_t> bits(size_t(n + 63) / 64, ~uint64_t{0});
    TopKBits(v, k, scratch, bits.data());
    EXPECT_EQ(BitsToSet(bits, n), NaiveTopK(v, k)) << "n " << n << " k " << k;
  }
}

TEST(LinearPath, TopKBitsOrdersSignsZerosAndTinyValuesLikeTheComparison) {
  std::mt19937 rng(27);
  SelectionScratch scratch;
  const std::vector<float> pool = {-3.5f, -1e-30f, -0.0f, 0.0f, 1e-38f, 1e-30f, 2.0f, 2.0000002f, 1e30f, -1e30f};
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 100), k = int(rng() % uint32_t(n + 1));
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = pool[rng() % pool.size()];
    std::vector<uint64_t> bits(size_t(n + 63) / 64);
    TopKBits(v, k, scratch, bits.data());
    EXPECT_EQ(BitsToSet(bits, n), NaiveTopK(v, k)) << "n " << n << " k " << k;
    std::vector<uint32_t> tok;
    SelectTokensInto(v, k, 2, 3, scratch, &tok);
    EXPECT_EQ(tok, NaiveSelect(v, k, 2, 3)) << "n " << n << " k " << k;
  }
}

TEST(LinearPath, ProbeVerdictMatchesStdSetJaccardOnLongRows) {
  std::mt19937 rng(22);
  SelectionScratch scratch;
  for (int trial = 0; trial < 40; ++trial) {
    const int n_heads = 1 + int(rng() % 5), n = 1 + int(rng() % 3000);
    const int k = 1 + int(rng() % uint32_t(n));
    const std::vector<float> imp = RandomValues(rng, n_heads * n, trial % 2 ? 50 : 100000);
    std::vector<std::vector<int>> sets;
    for (int h = 0; h < n_heads; ++h)
      sets.push_back(NaiveTopK(std::vector<float>(imp.begin() + h * n, imp.begin() + (h + 1) * n), k));
    const ProbeVerdict fast = JudgeProbe(imp, n_heads, n, k, 0.6, scratch);
    EXPECT_NEAR(fast.s, NaiveMeanJaccard(sets), 1e-12);
    // Bit for bit what the index-set path computes (same pairs, same arithmetic).
    EXPECT_EQ(fast.s, MeanPairwiseJaccard(sets, n));
    EXPECT_EQ(fast.t, JaccardThreshold(double(k) / n, 0.6));
    EXPECT_EQ(fast.passed, fast.s >= fast.t);
  }
}

TEST(LinearPath, TokensAndGroupsMatchTheReferencesOnLongPrefixes) {
  std::mt19937 rng(23);
  SelectionScratch scratch;
  std::vector<uint32_t> tok, grp;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 1 + int(rng() % 8000), gsize = 1 + int(rng() % 16);
    // Ties in half the trials (few distinct values), heavy tails in the others.
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = trial % 2 ? float(rng() % 7) : std::exp(float(rng() % 1000) / 100.0f);
    const std::vector<uint32_t> group = ShuffledGroups(rng, n, gsize);
    const int k = int(rng() % uint32_t(n + 1)), sinks = int(rng() % 6), recent = int(rng() % 40);
    SelectTokensInto(score, k, sinks, recent, scratch, &tok);
    EXPECT_EQ(tok, NaiveSelect(score, k, sinks, recent)) << "n " << n << " k " << k;
    SelectGroupsInto(score, k, sinks, recent, group, scratch, &grp);
    EXPECT_EQ(grp, NaiveSelectGroups(score, k, sinks, recent, group)) << "n " << n << " k " << k;
  }
}

TEST(LinearPath, SumNormalisedIntoEqualsTheVectorForm) {
  std::mt19937 rng(24);
  std::vector<float> out = {1, 2, 3};  // stale content must go
  for (int trial = 0; trial < 20; ++trial) {
    const int n_heads = 1 + int(rng() % 9), n = 1 + int(rng() % 500);
    const std::vector<float> imp = RandomValues(rng, n_heads * n, 1000);
    SumNormalisedImportanceInto(imp, n_heads, n, &out);
    EXPECT_EQ(out, SumNormalisedImportance(imp, n_heads, n));
  }
}

// ---- the keep by attention mass ----------------------------------------------------------------

// Brute force: sort descending, add until the share of the total is reached, clamp.
int NaiveMassKeep(const std::vector<float>& score, double target, float lo, float hi) {
  const int n = int(score.size());
  std::vector<float> s = score;
  std::sort(s.begin(), s.end(), std::greater<float>());
  double total = 0;
  for (float v : s) total += v;
  const double need = target * total;
  int m = 0;
  double acc = 0;
  while (acc < need && m < n) acc += s[size_t(m++)];
  return std::clamp(m, KeepCount(n, lo), std::max(KeepCount(n, lo), KeepCount(n, hi)));
}

TEST(MassKeep, IsTheMinimalPrefixOfTheSortedScores) {
  std::mt19937 rng(25);
  SelectionScratch scratch;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + int(rng() % 5000);
    // Small integers: every partial sum is exact in double, so the count is exact whatever the
    // summation order. Ties and zeros included.
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = float(rng() % 50 == 0 ? 200 + rng() % 800 : rng() % 9);
    const double target = double(rng() % 1001) / 1000.0;
    // No floor or cap in effect: the count itself (a 256+ prefix has no short-prefix floor).
    const int m = MassKeepCount(score, target, 1e-9f, 1.0f, 0, 0, scratch);
    ASSERT_EQ(m, NaiveMassKeep(score, target, 1e-9f, 1.0f)) << "n " << n << " target " << target;
    // Minimal: the top m reach the target, the top m - 1 do not.
    std::vector<float> s = score;
    std::sort(s.begin(), s.end(), std::greater<float>());
    const double total = std::accumulate(s.begin(), s.end(), 0.0);
    const double top = std::accumulate(s.begin(), s.begin() + m, 0.0);
    if (n >= 256 && total > 0) {
      EXPECT_GE(top, target * total);
      if (m > 1) {
        EXPECT_LT(top - s[size_t(m - 1)], target * total);
      }
    }
  }
}

TEST(MassKeep, SinksAndRecentAreKeptAndLeftOutOfTheMass) {
  std::mt19937 rng(28);
  SelectionScratch scratch;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 3000), sinks = int(rng() % 6), recent = int(rng() % 40);
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = float(rng() % 9);
    score[0] = 1e6f;  // an attention sink: were it counted, any target short of 1 needs nothing else
    const double target = double(rng() % 1001) / 1000.0;
    // Brute force over the tokens between the sinks and the recent window.
    const int s_end = std::min(sinks, n), r_begin = std::max(n - std::min(recent, n), s_end);
    const std::vector<float> rest(score.begin() + s_end, score.begin() + r_begin);
    // The minimal prefix of the rest, unclamped (the clamp applies to the whole prefix, below).
    std::vector<float> sorted = rest;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const double total = std::accumulate(sorted.begin(), sorted.end(), 0.0);
    double acc = 0;
    int m = 0;
    while (acc < target * total && m < int(sorted.size())) acc += sorted[size_t(m++)];
    const int want = std::clamp(n - int(rest.size()) + m, KeepCount(n, 1e-9f), n);
    EXPECT_EQ(MassKeepCount(score, target, 1e-9f, 1.0f, sinks, recent, scratch), want)
        << "n " << n << " sinks " << sinks << " recent " << recent << " target " << target;
  }
}

TEST(MassKeep, FloorAndCapAreRespected) {
  std::mt19937 rng(26);
  SelectionScratch scratch;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 3000);
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = std::exp(float(rng() % 1000) / 100.0f);
    const float lo = float(1 + rng() % 30) / 100.0f, hi = lo + float(rng() % 60) / 100.0f;
    const double target = double(rng() % 1001) / 1000.0;
    const int m = MassKeepCount(score, target, lo, std::min(hi, 1.0f), 0, 0, scratch);
    EXPECT_GE(m, KeepCount(n, lo));
    EXPECT_LE(m, std::max(KeepCount(n, lo), KeepCount(n, std::min(hi, 1.0f))));
    EXPECT_EQ(m, NaiveMassKeep(score, target, lo, std::min(hi, 1.0f))) << "n " << n;
  }
  // Concentrated mass: one token holds 90%, so 0.9 needs one token, raised to the floor.
  std::vector<float> peak(1000, 0.1f / 999);
  peak[500] = 0.9f;
  EXPECT_EQ(MassKeepCount(peak, 0.85, 1e-9f, 1.0f, 0, 0, scratch), 1);
  EXPECT_EQ(MassKeepCount(peak, 0.85, 0.05f, 1.0f, 0, 0, scratch), KeepCount(1000, 0.05f));  // 51: 0.05f > 0.05
  // Flat mass: 0.5 needs half the tokens, cut to the cap.
  std::vector<float> flat(1000, 1.0f);
  EXPECT_EQ(MassKeepCount(flat, 0.5, 1e-9f, 1.0f, 0, 0, scratch), 500);
  EXPECT_EQ(MassKeepCount(flat, 0.5, 1e-9f, 0.25f, 0, 0, scratch), 250);
  // All zero: nothing is needed, the floor is kept.
  EXPECT_EQ(MassKeepCount(std::vector<float>(1000, 0.0f), 0.9, 0.1f, 0.5f, 0, 0, scratch), KeepCount(1000, 0.1f));
  EXPECT_EQ(MassKeepCount({}, 0.9, 0.1f, 0.5f, 0, 0, scratch), 0);
}

// ---- score pooling --------------------------------------------------------------------------

// The window of token i as the header defines it: the `width` tokens centred on i (even widths
// rounded up to odd, capped) and `follow` more before them, clipped at the ends; summed left to
// right or maxed.
std::vector<float> NaivePool(const std::vector<float>& v, int width, bool max, int follow = 0) {
  if (width <= 1) return v;
  const int half = std::min(width, kMaxPoolWidth) / 2;
  const int before = half + std::clamp(follow, 0, kMaxPoolWidth);
  const int n = int(v.size());
  std::vector<float> out(v.size());
  for (int i = 0; i < n; ++i) {
    std::vector<float> window;
    for (int j = i - before; j <= i + half; ++j) {
      if (j >= 0 && j < n) window.push_back(v[size_t(j)]);
    }
    float acc = window[0];
    for (size_t t = 1; t < window.size(); ++t) acc = max ? std::max(acc, window[t]) : acc + window[t];
    out[size_t(i)] = acc;
  }
  return out;
}

// Short rows (every token at an edge) and long ones (most windows whole), with and without the
// trailing stretch: the same bits as the definition.
TEST(ScorePool, SumAndMaxMatchTheWindowDefinitionExactly) {
  std::mt19937 rng(41);
  std::vector<float> out;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = trial % 2 ? int(rng() % 40) : int(rng() % 2000);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = std::ldexp(float(rng() % 1000), -int(rng() % 20));
    const int width = int(rng() % 12) - 1 + (trial % 50 == 0 ? 100 : 0);  // -1 .. 10, sometimes past the cap
    const int follow = trial % 3 == 0 ? 0 : int(rng() % 12) - 1 + (trial % 40 == 1 ? 100 : 0);
    for (bool max : {false, true}) {
      PoolScoresInto(v, width, max, &out, follow);
      const std::vector<float> want = NaivePool(v, width, max, follow);
      ASSERT_EQ(out.size(), want.size());
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(out[size_t(i)], want[size_t(i)])
            << "n " << n << " width " << width << " follow " << follow << " max " << max << " i " << i;
    }
  }
}

TEST(ScorePool, EvenWidthsCountAsTheNextOddOneAndOffCopies) {
  const std::vector<float> v = {0, 0, 0, 8, 0, 0, 0};
  std::vector<float> four, five;
  PoolScoresInto(v, 4, false, &four);
  PoolScoresInto(v, 5, false, &five);
  EXPECT_EQ(four, five);
  EXPECT_EQ(five, (std::vector<float>{0, 8, 8, 8, 8, 8, 0}));
  std::vector<float> off;
  PoolScoresInto(v, 1, true, &off);
  EXPECT_EQ(off, v);
  PoolScoresInto(v, 0, false, &off);
  EXPECT_EQ(off, v);
}

TEST(ScorePool, FollowCarriesAPeaksScoreToTheTokensAfterIt) {
  const std::vector<float> v = {0, 0, 0, 8, 0, 0, 0, 0, 0, 0};
  std::vector<float> out;
  PoolScoresInto(v, 3, true, &out, 3);  // one token each side, three more after
  EXPECT_EQ(out, (std::vector<float>{0, 0, 8, 8, 8, 8, 8, 8, 0, 0}));
  PoolScoresInto(v, 3, false, &out, 3);  // the sum over the same stretched window
  EXPECT_EQ(out, (std::vector<float>{0, 0, 8, 8, 8, 8, 8, 8, 0, 0}));
  PoolScoresInto(v, 1, true, &out, 3);  // pooling off: follow alone changes nothing
  EXPECT_EQ(out, v);
}

TEST(ScorePool, PooledSelectionKeepsTheSpanAroundAPeakWhereRawScoresScatter) {
  // One strong token (a fact's key word) among weak noise: the raw top-k takes it and k - 1 noise
  // tokens elsewhere; pooled, its neighbours come with it.
  std::mt19937 rng(7);
  std::vector<float> score(400);
  for (float& x : score) x = float(rng() % 100) / 1000.0f;
  score[200] = 1.0f;
  SelectionScratch scratch;
  std::vector<uint32_t> raw, pooled;
  std::vector<float> p;
  SelectTokensInto(score, 5, 0, 0, scratch, &raw);
  PoolScoresInto(score, 5, false, &p);
  SelectTokensInto(p, 5, 0, 0, scratch, &pooled);
  EXPECT_EQ(pooled, (std::vector<uint32_t>{198, 199, 200, 201, 202}));
  EXPECT_NE(raw, pooled);
  EXPECT_TRUE(std::find(raw.begin(), raw.end(), 200u) != raw.end());
}

}  // namespace
}  // namespace impress
