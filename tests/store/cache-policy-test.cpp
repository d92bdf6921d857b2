// Cache policies: chunk keys, the importance EMA, and how each policy ranks chunks.
#include "store/cache-policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace impress::store {
namespace {

TEST(ChunkKey, PackUnpackRoundTripsAndKeysAreDistinct) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const ChunkKey k{rng() >> 28, uint32_t(rng() % 1024), uint32_t(rng() % 262144)};
    ASSERT_TRUE(k.Packable());
    EXPECT_EQ(ChunkKey::Unpack(k.Pack()), k);
  }
  // Neighbouring fields never alias.
  EXPECT_NE((ChunkKey{1, 0, 0}.Pack()), (ChunkKey{0, 1023, 262143}.Pack()));
  EXPECT_NE((ChunkKey{0, 1, 0}.Pack()), (ChunkKey{0, 0, 262143}.Pack()));
}

TEST(ChunkKey, MakeNamesTheFieldThatDoesNotFit) {
  EXPECT_TRUE(ChunkKey::Make(5, 29, 100).ok());
  auto seg = ChunkKey::Make(uint64_t(1) << 36, 0, 0);
  ASSERT_FALSE(seg.ok());
  EXPECT_NE(seg.status().message().find("segment"), std::string::npos);
  auto layer = ChunkKey::Make(1, 1024, 0);
  ASSERT_FALSE(layer.ok());
  EXPECT_NE(layer.status().message().find("layer"), std::string::npos);
  auto index = ChunkKey::Make(1, 0, 1u << 18);
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().message().find("index"), std::string::npos);
}

TEST(ImportantRatio, FirstReportReplacesThePriorThenAnEmaFollows) {
  ChunkStats s;
  EXPECT_EQ(s.important_ratio, 1.0);
  ASSERT_TRUE(RecordImportance(s, 0.2).ok());
  EXPECT_DOUBLE_EQ(s.important_ratio, 0.2);
  // Independent recomputation of the EMA.
  double want = 0.2;
  for (double f : {1.0, 0.0, 0.5, 0.75, 0.1}) {
    ASSERT_TRUE(RecordImportance(s, f).ok());
    want = want + kImportantRatioEmaWeight * (f - want);
    EXPECT_NEAR(s.important_ratio, want, 1e-12);
  }
  EXPECT_EQ(s.n_importance_reports, 6u);
}

TEST(ImportantRatio, BadFractionsAreRejectedAndChangeNothing) {
  ChunkStats s;
  ASSERT_TRUE(RecordImportance(s, 0.5).ok());
  for (double bad : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(RecordImportance(s, bad).code(), Status::Code::kInvalidArgument);
  }
  EXPECT_EQ(RecordImportance(s, 0.5, 0.0).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.important_ratio, 0.5);
  EXPECT_EQ(s.n_importance_reports, 1u);
}

ChunkStats Stats(uint64_t freq, double ratio, uint64_t last) {
  ChunkStats s;
  s.frequency = freq;
  s.important_ratio = ratio;
  s.n_importance_reports = 1;
  s.last_access = last;
  return s;
}

TEST(CachePolicy, ImpressRanksByFrequencyTimesImportantRatio) {
  auto p = MakeCachePolicy(PolicyKind::kImpress);
  EXPECT_EQ(p->name(), "impress");
  const ChunkStats hot_unimportant = Stats(10, 0.1, 50);  // score 1.0
  const ChunkStats cool_important = Stats(4, 0.9, 10);    // score 3.6
  EXPECT_LT(p->Rank(hot_unimportant), p->Rank(cool_important));
  EXPECT_DOUBLE_EQ(p->Rank(cool_important).primary, 4 * 0.9);
  // Equal scores: the less recent one goes first.
  EXPECT_LT(p->Rank(Stats(2, 0.5, 1)), p->Rank(Stats(1, 1.0, 2)));
}

TEST(CachePolicy, LruRanksByRecencyOnly) {
  auto p = MakeCachePolicy(PolicyKind::kLru);
  EXPECT_LT(p->Rank(Stats(100, 1.0, 5)), p->Rank(Stats(1, 0.0, 6)));
}

TEST(CachePolicy, LfuRanksByFrequencyThenRecency) {
  auto p = MakeCachePolicy(PolicyKind::kLfu);
  EXPECT_LT(p->Rank(Stats(2, 1.0, 99)), p->Rank(Stats(3, 0.0, 1)));
  EXPECT_LT(p->Rank(Stats(3, 1.0, 1)), p->Rank(Stats(3, 1.0, 2)));
}

TEST(CachePolicy, ParseKnowsTheNamesAndRejectsOthers) {
  EXPECT_EQ(*ParsePolicyKind("impress"), PolicyKind::kImpress);
  EXPECT_EQ(*ParsePolicyKind("score"), PolicyKind::kImpress);
  EXPECT_EQ(*ParsePolicyKind("lru"), PolicyKind::kLru);
  EXPECT_EQ(*ParsePolicyKind("lfu"), PolicyKind::kLfu);
  auto bad = ParsePolicyKind("fifo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fifo"), std::string::npos);
  for (PolicyKind k : {PolicyKind::kImpress, PolicyKind::kLru, PolicyKind::kLfu}) {
    EXPECT_EQ(MakeCachePolicy(k)->kind(), k);
    EXPECT_EQ(*ParsePolicyKind(PolicyKindName(k)), k);
  }
}

}  // namespace
}  // namespace impress::store
