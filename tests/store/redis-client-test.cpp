// RedisClient (store/redis-client.h): CRC16 and key slots, commands and pipelining on a
// standalone server, errors (wrong password, connection refused, a stalled server), and Redis
// Cluster routing with MOVED and ASK while a slot migrates. Servers: tests/store/redis-test-util.h.
#include "store/redis-client.h"

#include <gtest/gtest.h>

#include "tests/store/redis-test-util.h"

namespace impress::store {
namespace {

using testing::RedisCluster;
using testing::RedisServer;

// prefix + i (a helper: GCC 12 warns falsely on "literal" + std::to_string at -O3).
std::string Name(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

RedisOptions OptionsFor(int port) {
  RedisOptions o;
  o.port = port;
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.request_timeout = std::chrono::milliseconds(5000);
  return o;
}

TEST(RedisSlots, Crc16AndKeySlotMatchRedis) {
  EXPECT_EQ(Crc16("123456789", 9), 0x31C3);
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  // An empty tag does not count: the whole key is hashed.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}", 10) & 16383);
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
}

TEST(RedisClient, CommandsPipelinedAndNamespaced) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  RedisOptions o = OptionsFor(server->port());
  o.key_prefix = "impress:a:";
  o.max_in_flight = 7;  // several windows per Run
  auto c = RedisClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE((*c)->cluster());
  std::vector<RedisCommand> sets;
  for (int i = 0; i < 50; ++i) sets.push_back({{"SET", Name("k", i), std::string(100 + i, char('a' + i % 26))}});
  for (const auto& r : (*c)->Run(sets)) ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v = (*c)->Get("k3");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, std::string(103, 'd'));
  EXPECT_FALSE((*(*c)->Get("nope")).has_value());
  EXPECT_TRUE(*(*c)->Exists("k49"));
  ASSERT_TRUE((*c)->Del("k49").ok());
  EXPECT_FALSE(*(*c)->Exists("k49"));
  std::vector<RedisClient::ByteRange> ranges = {{0, 10}, {100, 5}, {110, 100}, {5, 0}};
  auto got = (*c)->GetRanges("k10", ranges);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(*got[0], std::string(10, 'k'));
  EXPECT_EQ(*got[1], std::string(5, 'k'));
  EXPECT_EQ(got[2]->size(), 0u);  // past the end
  EXPECT_EQ(*got[3], "");
  auto keys = (*c)->ScanPrefix("k1");
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 11u);  // k1, k10..k19
  // The namespace is on the server's keys, and another namespace sees none of them.
  auto raw = server->Admin()->Get("impress:a:k3");
  ASSERT_TRUE(raw.ok() && raw->has_value());
  RedisOptions other = o;
  other.key_prefix = "impress:b:";
  auto c2 = RedisClient::Connect(other);
  ASSERT_TRUE(c2.ok());
  EXPECT_FALSE((*(*c2)->Get("k3")).has_value());
  EXPECT_TRUE((*c2)->ScanPrefix("")->empty());
  // An error reply is that command's error; the others in the batch still answer.
  std::vector<RedisCommand> mixed = {{{"GET", "k1"}}, {{"INCR", "k1"}}, {{"GET", "k2"}}};
  auto m = (*c)->Run(mixed);
  EXPECT_TRUE(m[0].ok());
  EXPECT_FALSE(m[1].ok());
  EXPECT_TRUE(m[2].ok());
  EXPECT_EQ((*c)->stats().errors, 1u);
}

TEST(RedisClient, ErrorsSayWhatWentWrong) {
  auto server = RedisServer::Start({.cluster = false, .password = "s3cret"});
  ASSERT_NE(server, nullptr);
  RedisOptions o = OptionsFor(server->port());
  o.password = "wrong";
  auto bad = RedisClient::Connect(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("wrong user or password"), std::string::npos) << bad.status().ToString();
  o.password = "";
  auto none = RedisClient::Connect(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("needs a password"), std::string::npos) << none.status().ToString();
  o.password = "s3cret";
  ASSERT_TRUE(RedisClient::Connect(o).ok());
  // A user of its own (ACL), as a team would have.
  auto admin = server->Admin();
  ASSERT_TRUE(admin->Run1({{"ACL", "SETUSER", "team", "on", ">pw", "~impress:t:*", "+@all"}, -1}).ok());
  o.user = "team";
  o.password = "pw";
  o.key_prefix = "impress:t:";
  auto user = RedisClient::Connect(o);
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  EXPECT_TRUE((*user)->Set("x", "1").ok());
  o.password = "nope";
  auto wrong_user = RedisClient::Connect(o);
  ASSERT_FALSE(wrong_user.ok());
  EXPECT_NE(wrong_user.status().message().find("wrong user or password"), std::string::npos);

  // Nobody listening.
  const int port = server->port();
  server->Kill();
  auto refused = RedisClient::Connect(OptionsFor(port));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kIOError);
  EXPECT_NE(refused.status().message().find("onnection refused"), std::string::npos) << refused.status().ToString();
}

TEST(RedisClient, StalledServerTimesOutAndRecovers) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  RedisOptions o = OptionsFor(server->port());
  o.request_timeout = std::chrono::milliseconds(300);
  auto c = RedisClient::Connect(o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Set("k", "v").ok());
  server->Pause();
  auto r = (*c)->Get("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIOError);
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().ToString();
  server->Resume();
  // The next request reconnects (bounded: a loaded machine may need a few tries).
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    auto again = (*c)->Get("k");
    back = again.ok() && again->has_value() && **again == "v";
  }
  EXPECT_TRUE(back);
}

TEST(RedisClient, RestartedServerIsReconnected) {
  auto server = RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  auto c = RedisClient::Connect(OptionsFor(server->port()));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Set("k", "v").ok());
  ASSERT_TRUE(server->Restart());
  auto r = (*c)->Get("k");  // the old connection is dead; a new one finds the key gone
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->has_value());
  EXPECT_GE((*c)->stats().connects, 2u);
}

TEST(RedisCluster, RoutesBySlotAndFollowsAskAndMoved) {
  auto cluster = RedisCluster::Start();
  ASSERT_NE(cluster, nullptr);
  auto c = RedisClient::Connect(OptionsFor(cluster->nodes[1]->port()));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->cluster());
  // Keys spread over every master, pipelined in one Run.
  std::vector<RedisCommand> sets;
  for (int i = 0; i < 200; ++i) sets.push_back({{"SET", Name("key", i), std::to_string(i)}});
  for (const auto& r : (*c)->Run(sets)) ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (auto& n : cluster->nodes) {
    auto dbsize = n->Admin()->Run1({{"DBSIZE"}, -1});
    ASSERT_TRUE(dbsize.ok());
    EXPECT_GT(dbsize->integer, 20) << "every master holds some of the keys";
  }
  EXPECT_EQ((*c)->stats().moved, 0u);
  EXPECT_EQ((*c)->ScanPrefix("key")->size(), 200u);

  // Move the slot of "foo" to another master, key by key, as redis-cli --cluster reshard does.
  ASSERT_TRUE((*c)->Set("foo", "bar").ok());
  const int slot = KeySlot("foo");
  const size_t src = cluster->OwnerOf(slot);
  ASSERT_LT(src, 3u);
  const size_t dst = (src + 1) % 3;
  auto sa = cluster->nodes[src]->Admin();
  auto da = cluster->nodes[dst]->Admin();
  const std::string src_id = cluster->Id(src), dst_id = cluster->Id(dst);
  ASSERT_TRUE(da->Run1({{"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", src_id}, -1}).ok());
  ASSERT_TRUE(sa->Run1({{"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", dst_id}, -1}).ok());
  auto mig = sa->Run1({{"MIGRATE", "127.0.0.1", std::to_string(cluster->nodes[dst]->port()), "foo", "0", "5000"}, -1});
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  // Mid-migration the source answers ASK for a key it no longer has.
  auto v = (*c)->Get("foo");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, "bar");
  EXPECT_GE((*c)->stats().asked, 1u);
  // The slot now belongs to the destination: the source answers MOVED, the client refreshes its map.
  for (auto& n : cluster->nodes)
    ASSERT_TRUE(n->Admin()->Run1({{"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", dst_id}, -1}).ok());
  const uint64_t refreshes = (*c)->stats().slot_map_refreshes;
  v = (*c)->Get("foo");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->value_or(""), "bar");
  EXPECT_GE((*c)->stats().moved, 1u);
  EXPECT_GT((*c)->stats().slot_map_refreshes, refreshes);
  const uint64_t moved = (*c)->stats().moved;
  EXPECT_EQ((*c)->Get("foo")->value_or(""), "bar");
  EXPECT_EQ((*c)->stats().moved, moved) << "the refreshed map sends it straight to the new owner";
}

TEST(RedisCluster, KilledNodeFailsItsKeysOnly) {
  auto cluster = RedisCluster::Start();
  ASSERT_NE(cluster, nullptr);
  RedisOptions o = OptionsFor(cluster->nodes[0]->port());
  o.request_timeout = std::chrono::milliseconds(1500);
  o.max_redirects = 3;
  auto c = RedisClient::Connect(o);
  ASSERT_TRUE(c.ok());
  std::vector<RedisCommand> sets, gets;
  for (int i = 0; i < 60; ++i) {
    sets.push_back({{"SET", Name("key", i), "v"}});
    gets.push_back({{"GET", Name("key", i)}});
  }
  for (const auto& r : (*c)->Run(sets)) ASSERT_TRUE(r.ok());
  cluster->nodes[2]->Kill();
  size_t ok = 0, failed = 0;
  for (const auto& r : (*c)->Run(gets)) {  // one deadline for the whole batch
    if (r.ok()) {
      EXPECT_EQ(r->str, "v");
      ++ok;
    } else {
      EXPECT_EQ(r.status().code(), Status::Code::kIOError) << r.status().ToString();
      ++failed;
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(failed, 0u);
}

}  // namespace
}  // namespace impress::store
