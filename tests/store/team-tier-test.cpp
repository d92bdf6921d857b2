// TeamTier and TeamPublisher (store/team-tier.h) on a redis-server and a 3-master Redis Cluster
// of their own: publish then look up, verified reads (whole chunks, rows by byte ranges),
// namespaces and models kept apart, every kind of bad value a miss (counted, never returned),
// and the publisher finishing after Redis comes back.
#include "store/team-tier.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "tests/store/redis-test-util.h"

namespace impress::store {
namespace {

using testing::RedisCluster;
using testing::RedisServer;

constexpr int kLayers = 3, kHeads = 2, kDim = 64, kSpan = 16;

TeamTierOptions Options(int port, const std::string& team = "alpha", const std::string& model = "model-a") {
  TeamTierOptions o;
  o.redis.port = port;
  o.redis.connect_timeout = std::chrono::milliseconds(1000);
  o.redis.request_timeout = std::chrono::milliseconds(5000);
  o.team = team;
  o.model.fingerprint = model;
  o.model.n_layer = kLayers;
  o.model.n_head_kv = kHeads;
  o.model.head_dim = kDim;
  o.model.probe_kv_heads = {1};
  o.model.span_tokens = kSpan;
  return o;
}

// Random KV for n tokens, every layer.
struct KV {
  std::vector<std::vector<f16_t>> k, v;
  std::vector<LayerKV> layers;
  KV(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    k.resize(kLayers);
    v.resize(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < n * kHeads * kDim; ++i) {
        k[size_t(l)].push_back(Fp32ToFp16(d(rng)));
        v[size_t(l)].push_back(Fp32ToFp16(d(rng)));
      }
      layers.push_back({k[size_t(l)].data(), v[size_t(l)].data(), nullptr});
    }
  }
};

std::vector<Token> Tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> t(n);
  for (auto& x : t) x = Token(rng() % 50000);
  return t;
}

std::unique_ptr<TeamTier> OpenTier(const TeamTierOptions& o) {
  auto t = TeamTier::Open(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

// Publishes `tokens` (KV from `seed`) and returns the spans as written, for comparisons.
std::vector<TeamSpan> PublishAll(TeamTier* tier, const std::vector<Token>& tokens, uint32_t seed) {
  KV kv(tokens.size(), seed);
  auto spans = tier->EncodeSpans(tokens, 0, kv.layers, 42);
  EXPECT_TRUE(spans.ok()) << spans.status().ToString();
  if (!spans.ok()) return {};
  Status s = tier->Publish(*spans);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::move(*spans);
}

// Lookups, whole-chunk reads and row reads all give back exactly the bytes published.
void ExpectRoundTrip(TeamTier* tier, const std::vector<Token>& tokens, const std::vector<TeamSpan>& local) {
  auto m = tier->LongestPrefix(tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->n_matched, tokens.size());
  ASSERT_EQ(m->spans.size(), local.size());
  const uint32_t rb = RecordBytes(KVEncoding::kF16, kHeads, kDim);
  for (size_t i = 0; i < local.size(); ++i) {
    const TeamDescriptor& d = m->spans[i];
    EXPECT_EQ(d.tokens, local[i].desc.tokens);
    for (uint32_t l = 0; l < kLayers; ++l) {
      auto kvc = tier->ReadChunk(d, l, TeamPiece::kKV);
      ASSERT_TRUE(kvc.ok()) << kvc.status().ToString();
      EXPECT_EQ(std::string(kvc->begin(), kvc->end()), local[i].kv[l]);
      auto pc = tier->ReadChunk(d, l, TeamPiece::kProbe);
      ASSERT_TRUE(pc.ok()) << pc.status().ToString();
      EXPECT_EQ(std::string(pc->begin(), pc->end()), local[i].probe[l]);
      // Selected rows of V, by GETRANGE of their blocks.
      std::vector<uint32_t> rows = {0, uint32_t(d.tokens.size() - 1), uint32_t(d.tokens.size() / 2)};
      auto got = tier->ReadRows(d, l, true, rows);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const uint32_t v_off = LayoutOf(tier->ExpectedHeader(d, l, TeamPiece::kKV)).v_offset;
      for (size_t r = 0; r < rows.size(); ++r)
        EXPECT_EQ(std::memcmp(got->data() + r * rb, local[i].kv[l].data() + v_off + size_t(rows[r]) * rb, rb), 0);
    }
  }
}

// The write order travels in the descriptor: spans of an encode with an order carry their slice
// of it; a descriptor without one decodes with none; a cut order is refused.
TEST(TeamTier, DescriptorsCarryTheWriteOrder) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  auto tier = OpenTier(Options(server->port()));
  ASSERT_NE(tier, nullptr);
  const auto tokens = Tokens(2 * kSpan + 5, 3);
  KV kv(tokens.size(), 4);
  TeamOrder order;
  order.slot.resize(kLayers);
  for (uint32_t t = 0; t < tokens.size(); ++t) {
    order.segment.push_back(t < kSpan ? 0u : uint32_t(kSpan));
    for (uint32_t l = 0; l < kLayers; ++l) order.slot[l].push_back((t * 7 + l) % uint32_t(tokens.size()));
  }
  auto spans = tier->EncodeSpans(tokens, 0, kv.layers, 42, order);
  ASSERT_TRUE(spans.ok()) << spans.status().ToString();
  ASSERT_EQ(spans->size(), 3u);
  for (size_t i = 0; i < spans->size(); ++i) {
    const TeamDescriptor& d = (*spans)[i].desc;
    const std::string bytes = EncodeTeamDescriptor(d);
    auto back = DecodeTeamDescriptor(bytes);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->order_segment, d.order_segment);
    EXPECT_EQ(back->order_slot, d.order_slot);
    ASSERT_EQ(back->order_segment.size(), d.tokens.size());
    for (uint32_t l = 0; l < kLayers; ++l)
      EXPECT_EQ(back->order_slot[l][0], order.slot[l][i * kSpan]) << "span " << i << " layer " << l;
    // Cut inside the order: refused (the checksum is recomputed, so only the lengths catch it).
    std::string cut = bytes.substr(0, bytes.size() - 8 - 4);
    const uint64_t sum = XXH3_64bits(cut.data(), cut.size());
    cut.append(reinterpret_cast<const char*>(&sum), 8);
    EXPECT_FALSE(DecodeTeamDescriptor(cut).ok());
  }
  auto plain = tier->EncodeSpans(tokens, 0, kv.layers, 42);
  ASSERT_TRUE(plain.ok());
  auto back = DecodeTeamDescriptor(EncodeTeamDescriptor((*plain)[0].desc));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->order_segment.empty());
  EXPECT_FALSE(back->rows_in_order);

  // With an order the KV values hold their rows in it: row r of a layer's value is the token
  // with the r-th smallest (segment, slot); the probe keys stay in token order. Reads by token
  // offset (ReadRows) give each token's own record.
  ASSERT_TRUE(tier->Publish(*spans).ok());
  auto m = tier->LongestPrefix(tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->spans.size(), spans->size());
  const uint32_t rb = uint32_t(kHeads * kDim * 2);
  for (size_t i = 0; i < spans->size(); ++i) {
    const TeamDescriptor& d = m->spans[i];
    ASSERT_TRUE(d.rows_in_order);
    EXPECT_EQ(d.row, (*spans)[i].desc.row);
    const uint32_t n = uint32_t(d.tokens.size());
    for (uint32_t l = 0; l < kLayers; ++l) {
      const auto lay = LayoutOf(tier->ExpectedHeader(d, l, TeamPiece::kKV));
      const std::string& ordered = (*spans)[i].kv[l];
      const std::string& token_order = (*plain)[i].kv[l];
      std::vector<uint32_t> at(n);  // token of each row
      for (uint32_t t = 0; t < n; ++t) {
        ASSERT_LT(d.Row(l, t), n);
        at[d.Row(l, t)] = t;
        for (uint32_t off : {lay.k_offset, lay.v_offset})
          EXPECT_EQ(ordered.compare(off + size_t(d.Row(l, t)) * rb, rb, token_order, off + size_t(t) * rb, rb), 0)
              << "span " << i << " layer " << l << " token " << t;
      }
      for (uint32_t r = 1; r < n; ++r) {
        const auto key = [&](uint32_t t) { return std::pair(d.order_segment[t], d.order_slot[l][t]); };
        EXPECT_LE(key(at[r - 1]), key(at[r])) << "span " << i << " layer " << l << " row " << r;
      }
      EXPECT_EQ((*spans)[i].probe[l], (*plain)[i].probe[l]);
      std::vector<uint32_t> rows = {n - 1, 0, n / 2};
      auto got = tier->ReadRows(d, l, /*v_region=*/false, rows);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (size_t r = 0; r < rows.size(); ++r)
        EXPECT_EQ(std::memcmp(got->data() + r * rb, token_order.data() + lay.k_offset + size_t(rows[r]) * rb, rb), 0);
    }
  }
  order.slot.pop_back();
  EXPECT_FALSE(tier->EncodeSpans(tokens, 0, kv.layers, 42, order).ok()) << "an order of too few layers";
}

TEST(TeamTier, PublishThenLookupStandalone) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  auto tier = OpenTier(Options(server->port()));
  ASSERT_NE(tier, nullptr);
  const auto tokens = Tokens(100, 1);  // 6 whole spans and a last one of 4 tokens
  const auto local = PublishAll(tier.get(), tokens, 7);
  ASSERT_EQ(local.size(), 7u);
  EXPECT_EQ(tier->stats().spans_published, 7u);
  ExpectRoundTrip(tier.get(), tokens, local);

  // Longer query: the whole spans match; its own last span (other tokens) does not.
  auto longer = tokens;
  for (Token t : Tokens(30, 2)) longer.push_back(t);
  EXPECT_EQ(tier->LongestPrefix(longer)->n_matched, 96u);
  // A query that differs at token 40 shares spans 0 and 1 only.
  auto other = tokens;
  other[40] ^= 1;
  auto m = tier->LongestPrefix(other);
  EXPECT_EQ(m->n_matched, 32u);
  EXPECT_EQ(m->spans.size(), 2u);
  EXPECT_EQ(tier->LongestPrefix(Tokens(50, 3))->n_matched, 0u);

  // Raw byte ranges equal the local bytes.
  const std::string key = tier->ValueKey(m->spans[1], 2, TeamPiece::kKV);
  std::vector<RedisClient::ByteRange> ranges = {{0, 128}, {4096, 300}, {5000, 9000}};
  auto raw = tier->ReadRanges(key, ranges);
  for (size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_TRUE(raw[i].ok());
    EXPECT_EQ(*raw[i], local[1].kv[2].substr(ranges[i].begin, ranges[i].length));
  }

  // Publishing again writes nothing: every descriptor is there.
  const uint64_t written = tier->stats().bytes_written;
  PublishAll(tier.get(), tokens, 7);
  EXPECT_EQ(tier->stats().spans_present, 7u);
  EXPECT_EQ(tier->stats().bytes_written, written);
  EXPECT_GT(tier->stats().bytes_read, 0u);
  EXPECT_EQ(tier->stats().corrupt, 0u);
}

TEST(TeamTier, NamespacesAndModelsAreApart) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  auto alpha = OpenTier(Options(server->port(), "alpha"));
  ASSERT_NE(alpha, nullptr);
  const auto tokens = Tokens(40, 4);
  PublishAll(alpha.get(), tokens, 5);
  EXPECT_EQ(alpha->LongestPrefix(tokens)->n_matched, 40u);
  auto beta = OpenTier(Options(server->port(), "beta"));
  EXPECT_EQ(beta->LongestPrefix(tokens)->n_matched, 0u);
  EXPECT_TRUE(beta->client()->ScanPrefix("")->empty());
  EXPECT_FALSE(alpha->client()->ScanPrefix("")->empty());
  // Another model (or the same model's KV under another encoding) in the same team: nothing.
  auto other_model = OpenTier(Options(server->port(), "alpha", "model-b"));
  EXPECT_EQ(other_model->LongestPrefix(tokens)->n_matched, 0u);
  auto o = Options(server->port(), "alpha");
  o.model.kv_encoding = KVEncoding::kInt8;
  EXPECT_EQ(OpenTier(o)->LongestPrefix(tokens)->n_matched, 0u);
  EXPECT_FALSE(TeamTier::Open(Options(server->port(), "a{b}")).ok());
}

TEST(TeamTier, BadValuesAreMissesNeverReturned) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  auto tier = OpenTier(Options(server->port()));
  ASSERT_NE(tier, nullptr);
  const auto tokens = Tokens(64, 6);  // 4 spans
  const auto local = PublishAll(tier.get(), tokens, 8);
  auto m = tier->LongestPrefix(tokens);
  ASSERT_EQ(m->spans.size(), 4u);
  RedisClient* c = tier->client();

  // One byte flipped in the V region of span 0, layer 1: the chunk and the rows in that block are
  // refused and counted; rows elsewhere still read.
  const TeamDescriptor& d0 = m->spans[0];
  const std::string k01 = tier->ValueKey(d0, 1, TeamPiece::kKV);
  std::string bad = local[0].kv[1];
  const uint32_t v_off = LayoutOf(tier->ExpectedHeader(d0, 1, TeamPiece::kKV)).v_offset;
  bad[v_off + 10] ^= 0x40;
  ASSERT_TRUE(c->Set(k01, bad).ok());
  auto r = tier->ReadChunk(d0, 1, TeamPiece::kKV);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_EQ(tier->stats().corrupt, 1u);
  const std::vector<uint32_t> row0 = {0};
  EXPECT_EQ(tier->ReadRows(d0, 1, true, row0).status().code(), Status::Code::kCorruption);
  const std::vector<uint32_t> k_rows = {3, 4};
  EXPECT_TRUE(tier->ReadRows(d0, 1, false, k_rows).ok());
  EXPECT_EQ(tier->stats().corrupt, 2u);

  // Half written (cut short), and evicted.
  const std::string k02 = tier->ValueKey(d0, 2, TeamPiece::kKV);
  ASSERT_TRUE(c->Set(k02, local[0].kv[2].substr(0, local[0].kv[2].size() / 2)).ok());
  EXPECT_FALSE(tier->ReadChunk(d0, 2, TeamPiece::kKV).ok());
  const std::vector<uint32_t> last = {kSpan - 1};
  EXPECT_FALSE(tier->ReadRows(d0, 2, true, last).ok());
  ASSERT_TRUE(c->Del(tier->ValueKey(d0, 0, TeamPiece::kProbe)).ok());
  auto gone = tier->ReadChunk(d0, 0, TeamPiece::kProbe);
  EXPECT_EQ(gone.status().code(), Status::Code::kNotFound);

  // Another span's value under this span's key (another prefix): its header names another chunk.
  ASSERT_TRUE(c->Set(tier->ValueKey(d0, 0, TeamPiece::kKV), local[1].kv[0]).ok());
  EXPECT_EQ(tier->ReadChunk(d0, 0, TeamPiece::kKV).status().code(), Status::Code::kCorruption);
  const uint64_t corrupt = tier->stats().corrupt;

  // A corrupted descriptor ends the match before its span; a missing one too.
  std::string desc = c->Get(tier->DescriptorKey(m->spans[2].chain))->value();
  desc[40] ^= 1;
  ASSERT_TRUE(c->Set(tier->DescriptorKey(m->spans[2].chain), desc).ok());
  EXPECT_EQ(tier->LongestPrefix(tokens)->n_matched, 32u);
  EXPECT_EQ(tier->stats().corrupt, corrupt + 1);
  ASSERT_TRUE(c->Del(tier->DescriptorKey(m->spans[1].chain)).ok());
  EXPECT_EQ(tier->LongestPrefix(tokens)->n_matched, 16u);
  // A descriptor of another prefix stored under this prefix's key: refused.
  ASSERT_TRUE(c->Set(tier->DescriptorKey(m->spans[1].chain), EncodeTeamDescriptor(m->spans[3])).ok());
  EXPECT_EQ(tier->LongestPrefix(tokens)->n_matched, 16u);
}

TEST(TeamTier, PublishThenLookupOnCluster) {
  auto cluster = RedisCluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto tier = OpenTier(Options(cluster->nodes[0]->port()));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->client()->cluster());
  const auto tokens = Tokens(16 * 12 + 5, 9);
  const auto local = PublishAll(tier.get(), tokens, 10);
  ExpectRoundTrip(tier.get(), tokens, local);
  // A span's pieces share a slot; the spans spread over the masters.
  std::set<int> slots;
  for (const auto& sp : local) {
    const int s = KeySlot(tier->DescriptorKey(sp.desc.chain));
    for (uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(KeySlot(tier->ValueKey(sp.desc, l, TeamPiece::kKV)), s);
    slots.insert(s);
  }
  std::set<size_t> owners;
  for (int s : slots) owners.insert(cluster->OwnerOf(s));
  EXPECT_GT(owners.size(), 1u);
  // Another team on the same cluster sees nothing.
  EXPECT_EQ(OpenTier(Options(cluster->nodes[1]->port(), "beta"))->LongestPrefix(tokens)->n_matched, 0u);
  // A master killed: the lookup still answers (a shorter match or an error), never wrong KV.
  cluster->nodes[2]->Kill();
  auto m = tier->LongestPrefix(tokens);
  if (m.ok()) {
    EXPECT_LE(m->n_matched, tokens.size());
    for (size_t i = 0; i < m->spans.size(); ++i) EXPECT_EQ(m->spans[i].tokens, local[i].desc.tokens);
  } else {
    EXPECT_EQ(m.status().code(), Status::Code::kIOError);
  }
}

TEST(TeamPublisher, FinishesAfterRedisComesBack) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  TeamPublisherOptions po;
  po.retry_min = std::chrono::milliseconds(20);
  po.retry_max = std::chrono::milliseconds(200);
  po.max_jobs = 1;
  auto o = Options(server->port());
  o.redis.request_timeout = std::chrono::milliseconds(1000);
  TeamPublisher pub(o, po);
  const auto tokens = Tokens(80, 11), tokens2 = Tokens(48, 12);
  KV kv(80, 13), kv2(48, 14);
  EXPECT_FALSE(pub.Submit(tokens, 0, kv.layers, /*private_document=*/true));
  EXPECT_EQ(pub.stats().refused_private, 1u);

  server->Kill();
  ASSERT_TRUE(pub.Submit(tokens, 0, kv.layers, false));
  for (int i = 0; i < 1000 && pub.stats().retries == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(pub.stats().retries, 0u);
  // The first job is being tried; one more fits in the queue, then it is full.
  EXPECT_TRUE(pub.Submit(tokens2, 0, kv2.layers, false));
  EXPECT_FALSE(pub.Submit(tokens2, 0, kv2.layers, false));
  EXPECT_EQ(pub.stats().refused_full, 1u);

  ASSERT_TRUE(server->Restart());
  ASSERT_TRUE(pub.WaitIdle(std::chrono::seconds(60)));
  EXPECT_EQ(pub.stats().jobs_done, 2u);
  EXPECT_EQ(pub.stats().jobs_failed, 0u);
  auto reader = OpenTier(o);
  EXPECT_EQ(reader->LongestPrefix(tokens)->n_matched, 80u);
  EXPECT_EQ(reader->LongestPrefix(tokens2)->n_matched, 48u);
  // What the reader gets is what was computed.
  auto m = reader->LongestPrefix(tokens);
  auto enc = reader->EncodeSpans(tokens, 0, kv.layers, m->spans[0].publish_id);
  auto chunk = reader->ReadChunk(m->spans[4], 2, TeamPiece::kKV);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(std::string(chunk->begin(), chunk->end()), (*enc)[4].kv[2]);
}

TEST(TeamTier, UrlsAndCredentials) {
  RedisOptions r;
  ASSERT_TRUE(ParseTeamUrl("redis://cache.example:7001", &r).ok());
  EXPECT_EQ(r.host, "cache.example");
  EXPECT_EQ(r.port, 7001);
  ASSERT_TRUE(ParseTeamUrl("redis://alice@10.0.0.5", &r).ok());
  EXPECT_EQ(r.user, "alice");
  EXPECT_EQ(r.port, 6379);
  EXPECT_EQ(ParseTeamUrl("redis://alice:pw@h:1", &r).code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(r.tls);
  ASSERT_TRUE(ParseTeamUrl("rediss://secure.example:6380", &r).ok());
  EXPECT_TRUE(r.tls);
  EXPECT_EQ(r.host, "secure.example");
  EXPECT_EQ(r.port, 6380);
  EXPECT_FALSE(ParseTeamUrl("http://h:1", &r).ok());
  EXPECT_FALSE(ParseTeamUrl("redis://h:99999", &r).ok());
  const std::string dir = testing::TempDir("team-cred");
  { std::ofstream(dir + "/cred") << "team-user\nsecret\n"; }
  RedisOptions c;
  ASSERT_TRUE(LoadTeamCredentials(dir + "/cred", &c).ok());
  EXPECT_EQ(c.user, "team-user");
  EXPECT_EQ(c.password, "secret");
  EXPECT_FALSE(LoadTeamCredentials(dir + "/none", &c).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
