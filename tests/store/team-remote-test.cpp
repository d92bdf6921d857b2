// Reading a prefix straight from the team tier (TeamOptions::selective, store/prefix-store-team.cpp):
// store B, which never saw a document store A published, stages the team's prefix and its match
// reads per layer only what is asked (probe keys, selected rows by byte ranges), bit for bit what
// A reads, with fewer bytes over the network for fewer rows; releasing the match fills the whole
// prefix into B in the background, and KV inserted past the staged prefix is written once the
// prefix is there. A value corrupted in Redis fails the read (never served), unstages the prefix,
// and the next match uses only what B holds.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "store/prefix-store.h"
#include "store/team-tier.h"
#include "tests/store/redis-test-util.h"
#include "tests/store/store-test-util.h"
#include "tests/store/team-test-util.h"

namespace impress::store {
namespace {

using testing::RandomTokens;
using testing::ReadsExact;
using testing::RedisServer;
using testing::SyntheticKV;
using Dirs = testing::TeamDirs;

constexpr int kLayers = testing::kTeamLayers, kChunk = testing::kTeamChunk;
const SyntheticKV kKV{kLayers, testing::kTeamHeads, testing::kTeamDim};

PrefixStoreOptions RemoteOptions(const std::string& dir, int port) {
  return testing::TeamTestOptions(dir, port, "remote", "model-r", /*selective=*/true);
}

// Polls until the store matches `n` tokens of `tokens` locally (the background fill), at most 60 s.
bool WaitLocal(PrefixStore& s, const std::vector<int32_t>& tokens, uint64_t n) {
  for (int i = 0; i < 600; ++i) {
    if (s.Residency(tokens).n_matched >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

Result<ReadResult> ReadKV(PrefixStore& s, const MatchHandle& h, int il, const std::vector<uint32_t>& pos) {
  IMPRESS_ASSIGN_OR_RETURN(ReadTicket t, s.SubmitReadKV(h, il, pos, true, true));
  return s.Wait(t);
}

TEST(TeamRemote, MatchReadsSelectedRowsFromTheTeamTierThenFillsInTheBackground) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(RemoteOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(RemoteOptions(dirs.b, server->port()));
  std::mt19937 rng(41);
  const size_t n_doc = 12 * kChunk;
  const auto doc = RandomTokens(rng, n_doc);
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));

  const TeamFill f = b->FillFromTeam(doc);
  ASSERT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_local, 0u);
  EXPECT_EQ(f.n_team, 0u) << "a selective fill reads no KV before the request";
  EXPECT_EQ(f.n_remote, n_doc);
  EXPECT_EQ(b->Residency(doc).n_matched, 0u);

  MatchHandle hb = b->Match(doc);
  ASSERT_EQ(hb.n_matched, n_doc);
  EXPECT_TRUE(hb.remote);
  MatchHandle ha = a->Match(doc);
  ASSERT_EQ(ha.n_matched, n_doc);
  EXPECT_FALSE(ha.remote);

  // Probe keys: the whole prefix, as A's.
  for (int il = 0; il < kLayers; ++il) {
    auto ta = a->SubmitProbeKeys(ha, il);
    auto tb = b->SubmitProbeKeys(hb, il);
    ASSERT_TRUE(ta.ok() && tb.ok());
    auto ra = a->Wait(*ta);
    auto rb = b->Wait(*tb);
    ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().ToString();
    EXPECT_EQ(ra->k, rb->k) << "layer " << il;
    EXPECT_EQ(rb->stats.chunks_team, 12u);
    EXPECT_GT(rb->stats.team_bytes, 0u);
  }
  // A few rows (unsorted, spread over spans) against the whole prefix: exact, and fewer bytes.
  const std::vector<uint32_t> few = {150, 3, 77, 78, 191, 16};
  std::vector<uint32_t> all(n_doc);
  for (uint32_t p = 0; p < n_doc; ++p) all[p] = p;
  uint64_t few_bytes = 0, all_bytes = 0;
  for (int il = 0; il < kLayers; ++il) {
    auto r = ReadKV(*b, hb, il, few);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kKV.Check(doc, il, few, *r, true, true));
    EXPECT_EQ(r->stats.chunks_team, 5u) << "rows of five spans";
    few_bytes += r->stats.team_bytes;
    auto w = ReadKV(*b, hb, il, all);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE(kKV.Check(doc, il, all, *w, true, true));
    all_bytes += w->stats.team_bytes;
  }
  EXPECT_LT(few_bytes * 2, all_bytes) << few_bytes << " bytes for 6 rows, " << all_bytes << " for all";
  // Read groups follow the team's token order: consecutive positions, dense ids.
  auto groups = b->ReadGroups(hb, 0, 4);
  ASSERT_TRUE(groups.ok());
  for (uint32_t p = 0; p < n_doc; ++p) EXPECT_EQ((*groups)[p], p / 4) << p;
  ASSERT_TRUE(a->Release(ha).ok());

  // KV past the prefix (a question after it) is kept until the prefix is here.
  auto seq = doc;
  for (int i = 0; i < 9; ++i) seq.push_back(int32_t(rng() % 30000));
  auto ins = kKV.Insert(*b, seq, n_doc);
  ASSERT_TRUE(ins.ok()) << ins.status().ToString();
  EXPECT_EQ(ins->n_written, 0u);

  ASSERT_TRUE(b->Release(hb).ok());
  ASSERT_TRUE(WaitLocal(*b, seq, seq.size())) << "the background fill and the deferred insert never came";
  EXPECT_TRUE(ReadsExact(*b, kKV, seq, seq.size()));
  MatchHandle again = b->Match(doc);
  EXPECT_FALSE(again.remote);
  EXPECT_EQ(again.n_matched, n_doc);
  ASSERT_TRUE(b->Release(again).ok());
  const StoreStats bs = b->Stats();
  EXPECT_EQ(bs.team.tokens_filled, n_doc);
  EXPECT_EQ(bs.team.corrupt, 0u);
  EXPECT_TRUE(b->CheckConsistency().ok());
}

TEST(TeamRemote, CorruptValueFailsTheReadAndUnstagesThePrefix) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(RemoteOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(RemoteOptions(dirs.b, server->port()));
  std::mt19937 rng(43);
  const auto doc = RandomTokens(rng, 4 * kChunk);
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));

  // Flip one byte in the middle of every layer-1 K/V value.
  auto admin = server->Admin();
  auto keys = admin->ScanPrefix("impress:remote:");
  ASSERT_TRUE(keys.ok());
  int flipped = 0;
  for (const std::string& key : *keys) {
    if (key.size() < 3 || key.substr(key.size() - 3) != ":k1") continue;
    auto val = admin->Get(key);
    ASSERT_TRUE(val.ok() && val->has_value());
    std::string bad = **val;
    bad[bad.size() / 2] ^= 0x10;
    ASSERT_TRUE(admin->Set(key, bad).ok());
    ++flipped;
  }
  ASSERT_EQ(flipped, 4);

  ASSERT_EQ(b->FillFromTeam(doc).n_remote, doc.size());
  MatchHandle h = b->Match(doc);
  ASSERT_TRUE(h.remote);
  std::vector<uint32_t> all(doc.size());
  for (uint32_t p = 0; p < all.size(); ++p) all[p] = p;
  auto good = ReadKV(*b, h, 0, all);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(kKV.Check(doc, 0, all, *good, true, true));
  auto bad = ReadKV(*b, h, 1, all);
  EXPECT_FALSE(bad.ok()) << "a corrupted value was served";
  EXPECT_GE(b->Stats().team.corrupt, 1u);
  ASSERT_TRUE(b->Release(h).ok());
  // The prefix is no longer offered from the team tier; what B holds (nothing, or what the
  // background fill verified before the bad value) is what it matches.
  MatchHandle next = b->Match(doc);
  EXPECT_FALSE(next.remote);
  EXPECT_LT(next.n_matched, doc.size());
  ASSERT_TRUE(b->Release(next).ok());
  EXPECT_TRUE(b->CheckConsistency().ok());
}

// A prefix cached before the team tier was configured is published on request (PublishCached),
// with the KV read back from the store; another store then finds it.
TEST(TeamRemote, PublishCachedPublishesWhatWasStoredBeforeTheTeamTier) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  std::mt19937 rng(47);
  const auto doc = RandomTokens(rng, 5 * kChunk);
  {
    PrefixStoreOptions alone = RemoteOptions(dirs.a, server->port());
    alone.team = {};
    auto a = testing::OpenOrDie(alone);
    ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
    EXPECT_FALSE(a->PublishCached(doc).ok()) << "no team tier to publish to";
  }
  auto a = testing::OpenOrDie(RemoteOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(RemoteOptions(dirs.b, server->port()));
  EXPECT_EQ(b->FillFromTeam(doc).n_remote, 0u) << "nothing published yet";
  auto n = a->PublishCached(doc);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, doc.size());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  EXPECT_EQ(a->Stats().team.spans_published, 5u);
  EXPECT_EQ(b->FillFromTeam(doc).n_remote, doc.size());
  MatchHandle h = b->Match(doc);
  ASSERT_TRUE(h.remote);
  std::vector<uint32_t> all(doc.size());
  for (uint32_t p = 0; p < all.size(); ++p) all[p] = p;
  for (int il = 0; il < kLayers; ++il) {
    auto r = ReadKV(*b, h, il, all);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(kKV.Check(doc, il, all, *r, true, true));
  }
  ASSERT_TRUE(b->Release(h).ok());
}

}  // namespace
}  // namespace impress::store
