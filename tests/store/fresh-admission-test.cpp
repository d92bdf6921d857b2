// Freshly written KV in the memory tiers: an Insert places its chunks and probe keys in device,
// then host, while they have room (nothing is pushed out for them); reads after it are served from
// memory with the same bytes the SSD holds, and the store's own counters show no SSD read. And
// what a probe read admits: a segment's probe keys whole only when the read wants enough of them.
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
constexpr uint64_t kChunkMem = 16ull * 2 * kHeads * kDim * 2;  // 16 tokens, K + V, fp16

PrefixStoreOptions Options(const std::string& dir) {
  PrefixStoreOptions o = TestOptions(dir, "model-fresh", kLayers, kHeads, kDim, {0, 2}, 16);
  o.device_bytes = 16ull << 20;
  o.host_bytes = 16ull << 20;
  return o;
}

// Reads every layer's probe keys and all K/V of `tokens` once; checks every byte; returns the
// store's SSD bytes read meanwhile.
uint64_t ReadAll(PrefixStore& s, const SyntheticKV& kv, const std::vector<int32_t>& tokens) {
  const uint64_t before = s.Stats().ssd_bytes_read;
  MatchHandle h = s.Match(tokens);
  EXPECT_EQ(h.n_matched, tokens.size());
  std::vector<uint32_t> pos(h.n_matched);
  std::iota(pos.begin(), pos.end(), 0u);
  for (int il = 0; il < kLayers; ++il) {
    auto p = s.Wait(*s.SubmitProbeKeys(h, il));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) {
      EXPECT_TRUE(kv.CheckProbe(tokens, il, {0, 2}, h.n_matched, *p));
    }
    auto r = s.Wait(*s.SubmitReadKV(h, il, pos, true, true));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) {
      EXPECT_TRUE(kv.Check(tokens, il, pos, *r, true, true));
    }
  }
  EXPECT_TRUE(s.Release(h).ok());
  return s.Stats().ssd_bytes_read - before;
}

TEST(TierAdmitFresh, FillsDeviceThenHostWhileThereIsRoomAndPushesNothingOut) {
  TierManager tm(MakeCachePolicy(PolicyKind::kImpress), 200, 100);
  tm.Access(9, 100);  // a chunk read once: it has a score a fresh chunk cannot beat
  EXPECT_EQ(tm.Where(9), Tier::kDevice);
  EXPECT_EQ(tm.AdmitFresh(1, 100), Tier::kDevice);
  EXPECT_EQ(tm.AdmitFresh(2, 100), Tier::kHost);
  EXPECT_EQ(tm.AdmitFresh(3, 100), Tier::kSsd);  // both full: nothing leaves for it
  EXPECT_EQ(tm.Where(9), Tier::kDevice);
  EXPECT_FALSE(tm.Stats(3).has_value()) << "a chunk not placed gets no statistics";
  EXPECT_EQ(tm.AdmitFresh(1, 100), Tier::kDevice) << "a resident chunk stays where it is";
  const TierStats st = tm.stats();
  EXPECT_EQ(st.n_accesses, 1u) << "admission is no access";
  EXPECT_EQ(st.device.hits + st.device.misses, 1u);
  EXPECT_EQ(st.device.used_bytes, 200u);
  EXPECT_EQ(st.host.used_bytes, 100u);
  EXPECT_TRUE(tm.Validate().ok()) << tm.Validate().ToString();
  // The next access of a fresh chunk is a hit where it was admitted.
  EXPECT_EQ(tm.Access(1, 100).found_in, Tier::kDevice);
  EXPECT_EQ(tm.Access(2, 100).found_in, Tier::kHost);
}

TEST(FreshAdmission, FollowUpReadsComeFromMemoryWithTheSameBytes) {
  const std::string dir = TempDir("fresh");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(41);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const auto t = RandomTokens(rng, 200);  // 13 chunks per layer, the last one partial
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.tiers.device.n_chunks, uint64_t(kLayers) * (13 + 1)) << "every chunk and probe set in device";
  EXPECT_EQ(ReadAll(*s, kv, t), 0u) << "nothing read from the SSD";
  const StoreStats after = s->Stats();
  EXPECT_EQ(after.tiers.ssd_reads, 0u);
  EXPECT_EQ(after.tiers.device.hits, after.tiers.n_accesses);
  EXPECT_GT(after.tiers.n_accesses, 0u);
  EXPECT_TRUE(s->CheckConsistency().ok());
  // The data is on the SSD as well: a reopened store (empty tiers) reads the same bytes there.
  s.reset();
  auto o = Options(dir);
  o.device_bytes = o.host_bytes = 0;
  s = OpenOrDie(o);
  ASSERT_TRUE(s);
  EXPECT_GT(ReadAll(*s, kv, t), 0u);
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(FreshAdmission, WhatDoesNotFitStaysOnTheSsdAndTheSwitchTurnsItOff) {
  const std::string dir = TempDir("fresh-fit");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(42);
  auto o = Options(dir);
  o.device_bytes = 4 * kChunkMem;
  o.host_bytes = 0;
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  const auto a = RandomTokens(rng, 160);
  ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
  StoreStats st = s->Stats();
  EXPECT_LE(st.tiers.device.used_bytes, o.device_bytes);
  EXPECT_GT(st.tiers.device.n_chunks, 0u);
  EXPECT_GT(ReadAll(*s, kv, a), 0u) << "the rest comes from the SSD";
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);

  const std::string dir2 = TempDir("fresh-off");
  auto o2 = Options(dir2);
  o2.admit_on_insert = false;
  s = OpenOrDie(o2);
  ASSERT_TRUE(s);
  ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
  EXPECT_EQ(s->Stats().tiers.device.n_chunks, 0u);
  EXPECT_GT(ReadAll(*s, kv, a), 0u);
  s.reset();
  std::filesystem::remove_all(dir2);
}

// A short prefix of a long stored sequence (the system prompt a conversation without documents
// shares with a stored document) reads its own probe records, never the segment's whole probe
// extent, and admits nothing to the memory tiers; a request for the whole sequence still admits
// the extent, and the next one is served from memory.
TEST(ProbeAdmission, AShortPrefixReadsOnlyItsOwnProbeRecords) {
  const std::string dir = TempDir("shortprobe");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(23);
  PrefixStoreOptions o = Options(dir);
  o.device_bytes = 0;
  o.admit_on_insert = false;  // the tiers start empty, as in a new process
  auto s = OpenOrDie(o);
  const uint32_t n = 2048, shared = 16;
  const auto t = RandomTokens(rng, n);
  ASSERT_TRUE(kv.Insert(*s, t, 0).ok());
  std::vector<int32_t> q(t.begin(), t.begin() + shared);
  for (int32_t x : RandomTokens(rng, 8)) q.push_back(x);
  q[shared] = t[shared] + 1;                                             // the conversation leaves the document here
  const uint64_t extent_bytes = uint64_t(n) * 2 * kDim * sizeof(f16_t);  // two probe heads' keys
  // Reads every layer's probe keys of `tokens` (matching n_expect); checks them and `check` each
  // read's statistics.
  auto read_probes = [&](const std::vector<int32_t>& tokens, uint64_t n_expect, auto check) {
    MatchHandle h = s->Match(tokens);
    ASSERT_EQ(h.n_matched, n_expect);
    for (int il = 0; il < kLayers; ++il) {
      auto r = s->Wait(*s->SubmitProbeKeys(h, il));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(kv.CheckProbe(tokens, il, {0, 2}, n_expect, *r));
      check(r->stats, il);
    }
    ASSERT_TRUE(s->Release(h).ok());
  };
  for (int rep = 0; rep < 2; ++rep) {
    read_probes(q, shared, [&](const ReadStats& st, int il) {
      EXPECT_LE(st.ssd_bytes, 2u * 4096u) << "layer " << il << " of " << extent_bytes << " bytes of probe keys";
      EXPECT_EQ(st.chunks_host + st.chunks_device, 0u) << "layer " << il;
    });
  }
  EXPECT_EQ(s->Stats().tiers.host.used_bytes, 0u);
  read_probes(t, n, [&](const ReadStats& st, int il) { EXPECT_GE(st.ssd_bytes, extent_bytes) << "layer " << il; });
  read_probes(t, n, [&](const ReadStats& st, int il) { EXPECT_EQ(st.chunks_host, 1u) << "layer " << il; });
  s.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
