// A reorder keeps the fast tiers: the segments that get reordered are the popular ones, so their
// rewritten chunks take the old chunks' places in the device or host tier, with the old chunks'
// access statistics, and the next question reads nothing from the SSD.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <random>

#include "store/prefix-store.h"
#include "store/tier-manager.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 3, kHeads = 3, kDim = 32;

PrefixStoreOptions Options(const std::string& dir, uint64_t device_bytes, uint64_t host_bytes) {
  PrefixStoreOptions o = TestOptions(dir, "model-reorder-tiers", kLayers, kHeads, kDim, {0, 2}, 16);
  o.device_bytes = device_bytes;
  o.host_bytes = host_bytes;
  return o;
}

// Reads `pos` of every layer, checks the bytes, and returns the SSD bytes read meanwhile.
uint64_t Read(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& tokens,
              const std::vector<uint32_t>& pos) {
  const uint64_t before = s.Stats().ssd_bytes_read;
  MatchHandle h = s.Match(tokens);
  EXPECT_EQ(h.n_matched, tokens.size());
  for (int il = 0; il < kLayers; ++il) {
    auto r = s.Wait(*s.SubmitReadKV(h, il, pos, true, true));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) {
      EXPECT_TRUE(kv.Check(tokens, il, pos, *r, true, true));
    }
  }
  EXPECT_TRUE(s.Release(h).ok());
  return s.Stats().ssd_bytes_read - before;
}

struct NodeTotals {
  uint32_t device = 0, host = 0, ssd_only = 0;
  double score = 0;
};
NodeTotals Totals(PrefixStore& s) {
  NodeTotals t;
  for (const auto& n : s.SnapshotTree().nodes) {
    t.device += n.chunks_device;
    t.host += n.chunks_host;
    t.ssd_only += n.chunks_ssd_only;
    t.score += n.score;
  }
  return t;
}

void ReorderKeepsTier(Tier tier) {
  const std::string dir = TempDir("reorder-tiers");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(77);
  const uint64_t big = 16ull << 20;
  auto s = OpenOrDie(Options(dir, tier == Tier::kDevice ? big : 0, tier == Tier::kHost ? big : 0));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 200);  // 13 chunks per layer, the last one partial
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  std::vector<uint32_t> all(t.size()), important;
  std::iota(all.begin(), all.end(), 0u);
  for (uint32_t i = 0; i < t.size(); ++i)
    if (i % 4 == 1) important.push_back(i);
  // A popular document: read and reported three times, so its chunks have frequency and ratios.
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(Read(*s, kv, t, all), 0u);
    MatchHandle h = s->Match(t);
    for (int il = 0; il < kLayers; ++il) ASSERT_TRUE(s->ReportImportance(h, il, important).ok());
    ASSERT_TRUE(s->Release(h).ok());
  }
  const NodeTotals before = Totals(*s);
  const StoreStats st_before = s->Stats();
  ASSERT_EQ(before.ssd_only, 0u);
  ASSERT_GT(tier == Tier::kDevice ? before.device : before.host, 0u);
  ASSERT_GT(before.score, 0.0);

  auto rep = s->ReorderNow();
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->segments_reordered, 1u) << "the important tokens were spread: the order must change";

  // The same residency and the same policy scores, before any read touches a statistic.
  const NodeTotals after = Totals(*s);
  EXPECT_EQ(after.device, before.device);
  EXPECT_EQ(after.host, before.host);
  EXPECT_EQ(after.ssd_only, 0u);
  EXPECT_DOUBLE_EQ(after.score, before.score);
  const StoreStats st_after = s->Stats();
  EXPECT_EQ(st_after.tiers.n_chunks_known, st_before.tiers.n_chunks_known);
  EXPECT_EQ(st_after.tiers.device.used_bytes, st_before.tiers.device.used_bytes);
  EXPECT_EQ(st_after.tiers.host.used_bytes, st_before.tiers.host.used_bytes);

  // The next questions are served from the fast tier with the right bytes (new order included).
  EXPECT_EQ(Read(*s, kv, t, important), 0u);
  EXPECT_EQ(Read(*s, kv, t, all), 0u);
  EXPECT_TRUE(s->CheckConsistency().ok()) << s->CheckConsistency().ToString();
  s.reset();
  std::filesystem::remove_all(dir);
}

// A request's reported importance reaches the chunks that hold the selected tokens: with the
// document's node split at a chunk boundary (another sequence shares its first 48 tokens) and
// only the tokens after the split selected, the first node's chunks rank at 0 and the second's
// above (each ranks by its own chunks: a report landing one chunk off crosses the split).
TEST(ReorderTiers, ReportedImportanceGoesToTheChunksOfTheSelectedTokens) {
  const std::string dir = TempDir("importance-chunks");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(78);
  auto s = OpenOrDie(Options(dir, 0, 16ull << 20));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 200);  // chunks of 16 tokens: 0-2 before the split, 3-12 after
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  constexpr uint32_t kSplit = 48;
  std::vector<int32_t> other(t.begin(), t.begin() + kSplit);
  for (int32_t x : RandomTokens(rng, 40)) other.push_back(x);
  ASSERT_TRUE(kv.Insert(*s, other, kSplit).ok());
  std::vector<uint32_t> all(t.size()), after_split;
  std::iota(all.begin(), all.end(), 0u);
  for (uint32_t i = kSplit; i < t.size(); ++i) after_split.push_back(i);
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(Read(*s, kv, t, all), 0u);
    MatchHandle h = s->Match(t);
    for (int il = 0; il < kLayers; ++il) ASSERT_TRUE(s->ReportImportance(h, il, after_split).ok());
    ASSERT_TRUE(s->Release(h).ok());
  }
  double first = -1, second = -1;
  for (const TreeNodeInfo& n : s->SnapshotTree().nodes) {
    if (n.start == 0) first = n.score;
    if (n.start == kSplit && n.n_tokens == t.size() - kSplit) second = n.score;
  }
  ASSERT_GE(first, 0.0) << "no node starts at 0";
  ASSERT_GT(second, 0.0) << "no node holds the document after the split, or it ranks at 0";
  EXPECT_LT(first, 0.01 * second);
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(ReorderTiers, DeviceResidentSegmentStaysInDeviceWithItsStatistics) { ReorderKeepsTier(Tier::kDevice); }
TEST(ReorderTiers, HostResidentSegmentStaysInHostWithItsStatistics) { ReorderKeepsTier(Tier::kHost); }

}  // namespace
}  // namespace impress::store
