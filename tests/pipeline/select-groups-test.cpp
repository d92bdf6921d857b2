// I/O-aware selection in whole read groups (pipeline/selection.h, SelectGroups) against the
// brute force of tests/pipeline/selection-reference.h, under both budgets: the token-level
// importance mass, and the keep ratio's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "pipeline/selection.h"
#include "tests/pipeline/selection-reference.h"

namespace impress {
namespace {

using selection_reference::Mass;
using selection_reference::NaiveSelectGroups;
using selection_reference::ShuffledGroups;

TEST(SelectGroups, KeepsWholeGroupsUpToTheTokenLevelMassAndReportsExactlyThem) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 300), gsize = 1 + int(rng() % 20);
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = std::exp(float(rng() % 1000) / 100.0f);  // heavy-tailed, no ties
    const std::vector<uint32_t> group = ShuffledGroups(rng, n, gsize);
    const uint32_t n_groups = *std::max_element(group.begin(), group.end()) + 1;
    const int k = 1 + int(rng() % uint32_t(n)), sinks = int(rng() % 5), recent = int(rng() % 9);

    const std::vector<uint32_t> tok = SelectTokens(score, k, sinks, recent);
    const std::vector<uint32_t> sel = SelectGroups(score, k, sinks, recent, group);
    ASSERT_TRUE(std::is_sorted(sel.begin(), sel.end()));
    EXPECT_EQ(sel, NaiveSelectGroups(score, k, sinks, recent, group)) << "n " << n << " k " << k;
    // Exactly the members of the groups it kept: no group partly.
    std::vector<int> kept(n_groups, 0), size(n_groups, 0);
    for (uint32_t g : group) ++size[g];
    for (uint32_t i : sel) ++kept[group[i]];
    for (uint32_t g = 0; g < n_groups; ++g) ASSERT_TRUE(kept[g] == 0 || kept[g] == size[g]) << "group " << g;
    // At least the token-level mass; and the groups of the forced tokens (sinks, recent) are in.
    const double target = Mass(score, tok);
    EXPECT_GE(Mass(score, sel), target * (1 - 1e-5));
    std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    for (uint32_t i : SelectTokens(zero, std::min(k, std::min(sinks, n) + std::min(recent, n)), sinks, recent))
      EXPECT_GT(kept[group[i]], 0) << "forced token " << i;
    // Greedy by group mass, and no group more than needed: every optional kept group outweighs
    // every group left out, and without the lightest of them the mass falls short.
    std::vector<double> gm(n_groups, 0.0);
    for (int i = 0; i < n; ++i) gm[group[size_t(i)]] += score[size_t(i)];
    std::vector<uint8_t> forced(n_groups, 0);
    for (uint32_t i : SelectTokens(zero, std::min(k, std::min(sinks, n) + std::min(recent, n)), sinks, recent))
      forced[group[i]] = 1;
    double lightest = INFINITY, heaviest_out = -1;
    for (uint32_t g = 0; g < n_groups; ++g) {
      if (kept[g] && !forced[g]) lightest = std::min(lightest, gm[g]);
      if (!kept[g]) heaviest_out = std::max(heaviest_out, gm[g]);
    }
    if (std::isfinite(lightest)) {
      EXPECT_GE(lightest, heaviest_out);
      EXPECT_LT(Mass(score, sel) - lightest, target * (1 - 1e-6));
    }
  }
}

TEST(SelectGroups, SingleTokenGroupsSelectWhatSelectTokensSelects) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 1 + int(rng() % 200);
    std::vector<float> score(static_cast<size_t>(n));
    for (float& x : score) x = float(rng() % 100000) + 1000.0f;  // tolerance of the mass << any score
    std::vector<uint32_t> group(static_cast<size_t>(n));
    std::iota(group.begin(), group.end(), 0u);
    const int k = 1 + int(rng() % uint32_t(n));
    EXPECT_EQ(SelectGroups(score, k, 4, 8, group), SelectTokens(score, k, 4, 8)) << "n " << n << " k " << k;
  }
}

TEST(SelectGroups, WithATokenBudgetKeepsTheHeaviestWholeGroupsUntilKTokens) {
  std::mt19937 rng(17);
  SelectionScratch scratch;
  std::vector<uint32_t> into;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 400), gsize = 1 + int(rng() % 20);
    std::vector<float> score(static_cast<size_t>(n));
    // Ties in a third of the trials (few distinct values), heavy tails in the others.
    for (float& x : score) x = trial % 3 == 0 ? float(rng() % 5) : std::exp(float(rng() % 1000) / 100.0f);
    const std::vector<uint32_t> group = ShuffledGroups(rng, n, gsize);
    const uint32_t n_groups = *std::max_element(group.begin(), group.end()) + 1;
    const int k = int(rng() % uint32_t(n + 1)), sinks = int(rng() % 5), recent = int(rng() % 9);

    const std::vector<uint32_t> sel = SelectGroups(score, k, sinks, recent, group, GroupBudget::kTokens);
    ASSERT_TRUE(std::is_sorted(sel.begin(), sel.end()));
    EXPECT_EQ(sel, NaiveSelectGroups(score, k, sinks, recent, group, GroupBudget::kTokens)) << "n " << n << " k " << k;
    SelectGroupsInto(score, k, sinks, recent, group, scratch, &into, GroupBudget::kTokens);
    EXPECT_EQ(into, sel) << "n " << n << " k " << k;
    // Whole groups only, at least k tokens, and the forced tokens' groups in.
    std::vector<int> kept(n_groups, 0), size(n_groups, 0);
    for (uint32_t g : group) ++size[g];
    for (uint32_t i : sel) ++kept[group[i]];
    for (uint32_t g = 0; g < n_groups; ++g) ASSERT_TRUE(kept[g] == 0 || kept[g] == size[g]) << "group " << g;
    EXPECT_GE(int(sel.size()), k);
    std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    std::vector<uint8_t> forced(n_groups, 0);
    for (uint32_t i : SelectTokens(zero, std::min(k, std::min(sinks, n) + std::min(recent, n)), sinks, recent)) {
      EXPECT_GT(kept[group[i]], 0) << "forced token " << i;
      forced[group[i]] = 1;
    }
    // Greedy by group mass, and no group more than needed: every optional kept group outweighs
    // every group left out, and without the lightest of them fewer than k tokens remain.
    std::vector<double> gm(n_groups, 0.0);
    for (int i = 0; i < n; ++i) gm[group[size_t(i)]] += score[size_t(i)];
    double lightest = INFINITY, heaviest_out = -1;
    int lightest_size = 0;
    for (uint32_t g = 0; g < n_groups; ++g) {
      if (kept[g] && !forced[g] && gm[g] <= lightest) {  // of equal ones, the last added (highest id)
        lightest = gm[g];
        lightest_size = size[g];
      }
      if (!kept[g]) heaviest_out = std::max(heaviest_out, gm[g]);
    }
    if (std::isfinite(lightest)) {
      EXPECT_GE(lightest, heaviest_out);
      EXPECT_LT(int(sel.size()) - lightest_size, k);
    }
  }
}

TEST(GroupBudget, NamesRoundTripAndOtherNamesAreRefused) {
  for (const GroupBudget b : {GroupBudget::kMass, GroupBudget::kTokens}) {
    GroupBudget back = b == GroupBudget::kMass ? GroupBudget::kTokens : GroupBudget::kMass;
    ASSERT_TRUE(ParseGroupBudget(GroupBudgetName(b), &back)) << GroupBudgetName(b);
    EXPECT_EQ(back, b);
  }
  EXPECT_STREQ(GroupBudgetName(GroupBudget::kTokens), "tokens");
  EXPECT_STREQ(GroupBudgetName(GroupBudget::kMass), "mass");
  GroupBudget untouched = GroupBudget::kMass;
  for (const char* bad : {"", "Tokens", "bytes", "mass "}) {
    EXPECT_FALSE(ParseGroupBudget(bad, &untouched)) << "'" << bad << "'";
    EXPECT_EQ(untouched, GroupBudget::kMass);
  }
}

}  // namespace
}  // namespace impress
