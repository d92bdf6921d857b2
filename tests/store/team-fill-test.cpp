// The store with a team tier (PrefixStore with TeamOptions, store/prefix-store-team.cpp): two
// stores in two directories sharing one redis-server of their own. What one inserts the other
// fills from the team tier and reads bit for bit; a private document publishes nothing; Redis
// killed, stalled or holding a corrupted value: the fill falls back (counted, nothing wrong
// admitted) and the next one recovers.
#include <gtest/gtest.h>

#include <random>

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

// Fills read whole prefixes here (team-remote-test.cpp: the per-layer reads).
PrefixStoreOptions TeamStoreOptions(const std::string& dir, int port, const std::string& team = "alpha",
                                    const std::string& model = "model-a") {
  return testing::TeamTestOptions(dir, port, team, model, /*selective=*/false);
}

// A redis-server of the test's own and two stores, A and B, of one team on it.
struct TwoStores {
  std::unique_ptr<RedisServer> server = RedisServer::Start({});
  Dirs dirs;
  std::unique_ptr<PrefixStore> a, b;
  TwoStores() {
    if (!server) return;
    a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port()));
    b = testing::OpenOrDie(TeamStoreOptions(dirs.b, server->port()));
  }
  bool ok() const { return server && a && b; }
};

// Every key of a namespace (the full keys).
std::vector<std::string> KeysOf(RedisServer& server, const std::string& team) {
  auto admin = server.Admin();
  auto keys = admin->ScanPrefix("impress:" + team + ":");
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : std::vector<std::string>{};
}

// A's first insert carries importance (the write order) over a document and a question after it;
// the document's whole spans are the shared prefix. B, filled with the document from the team
// tier, lays it out as A does: every layer's read groups of the document are A's, and B reads
// A's values bit for bit.
TEST(TeamFill, FilledStoreHasThePublishersWriteOrder) {
  TwoStores st;
  ASSERT_TRUE(st.ok());
  PrefixStore* a = st.a.get();
  PrefixStore* b = st.b.get();
  std::mt19937 rng(29);
  const size_t n_doc = 10 * kChunk;          // the shared prefix: whole spans
  auto seq = RandomTokens(rng, n_doc + 21);  // and a question after it
  std::vector<std::vector<f16_t>> k, v;
  kKV.Make(seq, 0, &k, &v);
  std::vector<std::vector<float>> imp(kLayers, std::vector<float>(seq.size()));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& l : imp)
    for (auto& x : l) x = u(rng);
  std::vector<LayerKV> layers(kLayers);
  for (int il = 0; il < kLayers; ++il)
    layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data(), imp[size_t(il)].data()};
  ASSERT_TRUE(a->Insert(seq, 0, layers, {.shared_prefix = n_doc}).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));

  const std::vector<int32_t> doc(seq.begin(), seq.begin() + std::ptrdiff_t(n_doc));
  TeamFill f = b->FillFromTeam(doc);
  EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_team, n_doc);
  EXPECT_GT(f.bytes, 0u);
  EXPECT_TRUE(ReadsExact(*b, kKV, doc, n_doc));
  MatchHandle ha = a->Match(doc), hb = b->Match(doc);
  ASSERT_EQ(ha.n_matched, n_doc);
  ASSERT_EQ(hb.n_matched, n_doc);
  bool reordered = false;
  for (uint32_t g : {a->BlockGroupTokens(), 4u}) {
    for (int il = 0; il < kLayers; ++il) {
      auto ga = a->ReadGroups(ha, il, g), gb = b->ReadGroups(hb, il, g);
      ASSERT_TRUE(ga.ok() && gb.ok());
      EXPECT_EQ(*ga, *gb) << "layer " << il << ", groups of " << g;
      for (size_t i = 1; i < ga->size(); ++i) reordered = reordered || (*ga)[i] < (*ga)[i - 1];
    }
  }
  EXPECT_TRUE(reordered) << "the test's importance should reorder the document";
  ASSERT_TRUE(a->Release(ha).ok());
  ASSERT_TRUE(b->Release(hb).ok());
  ASSERT_TRUE(b->CheckConsistency().ok());
}

// A prompt's reusable prefix (its documents) rarely ends on a span boundary: the span holding
// its end also holds A's question. The prefix's last partial span is published on its own, so B,
// asking another question about the same document, gets all of the document from the team tier,
// not only its whole spans. Without a shared prefix nothing more is published.
TEST(TeamFill, APrefixEndingInsideASpanIsSharedWhole) {
  TwoStores st;
  ASSERT_TRUE(st.ok());
  std::mt19937 rng(31);
  const size_t n_doc = 6 * kChunk + 7;
  auto seq = RandomTokens(rng, n_doc + 2 * kChunk);  // a document, then A's question and answer
  std::vector<std::vector<f16_t>> k, v;
  kKV.Make(seq, 0, &k, &v);
  std::vector<LayerKV> layers(kLayers);
  for (int il = 0; il < kLayers; ++il) layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data(), nullptr};
  ASSERT_TRUE(st.a->Insert(seq, 0, layers, {.shared_prefix = n_doc}).ok());
  ASSERT_TRUE(st.a->WaitTeamPublished(std::chrono::seconds(20)));
  const std::vector<int32_t> doc(seq.begin(), seq.begin() + std::ptrdiff_t(n_doc));
  TeamFill f = st.b->FillFromTeam(doc);
  EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_team, n_doc) << "the document's last partial span came too";
  EXPECT_TRUE(ReadsExact(*st.b, kKV, doc, n_doc));

  // The same over a prefix published without a shared prefix: its whole spans only.
  auto seq2 = RandomTokens(rng, n_doc + 2 * kChunk);
  kKV.Make(seq2, 0, &k, &v);
  for (int il = 0; il < kLayers; ++il) layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data(), nullptr};
  ASSERT_TRUE(st.a->Insert(seq2, 0, layers, {}).ok());
  ASSERT_TRUE(st.a->WaitTeamPublished(std::chrono::seconds(20)));
  const std::vector<int32_t> doc2(seq2.begin(), seq2.begin() + std::ptrdiff_t(n_doc));
  f = st.b->FillFromTeam(doc2);
  EXPECT_EQ(f.n_team, n_doc / kChunk * kChunk);
  ASSERT_TRUE(st.b->CheckConsistency().ok());
}

TEST(TeamFill, SecondStoreReadsTheFirstStoresKV) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(TeamStoreOptions(dirs.b, server->port()));
  ASSERT_TRUE(a && b);
  std::mt19937 rng(11);
  const auto doc = RandomTokens(rng, 200);  // 12 whole spans and 8 tokens
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  EXPECT_EQ(a->Stats().team.spans_published, 13u);

  // B has nothing; the team tier holds all of it (the last span exactly).
  TeamFill f = b->FillFromTeam(doc);
  EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_local, 0u);
  EXPECT_EQ(f.n_team, 200u);
  EXPECT_TRUE(ReadsExact(*b, kKV, doc, 200));
  ASSERT_TRUE(b->CheckConsistency().ok());
  StoreStats bs = b->Stats();
  EXPECT_TRUE(bs.team.configured);
  EXPECT_TRUE(bs.team.connected);
  EXPECT_EQ(bs.team.status, "connected");
  EXPECT_EQ(bs.team.fill_hits, 1u);
  EXPECT_EQ(bs.team.tokens_filled, 200u);
  EXPECT_GT(bs.team.bytes_read, 0u);
  EXPECT_EQ(bs.team.errors, 0u);
  EXPECT_GT(bs.team.mean_latency_ms(), 0.0);
  // What came from the team tier is not published again.
  EXPECT_TRUE(b->WaitTeamPublished(std::chrono::seconds(5)));
  EXPECT_EQ(bs.team.publish_submitted, 0u);

  // A follow-up inserted by A from an unaligned start (200): published from the span boundary
  // before it (192), the first rows read back from A's store; B fills just the new part.
  auto longer = doc;
  for (auto t : RandomTokens(rng, 50)) longer.push_back(t);
  ASSERT_TRUE(kKV.Insert(*a, longer, 200).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  f = b->FillFromTeam(longer);
  EXPECT_EQ(f.n_local, 200u);
  EXPECT_EQ(f.n_team, 50u);
  EXPECT_TRUE(ReadsExact(*b, kKV, longer, 250));

  // Already held locally (no whole span to add): the team tier is not asked.
  const uint64_t fills = b->Stats().team.fills;
  EXPECT_EQ(b->FillFromTeam(longer).n_team, 0u);
  EXPECT_EQ(b->Stats().team.fills, fills);

  // A query that leaves the published tokens at 100: whole spans up to there, nothing after.
  Dirs more;
  auto c = testing::OpenOrDie(TeamStoreOptions(more.a, server->port()));
  auto q = doc;
  q.resize(150);
  q[100] ^= 1;
  f = c->FillFromTeam(q);
  EXPECT_EQ(f.n_team, 96u);
  EXPECT_TRUE(ReadsExact(*c, kKV, doc, 96));
}

TEST(TeamFill, OtherTeamsAndModelsSeeNothing) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port(), "alpha", "model-a"));
  std::mt19937 rng(12);
  const auto doc = RandomTokens(rng, 64);
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  {
    auto other_team = testing::OpenOrDie(TeamStoreOptions(dirs.b, server->port(), "beta", "model-a"));
    EXPECT_EQ(other_team->FillFromTeam(doc).n_team, 0u);
    EXPECT_EQ(other_team->Match(doc).n_matched, 0u);
  }
  Dirs more;
  auto other_model = testing::OpenOrDie(TeamStoreOptions(more.a, server->port(), "alpha", "model-b"));
  EXPECT_EQ(other_model->FillFromTeam(doc).n_team, 0u);
  // Bad team names are refused when the store opens.
  Dirs bad;
  EXPECT_FALSE(PrefixStore::Open(TeamStoreOptions(bad.a, server->port(), "a{b}")).ok());
  auto o = TeamStoreOptions(bad.b, server->port());
  o.team.url = "redis://user:secret@127.0.0.1:1";
  EXPECT_FALSE(PrefixStore::Open(o).ok());
}

TEST(TeamFill, PrivateDocumentsPublishNothing) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port()));
  std::mt19937 rng(13);
  const auto doc = RandomTokens(rng, 100);
  std::vector<std::vector<f16_t>> k, v;
  kKV.Make(doc, 0, &k, &v);
  std::vector<LayerKV> layers;
  for (int l = 0; l < kLayers; ++l) layers.push_back({k[size_t(l)].data(), v[size_t(l)].data(), nullptr});
  ASSERT_TRUE(a->Insert(doc, 0, layers, {.private_document = true, .publish = true}).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  EXPECT_TRUE(KeysOf(*server, "alpha").empty());
  StoreStats st = a->Stats();
  EXPECT_EQ(st.team.publish_refused_private, 1u);
  EXPECT_EQ(st.team.spans_published, 0u);
  // Nothing at all under any namespace.
  auto all = server->Admin()->ScanPrefix("");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  // The same store still publishes a document that is not private.
  const auto pub = RandomTokens(rng, 40);
  ASSERT_TRUE(kKV.Insert(*a, pub, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  EXPECT_FALSE(KeysOf(*server, "alpha").empty());
}

TEST(TeamFill, RedisDownOrStalledFallsBackAndRecovers) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(TeamStoreOptions(dirs.b, server->port()));
  std::mt19937 rng(14);
  const auto doc = RandomTokens(rng, 96);
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));

  // Killed before B's fill: no error to the caller, nothing admitted, counted.
  server->Kill();
  TeamFill f = b->FillFromTeam(doc);
  EXPECT_EQ(f.n_team, 0u);
  EXPECT_FALSE(f.status.ok());
  StoreStats bs = b->Stats();
  EXPECT_GE(bs.team.errors, 1u);
  EXPECT_FALSE(bs.team.connected);
  EXPECT_EQ(bs.team.status.rfind("unreachable", 0), 0u) << bs.team.status;
  EXPECT_EQ(b->Match(doc).n_matched, 0u);
  // B computes it itself meanwhile; its own publish waits for Redis.
  const auto own = RandomTokens(rng, 48);
  ASSERT_TRUE(kKV.Insert(*b, own, 0).ok());

  // Back (empty: no persistence). B's queued publish gets through; A publishes again.
  ASSERT_TRUE(server->Restart());
  ASSERT_TRUE(b->WaitTeamPublished(std::chrono::seconds(30)));
  const auto doc2 = RandomTokens(rng, 64);
  ASSERT_TRUE(kKV.Insert(*a, doc2, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(30)));
  f = b->FillFromTeam(doc2);
  EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_team, 64u);
  EXPECT_TRUE(ReadsExact(*b, kKV, doc2, 64));
  EXPECT_TRUE(b->Stats().team.connected);
  Dirs more;
  auto c = testing::OpenOrDie(TeamStoreOptions(more.a, server->port()));
  EXPECT_EQ(c->FillFromTeam(own).n_team, 48u);  // what B published after the restart
  EXPECT_TRUE(ReadsExact(*c, kKV, own, 48));

  // Stalled: the fill gives up at the request deadline and the request goes on.
  server->Pause();
  const auto t0 = std::chrono::steady_clock::now();
  const auto doc3 = RandomTokens(rng, 64);
  f = c->FillFromTeam(doc3);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server->Resume();
  EXPECT_EQ(f.n_team, 0u);
  EXPECT_FALSE(f.status.ok());
  EXPECT_LT(s, 10.0);
  EXPECT_GE(c->Stats().team.errors, 1u);
}

TEST(TeamFill, CorruptValueIsRefusedAndRecomputed) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  Dirs dirs;
  auto a = testing::OpenOrDie(TeamStoreOptions(dirs.a, server->port()));
  auto b = testing::OpenOrDie(TeamStoreOptions(dirs.b, server->port()));
  std::mt19937 rng(15);
  const auto doc = RandomTokens(rng, 200);  // spans 0-7 are one fill batch, 8-12 the next
  ASSERT_TRUE(kKV.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));

  // Flip one byte of a K/V value of span 9 (found through its descriptor: the keys of one span
  // share the hash tag; the 10th span's is the one whose descriptor names span 9).
  auto admin = server->Admin();
  std::string victim;
  for (const std::string& key : KeysOf(*server, "alpha")) {
    if (key.size() < 2 || key.substr(key.size() - 2) != ":d") continue;
    auto d = admin->Get(key);
    ASSERT_TRUE(d.ok() && d->has_value());
    auto desc = DecodeTeamDescriptor(**d);
    ASSERT_TRUE(desc.ok());
    if (desc->span != 9u) continue;
    const std::string tag = key.substr(0, key.size() - 1);  // "...}:"
    for (const std::string& k2 : KeysOf(*server, "alpha"))
      if (k2.rfind(tag, 0) == 0 && k2.size() > 3 && k2.substr(k2.size() - 3) == ":k1") victim = k2;
  }
  ASSERT_FALSE(victim.empty());
  auto val = admin->Get(victim);
  ASSERT_TRUE(val.ok() && val->has_value());
  std::string bad = **val;
  bad[bad.size() / 2] ^= 0x10;
  ASSERT_TRUE(admin->Set(victim, bad).ok());

  TeamFill f = b->FillFromTeam(doc);
  EXPECT_EQ(f.status.code(), Status::Code::kCorruption) << f.status.ToString();
  EXPECT_EQ(f.n_team, 128u);  // the first batch; the batch holding the bad value is refused whole
  StoreStats bs = b->Stats();
  EXPECT_GE(bs.team.corrupt, 1u);
  EXPECT_GE(bs.team.errors, 1u);
  EXPECT_TRUE(ReadsExact(*b, kKV, doc, 128));
  // B computes the rest; everything it holds is the right KV.
  ASSERT_TRUE(kKV.Insert(*b, doc, 128).ok());
  EXPECT_TRUE(ReadsExact(*b, kKV, doc, 200));
  EXPECT_TRUE(b->CheckConsistency().ok());
}

}  // namespace
}  // namespace impress::store
