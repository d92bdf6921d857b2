// The Redis client over TLS (rediss://, store/tls-tunnel.h) against a redis-server of the test's
// own that listens with TLS only, with a CA, server and client certificates the test makes with
// the openssl command: commands and byte ranges work as over a plain connection; a missing or
// unreadable certificate file is a clear error before any connection; a server certificate from
// another CA, a name that does not match, or no client certificate for a server that asks for
// one are clear connection errors, never a connection; the store with a team tier over TLS
// publishes and another store reads it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "store/prefix-store.h"
#include "store/redis-client.h"
#include "store/team-tier.h"
#include "tests/store/redis-test-util.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::RedisServer;
using testing::TempDir;

// A CA, a certificate for 127.0.0.1 signed by it (the server's), another for the client, and a
// second CA that signed nothing of this server's.
struct Certs {
  std::string dir = TempDir("redis-tls");
  bool ok = false;
  Certs() {
    const std::string d = dir;
    const std::string cmd =
        "cd '" + d + "' && " +
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key -out ca.crt && "
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca -keyout other.key -out other.crt && "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext "
        "-out server.crt && "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout client.key -out client.csr && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt";
    ok = std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
  }
  ~Certs() { std::filesystem::remove_all(dir); }
  std::string operator()(const std::string& name) const { return dir + "/" + name; }
  TlsFiles Client() const {
    return {.ca_file = (*this)("ca.crt"), .cert_file = (*this)("client.crt"), .key_file = (*this)("client.key")};
  }
};

std::unique_ptr<RedisServer> StartTlsServer(const Certs& c) {
  return RedisServer::Start({},
                            {.cert = c("server.crt"), .key = c("server.key"), .ca = c("ca.crt"), .client = c.Client()});
}

RedisOptions TlsOptions(int port, TlsFiles files) {
  RedisOptions o;
  o.port = port;
  o.allow_cluster = false;
  o.tls = true;
  o.tls_files = std::move(files);
  o.connect_timeout = std::chrono::milliseconds(3000);
  o.request_timeout = std::chrono::milliseconds(5000);
  return o;
}

TEST(RedisTls, CommandsAndRangesWorkOverTls) {
  if (!testing::ToolOnPath("openssl")) GTEST_SKIP() << "openssl not installed (scripts/setup.sh installs it)";
  Certs c;
  ASSERT_TRUE(c.ok) << "openssl could not make the certificates";
  auto server = StartTlsServer(c);
  ASSERT_NE(server, nullptr);
  auto client = RedisClient::Connect(TlsOptions(server->port(), c.Client()));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::string big(3 << 20, '\0');  // larger than the tunnel's buffers and a TLS record
  std::mt19937 rng(5);
  for (char& ch : big) ch = char(rng());
  ASSERT_TRUE((*client)->Set("tls-key", big).ok());
  auto got = (*client)->Get("tls-key");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ(**got, big);
  const RedisClient::ByteRange ranges[] = {{0, 4096}, {1 << 20, 8192}, {(3 << 20) - 100, 100}};
  auto parts = (*client)->GetRanges("tls-key", ranges);
  ASSERT_EQ(parts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(parts[i].ok()) << parts[i].status().ToString();
    EXPECT_EQ(*parts[i], big.substr(ranges[i].begin, ranges[i].length));
  }
  // Many commands in one pipeline.
  std::vector<RedisCommand> cmds;
  for (int i = 0; i < 500; ++i) cmds.push_back({{"SET", "k" + std::to_string(i), std::to_string(i * i)}});
  for (const auto& r : (*client)->Run(cmds)) EXPECT_TRUE(r.ok());
  auto v = (*client)->Get("k499");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ(**v, std::to_string(499 * 499));
}

TEST(RedisTls, BadCertificatesAreClearErrors) {
  if (!testing::ToolOnPath("openssl")) GTEST_SKIP() << "openssl not installed (scripts/setup.sh installs it)";
  Certs c;
  ASSERT_TRUE(c.ok) << "openssl could not make the certificates";
  auto server = StartTlsServer(c);
  ASSERT_NE(server, nullptr);
  auto expect_error = [&](TlsFiles files, Status::Code code, const std::string& words) {
    auto r = RedisClient::Connect(TlsOptions(server->port(), files));
    ASSERT_FALSE(r.ok()) << "connected with " << words;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
  };
  TlsFiles f = c.Client();
  f.ca_file = c("missing-ca.crt");
  expect_error(f, Status::Code::kInvalidArgument, "missing-ca.crt cannot be read");
  f = c.Client();
  f.key_file = "";
  expect_error(f, Status::Code::kInvalidArgument, "needs its key");
  f = c.Client();
  f.ca_file = c("other.crt");  // the server's certificate is not this CA's
  expect_error(f, Status::Code::kIOError, "does not verify");
  f = c.Client();
  f.cert_file = f.key_file = "";  // the server asks for a client certificate
  auto r = RedisClient::Connect(TlsOptions(server->port(), f));
  EXPECT_FALSE(r.ok()) << "connected without a client certificate";
  // A name the certificate does not carry.
  RedisOptions named = TlsOptions(server->port(), c.Client());
  named.host = "localhost";
  auto n = RedisClient::Connect(named);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("does not verify"), std::string::npos) << n.status().ToString();
  // A plain client on the TLS port gets no answer it could take for one.
  RedisOptions plain;
  plain.port = server->port();
  plain.allow_cluster = false;
  plain.connect_timeout = std::chrono::milliseconds(1000);
  plain.request_timeout = std::chrono::milliseconds(1000);
  auto p = RedisClient::Connect(plain);
  if (p.ok()) {
    EXPECT_FALSE((*p)->Set("x", "y").ok());
  }
}

TEST(RedisTls, StoresShareKVOverTls) {
  if (!testing::ToolOnPath("openssl")) GTEST_SKIP() << "openssl not installed (scripts/setup.sh installs it)";
  Certs c;
  ASSERT_TRUE(c.ok) << "openssl could not make the certificates";
  auto server = StartTlsServer(c);
  ASSERT_NE(server, nullptr);
  constexpr int kLayers = 2, kHeads = 2, kDim = 64, kChunk = 16;
  const testing::SyntheticKV kv{kLayers, kHeads, kDim};
  const std::string da = TempDir("tls-a"), db = TempDir("tls-b");
  auto options = [&](const std::string& dir) {
    PrefixStoreOptions o = testing::TestOptions(dir, "model-tls", kLayers, kHeads, kDim, {1}, kChunk);
    o.team.url = "rediss://127.0.0.1:" + std::to_string(server->port());
    o.team.team = "tls";
    o.team.tls = c.Client();
    o.team.selective = false;
    return o;
  };
  {
    PrefixStoreOptions missing = options(db);
    missing.team.tls.cert_file = c("nope.crt");
    auto st = PrefixStore::Open(missing);
    ASSERT_FALSE(st.ok()) << "a store opened with a client certificate file that is not there";
    EXPECT_NE(st.status().message().find("nope.crt"), std::string::npos) << st.status().ToString();
  }
  auto a = testing::OpenOrDie(options(da));
  auto b = testing::OpenOrDie(options(db));
  std::mt19937 rng(3);
  const auto doc = testing::RandomTokens(rng, 4 * kChunk);
  ASSERT_TRUE(kv.Insert(*a, doc, 0).ok());
  ASSERT_TRUE(a->WaitTeamPublished(std::chrono::seconds(20)));
  const TeamFill f = b->FillFromTeam(doc);
  EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  EXPECT_EQ(f.n_team, doc.size());
  EXPECT_TRUE(testing::ReadsExact(*b, kv, doc, doc.size()));
  a.reset();
  b.reset();
  std::filesystem::remove_all(da);
  std::filesystem::remove_all(db);
}

}  // namespace
}  // namespace impress::store
