// The fraction of a chunk a request selected ranks it from its first read: under the IMPRESS
// score (frequency x important ratio, the ratio an EMA of the fractions selected), a chunk read
// once at a small selection ranks below a popular chunk read several times at the same one, not
// with the optimistic prior of 1.0.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "store/cache-policy.h"
#include "store/prefix-store.h"
#include "store/tier-manager.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::SyntheticKV;
using testing::TempDir;

// The documented score after `fractions` (one access each): frequency x the EMA of the fractions,
// whose first observation replaces the prior.
double ExpectedScore(const std::vector<double>& fractions) {
  double ratio = ChunkStats::kInitialImportantRatio;
  for (size_t i = 0; i < fractions.size(); ++i)
    ratio = i == 0 ? fractions[i] : (1.0 - kImportantRatioEmaWeight) * ratio + kImportantRatioEmaWeight * fractions[i];
  return double(fractions.size()) * ratio;
}

TEST(ReadFraction, PolicyRanksByFrequencyTimesSelectedFraction) {
  TierManager tm(MakeCachePolicy(PolicyKind::kImpress), 1000, 0);
  const std::vector<double> once_full = {1.0}, popular = {0.25, 0.25, 0.25}, once_quarter = {0.25};
  for (double f : once_full) tm.Access(1, 100, f);
  for (double f : popular) tm.Access(2, 100, f);
  for (double f : once_quarter) tm.Access(3, 100, f);
  const double s1 = ExpectedScore(once_full), s2 = ExpectedScore(popular), s3 = ExpectedScore(once_quarter);
  ASSERT_TRUE(s3 < s2 && s2 < s1) << s1 << " " << s2 << " " << s3;
  EXPECT_DOUBLE_EQ(tm.policy().Rank(*tm.Stats(1)).primary, s1);
  EXPECT_DOUBLE_EQ(tm.policy().Rank(*tm.Stats(2)).primary, s2);
  EXPECT_DOUBLE_EQ(tm.policy().Rank(*tm.Stats(3)).primary, s3);
  EXPECT_EQ(tm.Resident(Tier::kDevice), (std::vector<ChunkId>{3, 2, 1})) << "ascending priority";
}

// Through the store: a first read of a quarter of each chunk's tokens (K and V, no importance
// report yet) gives every chunk the score 1 x 0.25; a read of every token adds frequency only.
TEST(ReadFraction, StoreReadPassesTheSelectedFraction) {
  const std::string dir = TempDir("read-fraction");
  SyntheticKV kv{2, 2, 32};
  std::mt19937 rng(5);
  PrefixStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = "model-read-fraction";
  o.n_layer = 2;
  o.n_head_kv = 2;
  o.head_dim = 32;
  o.probe_kv_heads = {0};
  o.chunk_tokens = 16;
  o.device_bytes = 16ull << 20;
  o.host_bytes = 0;
  o.admit_on_insert = false;
  o.reorder_interval = std::chrono::milliseconds(0);
  o.data_file_bytes = 8ull << 20;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 200);  // 13 chunks, the last one of 8 tokens
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  std::vector<uint32_t> quarter, all(t.size());
  for (uint32_t i = 0; i < t.size(); ++i) {
    all[i] = i;
    if (i % 4 == 1) quarter.push_back(i);
  }
  auto read = [&](const std::vector<uint32_t>& pos) {
    MatchHandle h = s->Match(t);
    for (int il = 0; il < 2; ++il) {
      auto r = s->Wait(*s->SubmitReadKV(h, il, pos, true, true));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(kv.Check(t, il, pos, *r, true, true));
    }
    ASSERT_TRUE(s->Release(h).ok());
  };
  auto score = [&] {
    const TreeSnapshot snap = s->SnapshotTree();
    EXPECT_EQ(snap.nodes.size(), 1u);
    return snap.nodes.empty() ? -1.0 : snap.nodes[0].score;
  };
  read(quarter);
  EXPECT_DOUBLE_EQ(score(), ExpectedScore({0.25}));
  read(all);  // every slot: frequency 2, the ratio stays what the selection said
  EXPECT_DOUBLE_EQ(score(), 2 * 0.25);
  s.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
