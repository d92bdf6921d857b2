// Tier manager: the paper's access algorithm case by case, budgets, LRU/LFU semantics, a random
// trace checked against a mirror of the moves, and the scripted trace where importance matters.
#include "store/tier-manager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

namespace impress::store {
namespace {

constexpr uint64_t kB = 100;  // bytes per chunk in the scripted cases

using Moves = std::vector<TierMove>;

TierManager Make(PolicyKind kind, uint64_t device_chunks, uint64_t host_chunks) {
  return TierManager(MakeCachePolicy(kind), device_chunks * kB, host_chunks * kB);
}

// The access algorithm, walked case by case with the IMPRESS score (device 2, host 2 chunks).
class AccessAlgorithm : public ::testing::Test {
 protected:
  TierManager tm = Make(PolicyKind::kImpress, 2, 2);
  void Check() { ASSERT_TRUE(tm.Validate().ok()) << tm.Validate().ToString(); }
};

TEST_F(AccessAlgorithm, SsdMissGoesToDeviceWhileItHasRoom) {
  const AccessResult r = tm.Access(1, kB, 0.5);
  EXPECT_EQ(r.found_in, Tier::kSsd);
  EXPECT_EQ(r.resident_after, Tier::kDevice);
  EXPECT_EQ(r.moves, (Moves{{1, Tier::kSsd, Tier::kDevice, kB}}));
  EXPECT_EQ(tm.stats().ssd_reads, 1u);
  Check();
}

TEST_F(AccessAlgorithm, DeviceHitIsUsedAndOnlyItsScoreChanges) {
  tm.Access(1, kB, 0.5);
  const AccessResult r = tm.Access(1, kB, 0.5);
  EXPECT_EQ(r.found_in, Tier::kDevice);
  EXPECT_TRUE(r.moves.empty());
  EXPECT_EQ(tm.Stats(1)->frequency, 2u);
  EXPECT_DOUBLE_EQ(r.priority.primary, 2 * 0.5);
  EXPECT_EQ(tm.stats().device.hits, 1u);
  Check();
}

TEST_F(AccessAlgorithm, SsdMissToHostToDeviceOrNeitherByComparingBothMinimums) {
  tm.Access(1, kB, 0.5);  // device, score 0.5
  tm.Access(2, kB, 0.5);  // device, score 0.5; device now full
  // Score 0.1 does not beat the device minimum; the host has room.
  AccessResult r = tm.Access(3, kB, 0.1);
  EXPECT_EQ(r.resident_after, Tier::kHost);
  EXPECT_EQ(r.moves, (Moves{{3, Tier::kSsd, Tier::kHost, kB}}));
  // Score 1.0 beats the device minimum (chunk 1: 0.5 and older than 2): 1 is demoted to host.
  r = tm.Access(4, kB, 1.0);
  EXPECT_EQ(r.resident_after, Tier::kDevice);
  EXPECT_EQ(r.moves, (Moves{{1, Tier::kDevice, Tier::kHost, kB}, {4, Tier::kSsd, Tier::kDevice, kB}}));
  // Both tiers full. Score 0.05 beats neither minimum (device 0.5, host 0.1): stays on SSD.
  r = tm.Access(5, kB, 0.05);
  EXPECT_EQ(r.found_in, Tier::kSsd);
  EXPECT_EQ(r.resident_after, Tier::kSsd);
  EXPECT_TRUE(r.moves.empty());
  // Score 0.3 beats the host minimum (3: 0.1) but not the device's: it replaces 3 in host.
  r = tm.Access(6, kB, 0.3);
  EXPECT_EQ(r.resident_after, Tier::kHost);
  EXPECT_EQ(r.moves, (Moves{{3, Tier::kHost, Tier::kSsd, kB}, {6, Tier::kSsd, Tier::kHost, kB}}));
  EXPECT_EQ(tm.Where(3), Tier::kSsd);
  EXPECT_EQ(tm.stats().host.evictions, 1u);
  EXPECT_EQ(tm.stats().device.evictions, 1u);
  Check();
}

TEST_F(AccessAlgorithm, HostHitWithoutSwapStaysInHost) {
  tm.Access(1, kB, 0.9);
  tm.Access(2, kB, 0.9);
  tm.Access(3, kB, 0.1);                         // host
  const AccessResult r = tm.Access(3, kB, 0.1);  // score 2 * 0.1 = 0.2 < device min 0.9
  EXPECT_EQ(r.found_in, Tier::kHost);
  EXPECT_EQ(r.resident_after, Tier::kHost);
  EXPECT_TRUE(r.moves.empty());
  EXPECT_EQ(tm.stats().host.hits, 1u);
  EXPECT_EQ(tm.stats().device.misses, 4u);
  Check();
}

TEST_F(AccessAlgorithm, HostHitWithSwapExchangesWithTheDeviceMinimum) {
  tm.Access(1, kB, 0.5);
  tm.Access(2, kB, 0.6);
  tm.Access(3, kB, 0.4);                         // host (0.4 < 0.5)
  const AccessResult r = tm.Access(3, kB, 0.4);  // score 2 * 0.4 = 0.8 > device min 0.5
  EXPECT_EQ(r.found_in, Tier::kHost);
  EXPECT_EQ(r.resident_after, Tier::kDevice);
  EXPECT_EQ(r.moves, (Moves{{1, Tier::kDevice, Tier::kHost, kB}, {3, Tier::kHost, Tier::kDevice, kB}}));
  EXPECT_EQ(tm.Where(1), Tier::kHost);
  EXPECT_EQ(tm.Resident(Tier::kDevice), (std::vector<ChunkId>{2, 3}));
  Check();
}

TEST_F(AccessAlgorithm, ReportedImportanceReranksWithoutMovingAnything) {
  tm.Access(1, kB);
  tm.Access(2, kB);
  ASSERT_TRUE(tm.ReportImportance(2, 0.1).ok());
  ASSERT_TRUE(tm.ReportImportance(1, 0.9).ok());
  EXPECT_EQ(tm.Min(Tier::kDevice)->first, 2u);
  EXPECT_EQ(tm.ReportImportance(1, 1.5).code(), Status::Code::kInvalidArgument);
  EXPECT_DOUBLE_EQ(tm.Stats(1)->important_ratio, 0.9);
  Check();
}

TEST_F(AccessAlgorithm, ShrinkingTheDeviceDemotesAndShrinkingTheHostDrops) {
  tm.Access(1, kB, 0.5);
  tm.Access(2, kB, 0.9);
  tm.Access(3, kB, 0.2);  // host
  Moves m = tm.SetBudget(Tier::kDevice, kB);
  EXPECT_EQ(m, (Moves{{1, Tier::kDevice, Tier::kHost, kB}}));  // host had room
  m = tm.SetBudget(Tier::kDevice, 0);
  // The host is full (3 and 1); 2 (0.9) beats its minimum (3: 0.2), which is dropped.
  EXPECT_EQ(m, (Moves{{3, Tier::kHost, Tier::kSsd, kB}, {2, Tier::kDevice, Tier::kHost, kB}}));
  m = tm.SetBudget(Tier::kHost, 0);
  EXPECT_EQ(m, (Moves{{1, Tier::kHost, Tier::kSsd, kB}, {2, Tier::kHost, Tier::kSsd, kB}}));
  EXPECT_EQ(tm.stats().device.used_bytes, 0u);
  EXPECT_EQ(tm.stats().host.used_bytes, 0u);
  // With no budget at all every access is a plain SSD read.
  EXPECT_TRUE(tm.Access(7, kB, 1.0).moves.empty());
  Check();
}

TEST_F(AccessAlgorithm, AChunkBiggerThanATierNeverEntersIt) {
  const AccessResult r = tm.Access(1, 3 * kB, 1.0);  // device and host hold 2 * kB each
  EXPECT_EQ(r.resident_after, Tier::kSsd);
  EXPECT_TRUE(r.moves.empty());
  // Two chunks of 0.5 kB fit where one of kB left.
  tm.Access(2, kB, 0.5);
  tm.Access(3, kB / 2, 0.9);
  tm.Access(4, kB / 2, 0.9);
  EXPECT_EQ(tm.stats().device.used_bytes, 2 * kB);
  Check();
}

TEST_F(AccessAlgorithm, RemoveReturnsTheDropAndForgetsTheChunk) {
  tm.Access(1, kB, 0.5);
  EXPECT_EQ(tm.Remove(1), (TierMove{1, Tier::kDevice, Tier::kSsd, kB}));
  EXPECT_FALSE(tm.Stats(1).has_value());
  EXPECT_FALSE(tm.Remove(1).has_value());
  tm.Access(2, kB, 0.5);
  tm.Remove(2, /*keep_stats=*/true);
  EXPECT_EQ(tm.Where(2), Tier::kSsd);
  EXPECT_EQ(tm.Stats(2)->frequency, 1u);
  Check();
}

TEST(TierPolicies, LruKeepsTheMostRecentlyUsedInDevice) {
  TierManager tm = Make(PolicyKind::kLru, 3, 1);
  for (ChunkId c : {1, 2, 3, 4}) tm.Access(c, kB);  // 1 is pushed to host
  EXPECT_EQ(tm.Where(1), Tier::kHost);
  tm.Access(2, kB);  // 2 is now the most recent
  tm.Access(5, kB);  // evicts the LRU of device: 3
  EXPECT_EQ(tm.Where(3), Tier::kHost);
  EXPECT_EQ(tm.Where(1), Tier::kSsd);                                      // the older host chunk made way
  EXPECT_EQ(tm.Resident(Tier::kDevice), (std::vector<ChunkId>{4, 2, 5}));  // ascending recency
  ASSERT_TRUE(tm.Validate().ok());
}

TEST(TierPolicies, LfuKeepsTheMostFrequentlyUsedInDevice) {
  TierManager tm = Make(PolicyKind::kLfu, 3, 1);
  for (int i = 0; i < 3; ++i) tm.Access(1, kB);
  for (int i = 0; i < 2; ++i) tm.Access(2, kB);
  for (ChunkId c = 10; c < 30; ++c) tm.Access(c, kB);  // a scan of one-off chunks
  EXPECT_EQ(tm.Where(1), Tier::kDevice);
  EXPECT_EQ(tm.Where(2), Tier::kDevice);
  EXPECT_EQ(tm.stats().device.n_chunks, 3u);
  ASSERT_TRUE(tm.Validate().ok());
}

TEST(TierPolicies, SwitchingPolicyReranksResidentChunks) {
  TierManager tm = Make(PolicyKind::kLru, 2, 0);
  for (int i = 0; i < 5; ++i) tm.Access(1, kB);
  tm.Access(2, kB);
  EXPECT_EQ(tm.Min(Tier::kDevice)->first, 1u);  // LRU: 1 is older
  tm.SetPolicy(MakeCachePolicy(PolicyKind::kLfu));
  EXPECT_EQ(tm.Min(Tier::kDevice)->first, 2u);  // LFU: 2 is rarer
  ASSERT_TRUE(tm.Validate().ok());
}

// Random accesses, budget changes and removals; every move is applied to a mirror that must
// agree with the manager, and every move must start where the chunk really is.
TEST(TierManagerProperty, MovesReplayedOnAMirrorMatchTheManager) {
  for (PolicyKind kind : {PolicyKind::kImpress, PolicyKind::kLru, PolicyKind::kLfu}) {
    TierManager tm(MakeCachePolicy(kind), 20 * kB, 30 * kB);
    std::map<ChunkId, Tier> mirror;
    std::mt19937 rng(11);
    auto apply = [&](const Moves& moves) {
      for (const TierMove& m : moves) {
        const Tier at = mirror.count(m.chunk) ? mirror[m.chunk] : Tier::kSsd;
        ASSERT_EQ(at, m.from) << "chunk " << m.chunk;
        ASSERT_NE(m.from, m.to);
        mirror[m.chunk] = m.to;
      }
    };
    for (int op = 0; op < 20000; ++op) {
      const int k = int(rng() % 100);
      if (k < 90) {
        const ChunkId c = rng() % 200;
        const uint64_t bytes = kB / 2 + rng() % kB;
        std::optional<double> f;
        if (rng() % 2) f = double(rng() % 101) / 100.0;
        const AccessResult r = tm.Access(c, bytes, f);
        const Tier before = mirror.count(c) ? mirror[c] : Tier::kSsd;
        ASSERT_EQ(r.found_in, before);
        apply(r.moves);
      } else if (k < 95) {
        ASSERT_TRUE(tm.ReportImportance(rng() % 200, double(rng() % 101) / 100.0).ok());
      } else if (k < 98) {
        apply(tm.SetBudget(rng() % 2 ? Tier::kDevice : Tier::kHost, (rng() % 40) * kB));
      } else {
        const ChunkId c = rng() % 200;
        if (auto m = tm.Remove(c)) apply({*m});
      }
      if (op % 500 == 0) {
        ASSERT_TRUE(tm.Validate().ok()) << tm.Validate().ToString();
      }
    }
    for (auto& [c, t] : mirror) ASSERT_EQ(tm.Where(c), t) << c;
    ASSERT_TRUE(tm.Validate().ok());
  }
}

// The paper's case for score-based caching: important chunks are accessed LESS often than
// unimportant ones, yet they are the ones worth keeping in device memory.
TEST(TierPolicies, ScoreBeatsLruAndLfuOnImportantChunksAccessedLessOften) {
  constexpr int kImportant = 20, kUnimportant = 40;
  constexpr int kAccesses = 40000;
  struct Rates {
    double important = 0, all = 0;
  };
  auto run = [&](PolicyKind kind) {
    TierManager tm(MakeCachePolicy(kind), 20 * kB, 20 * kB);  // device fits all important ones
    std::mt19937 rng(2025);
    uint64_t imp_hits = 0, imp_n = 0, hits = 0;
    for (int i = 0; i < kAccesses; ++i) {
      // 30% of accesses go to the 20 important chunks (1.5% each), 70% to the 40 others (1.75%).
      const bool important = rng() % 100 < 30;
      const ChunkId c = important ? rng() % kImportant : kImportant + rng() % kUnimportant;
      const AccessResult r = tm.Access(c, kB);
      // The pipeline reports afterwards which fraction of the chunk's tokens it selected.
      const double noise = double(rng() % 21) / 100.0;  // 0 .. 0.2
      EXPECT_TRUE(tm.ReportImportance(c, important ? 0.8 + noise : noise).ok());
      if (i < kAccesses / 10) continue;  // warm-up
      const bool hit = r.found_in == Tier::kDevice;
      hits += hit;
      if (important) {
        imp_hits += hit;
        ++imp_n;
      }
    }
    EXPECT_TRUE(tm.Validate().ok());
    return Rates{double(imp_hits) / double(imp_n), double(hits) / (kAccesses * 0.9)};
  };
  const Rates score = run(PolicyKind::kImpress);
  const Rates lru = run(PolicyKind::kLru);
  const Rates lfu = run(PolicyKind::kLfu);
  std::printf("device hit rate on important chunks: impress %.3f  lru %.3f  lfu %.3f\n", score.important, lru.important,
              lfu.important);
  std::printf("device hit rate on all chunks:       impress %.3f  lru %.3f  lfu %.3f\n", score.all, lru.all, lfu.all);
  EXPECT_GT(score.important, lru.important + 0.2);
  EXPECT_GT(score.important, lfu.important + 0.2);
}

}  // namespace
}  // namespace impress::store
