// Importance-ordered chunks at write time: an Insert that carries per-layer importance writes each
// layer's chunks in that order with its mapping list. Reads give the original order's values bit
// for bit (also after a reopen, from the catalog's mapping lists, and from the memory tiers), and
// reading the important quarter touches fewer blocks than with the original order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::ReadsExact;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 3, kHeads = 2, kDim = 64;

PrefixStoreOptions Options(const std::string& dir) {
  return TestOptions(dir, "model-order", kLayers, kHeads, kDim, {1}, 64);
}

// Per layer, a different importance for each token (a random permutation of the scores).
std::vector<std::vector<float>> RandomImportance(std::mt19937& rng, size_t n) {
  std::vector<std::vector<float>> imp(kLayers, std::vector<float>(n));
  for (auto& l : imp) {
    for (size_t i = 0; i < n; ++i) l[i] = float(i);
    std::shuffle(l.begin(), l.end(), rng);
  }
  return imp;
}

Result<InsertSummary> InsertWithImportance(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& t,
                                           size_t start, const std::vector<std::vector<float>>* imp) {
  std::vector<std::vector<f16_t>> k, v;
  kv.Make(t, start, &k, &v);
  std::vector<LayerKV> layers(kLayers);
  for (int il = 0; il < kLayers; ++il)
    layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data(), imp ? (*imp)[size_t(il)].data() : nullptr};
  return s.Insert(t, start, layers);
}

// The `k` most important positions of layer il, ascending.
std::vector<uint32_t> Top(const std::vector<float>& imp, size_t k) {
  std::vector<uint32_t> p(imp.size());
  std::iota(p.begin(), p.end(), 0u);
  std::stable_sort(p.begin(), p.end(), [&](uint32_t a, uint32_t b) { return imp[a] > imp[b]; });
  p.resize(k);
  std::sort(p.begin(), p.end());
  return p;
}

// SSD bytes to read K and V of each layer's important quarter; checks the values read.
uint64_t ReadTopQuarter(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& t,
                        const std::vector<std::vector<float>>& imp) {
  MatchHandle h = s.Match(t);
  EXPECT_EQ(h.n_matched, t.size());
  uint64_t bytes = 0;
  for (int il = 0; il < kLayers; ++il) {
    const std::vector<uint32_t> pos = Top(imp[size_t(il)], t.size() / 4);
    auto r = s.Wait(*s.SubmitReadKV(h, il, pos, true, true));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) continue;
    EXPECT_TRUE(kv.Check(t, il, pos, *r, true, true));
    bytes += r->stats.ssd_bytes;
  }
  EXPECT_TRUE(s.Release(h).ok());
  return bytes;
}

TEST(WriteOrder, ImportanceOrderedChunksRoundTripBitExactly) {
  const std::string dir = TempDir("order");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(51);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const auto a = RandomTokens(rng, 700);
  const auto imp = RandomImportance(rng, a.size());
  ASSERT_TRUE(InsertWithImportance(*s, kv, a, 0, &imp).ok());
  // A second sequence sharing a's first 300 tokens: its new segment starts at 300, and only the
  // importance of its own tokens counts (the first 300 rows of its K/V are skipped).
  auto b = std::vector<int32_t>(a.begin(), a.begin() + 300);
  const auto tail = RandomTokens(rng, 250);
  b.insert(b.end(), tail.begin(), tail.end());
  const auto imp_b = RandomImportance(rng, b.size() - 100);
  ASSERT_TRUE(InsertWithImportance(*s, kv, b, 100, &imp_b).ok());
  EXPECT_TRUE(ReadsExact(*s, kv, a, a.size()));
  EXPECT_TRUE(ReadsExact(*s, kv, b, b.size()));
  ASSERT_TRUE(s->CheckConsistency().ok()) << s->CheckConsistency().ToString();
  // Reopened: the layout comes back from the catalog's mapping lists.
  s.reset();
  s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_TRUE(ReadsExact(*s, kv, a, a.size()));
  EXPECT_TRUE(ReadsExact(*s, kv, b, b.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  // The memory tiers hold the same order: reads from them are exact too.
  auto o = Options(dir + "-tiers");
  std::filesystem::remove_all(o.dir);
  o.device_bytes = 64ull << 20;
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  ASSERT_TRUE(InsertWithImportance(*s, kv, a, 0, &imp).ok());
  EXPECT_TRUE(ReadsExact(*s, kv, a, a.size()));
  EXPECT_EQ(s->Stats().ssd_bytes_read, 0u);
  // The write-time order is no importance report: a reorder before any question changes nothing
  // (it learns the order from the questions' reports).
  auto re = s->ReorderNow();
  ASSERT_TRUE(re.ok()) << re.status().ToString();
  EXPECT_EQ(re->segments_reordered, 0u);
  s.reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(o.dir);
}

TEST(WriteOrder, TheImportantQuarterReadsFewerBlocksThanInTheOriginalOrder) {
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(52);
  const auto t = RandomTokens(rng, 1024);
  const auto imp = RandomImportance(rng, t.size());
  uint64_t bytes[2] = {0, 0};
  for (int ordered = 0; ordered < 2; ++ordered) {
    const std::string dir = TempDir("order-bytes");
    auto s = OpenOrDie(Options(dir));
    ASSERT_TRUE(s);
    ASSERT_TRUE(InsertWithImportance(*s, kv, t, 0, ordered ? &imp : nullptr).ok());
    bytes[ordered] = ReadTopQuarter(*s, kv, t, imp);
    s.reset();
    std::filesystem::remove_all(dir);
  }
  // Packed: the quarter fills a quarter of the chunks (plus headers); scattered: nearly all blocks.
  EXPECT_LT(bytes[1] * 2, bytes[0]) << "ordered " << bytes[1] << " vs original order " << bytes[0];
}

// ReadGroups names runs of `g` consecutive stored slots of one chunk: in an importance-ordered
// layout, a group's members are tokens of similar importance; reading a whole group touches only
// the blocks its slots fill (with the block group, K + V of g tokens: whole blocks, nothing more).
TEST(WriteOrder, ReadGroupsAreRunsOfStoredSlotsThatFillWholeBlocks) {
  const std::string dir = TempDir("order-groups");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(53);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 600);
  const auto imp = RandomImportance(rng, t.size());
  ASSERT_TRUE(InsertWithImportance(*s, kv, t, 0, &imp).ok());
  const uint32_t g = s->BlockGroupTokens();
  EXPECT_EQ(g * uint32_t(kHeads * kDim * 2) % 4096, 0u) << "a group's K records fill whole blocks";
  MatchHandle h = s->Match(t);
  for (int il = 0; il < kLayers; ++il) {
    auto groups = s->ReadGroups(h, il, g);
    ASSERT_TRUE(groups.ok()) << groups.status().ToString();
    ASSERT_EQ(groups->size(), t.size());
    std::map<uint32_t, std::vector<uint32_t>> members;
    for (uint32_t p = 0; p < t.size(); ++p) members[(*groups)[p]].push_back(p);
    EXPECT_EQ(members.size(), (t.size() + g - 1) / g) << "dense ids, full groups but the last";
    EXPECT_EQ(members.rbegin()->first + 1, members.size());
    // The stored order is descending importance: group j holds ranks [j * g, (j + 1) * g).
    std::vector<uint32_t> rank(t.size());
    std::vector<uint32_t> by_imp(t.size());
    std::iota(by_imp.begin(), by_imp.end(), 0u);
    std::stable_sort(by_imp.begin(), by_imp.end(),
                     [&](uint32_t a, uint32_t b) { return imp[size_t(il)][a] > imp[size_t(il)][b]; });
    for (uint32_t r = 0; r < t.size(); ++r) rank[by_imp[r]] = r;
    for (auto& [id, ps] : members) {
      EXPECT_LE(ps.size(), g);
      for (uint32_t p : ps) EXPECT_EQ(rank[p] / g, id) << "layer " << il << " position " << p;
    }
    // Any group size, a power of two or not: the group of a token is (chunk, (slot % C) / size) of
    // its stored slot (here its rank), numbered densely in slot order.
    for (uint32_t size : {1u, 3u, 5u, 16u, 48u, 64u, 100u}) {
      auto sized = s->ReadGroups(h, il, size);
      ASSERT_TRUE(sized.ok()) << sized.status().ToString();
      const uint32_t c = 64, gs = std::min(size, c);
      std::map<std::pair<uint32_t, uint32_t>, uint32_t> dense;
      for (uint32_t slot = 0; slot < t.size(); ++slot) dense.try_emplace({slot / c, (slot % c) / gs}, 0);
      uint32_t next = 0;
      for (auto& [key, id] : dense) id = next++;
      for (uint32_t p = 0; p < t.size(); ++p)
        ASSERT_EQ((*sized)[p], dense.at({rank[p] / c, (rank[p] % c) / gs})) << "size " << size << " position " << p;
    }
    // Reading one whole group (not the last) reads exactly its blocks: K and V of g tokens.
    auto r = s->Wait(*s->SubmitReadKV(h, il, members[1], true, true));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kv.Check(t, il, members[1], *r, true, true));
    EXPECT_EQ(r->stats.ssd_bytes, 2ull * g * kHeads * kDim * 2);
  }
  EXPECT_TRUE(s->Release(h).ok());
  EXPECT_FALSE(s->ReadGroups(h, 0, 16).ok()) << "a released handle";
  s.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
