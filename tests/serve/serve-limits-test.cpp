// The limits `impress serve` enforces while it reads a request (app/serve/http-connection.h,
// request-checks.h), driven over loopback by a raw client that sends what hostile clients send:
// a chunked body past the body limit gets 413 without the rest being read; the API key, the
// Host, the Origin and the content type are refused before any body arrives; headers and bodies
// that come too slowly get 408; an address past its connection limit gets 429; /metrics wants the
// key and /health shows the model only with it. The default model serves (no store).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <thread>

#include "app/serve/openai-api.h"
#include "app/serve/server.h"
#include "tests/serve/raw-http.h"
#include "tests/support/default-model.h"

namespace impress::serve {
namespace {

using nlohmann::json;
using test::RawHttp;

constexpr size_t kBodyLimit = 4096;

class ServeLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test_support::DefaultModel())) << "run scripts/setup.sh";
    ChatSessionOptions so;
    so.model_path = test_support::DefaultModel();
    auto s = ChatSession::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(*s);
  }
  // Starts the server on a free port with `o` (port, model id, body limit, greedy sampling set).
  void Start(ServeOptions o = {}) {
    server_.reset();
    o.port = 0;
    o.model_id = "m";
    o.max_body_bytes = kBodyLimit;
    o.defaults.sampling.temperature = 0;
    server_ = std::make_unique<Server>(*session_, o);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    server_.reset();
    session_.reset();
  }
  int port() const { return server_->port(); }
  std::string Host() const { return "Host: 127.0.0.1:" + std::to_string(port()) + "\r\n"; }
  std::string Metrics(const std::string& key = "") {
    httplib::Client c("127.0.0.1", port());
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    auto res = c.Get("/metrics", h);
    return res && res->status == 200 ? res->body : std::string();
  }

  std::unique_ptr<ChatSession> session_;
  std::unique_ptr<Server> server_;
};

json ErrorOf(const RawHttp& c) { return json::parse(c.body(), nullptr, false); }

const std::string kSmallChat =
    json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 1}}.dump();

TEST_F(ServeLimits, AChunkedBodyPastTheLimitGets413WithoutTheRestBeingRead) {
  Start();
  RawHttp c(port());
  ASSERT_TRUE(c.connected());
  // Twice the limit in 1 KiB chunks, and no last chunk: the body never ends. A server that read
  // it whole would still be waiting.
  std::string request = "POST /v1/chat/completions HTTP/1.1\r\n" + Host() +
                        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; ++i) request += "400\r\n" + std::string(1024, ' ') + "\r\n";
  c.Send(request);
  c.ReadToClose();
  ASSERT_EQ(c.status(), 413) << c.received();
  EXPECT_EQ(ErrorOf(c)["error"]["code"], "request_too_large");
  EXPECT_NE(Metrics().find("impress_requests_total{endpoint=\"/v1/chat/completions\",status=\"413\"} 1"),
            std::string::npos);
}

TEST_F(ServeLimits, AContentLengthPastTheLimitGets413BeforeTheBody) {
  Start();
  RawHttp c(port());
  c.Send("POST /v1/completions HTTP/1.1\r\n" + Host() +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(size_t(1) << 30) + "\r\n\r\n");
  c.ReadToClose();
  ASSERT_EQ(c.status(), 413) << c.received();
  EXPECT_EQ(ErrorOf(c)["error"]["code"], "request_too_large");
}

TEST_F(ServeLimits, AChunkedBodyWithinTheLimitIsServed) {
  Start();
  RawHttp c(port());
  std::string request = "POST /v1/chat/completions HTTP/1.1\r\n" + Host() +
                        "Content-Type: application/json; charset=utf-8\r\nTransfer-Encoding: chunked\r\n"
                        "Connection: close\r\n\r\n";
  for (size_t at = 0; at < kSmallChat.size(); at += 7) {
    const std::string piece = kSmallChat.substr(at, 7);
    request += fmt::format("{:x};ext=1\r\n{}\r\n", piece.size(), piece);
  }
  request += "0\r\n\r\n";
  c.Send(request);
  c.ReadToClose();
  ASSERT_EQ(c.status(), 200) << c.received();
  EXPECT_EQ(json::parse(c.body(), nullptr, false)["object"], "chat.completion");
}

TEST_F(ServeLimits, TheKeyIsCheckedBeforeTheBodyIsRead) {
  ServeOptions o;
  o.api_keys = {"secret"};
  Start(o);
  // Headers announce a body that is never sent: the answer can only come from the headers.
  for (const std::string framing : {"Content-Length: 4000\r\n", "Transfer-Encoding: chunked\r\n"}) {
    RawHttp c(port());
    c.Send("POST /v1/chat/completions HTTP/1.1\r\n" + Host() + "Content-Type: application/json\r\n" + framing +
           "Authorization: Bearer wrong\r\n\r\n");
    c.ReadToClose();
    ASSERT_EQ(c.status(), 401) << framing << c.received();
    EXPECT_EQ(ErrorOf(c)["error"]["code"], "invalid_api_key");
  }
}

TEST_F(ServeLimits, HeadersThatComeTooSlowlyGet408AndTheConnectionCloses) {
  ServeOptions o;
  o.header_timeout_s = 0.5;
  Start(o);
  RawHttp c(port());
  c.Send("GET /health HTTP/1.1\r\n" + Host());
  // One header byte every 50 ms, until the server answers or closes (at most 60 s of bytes).
  const std::string drip = "X-Slow: " + std::string(1200, 'a');
  bool open = true;
  for (size_t i = 0; i < drip.size() && open && c.received().empty(); ++i) {
    open = c.Send(drip.substr(i, 1)) && c.Poll(50);
  }
  c.ReadToClose();
  ASSERT_EQ(c.status(), 408) << c.received();
  EXPECT_EQ(ErrorOf(c)["error"]["code"], "request_timeout");
}

TEST_F(ServeLimits, ARequestLineThatNeverEndsGets408) {
  ServeOptions o;
  o.header_timeout_s = 0.5;
  Start(o);
  RawHttp c(port());
  c.Send("GET /health");  // no end of line, ever
  c.ReadToClose();
  ASSERT_EQ(c.status(), 408) << c.received();
}

TEST_F(ServeLimits, ABodyThatComesTooSlowlyGets408) {
  ServeOptions o;
  o.body_timeout_s = 0.5;
  Start(o);
  RawHttp c(port());
  c.Send("POST /v1/chat/completions HTTP/1.1\r\n" + Host() +
         "Content-Type: application/json\r\nContent-Length: 3000\r\n\r\n{\"messages\": ");
  bool open = true;
  for (int i = 0; i < 1200 && open && c.received().empty(); ++i) open = c.Send(" ") && c.Poll(50);
  c.ReadToClose();
  ASSERT_EQ(c.status(), 408) << c.received();
  EXPECT_EQ(ErrorOf(c)["error"]["code"], "request_timeout");
}

TEST_F(ServeLimits, HeadersPastTheBudgetGet431) {
  Start();
  RawHttp c(port());
  std::string request = "GET /health HTTP/1.1\r\n" + Host();
  for (int i = 0; i < 100; ++i) request += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'f') + "\r\n";
  c.Send(request + "\r\n");
  c.ReadToClose();
  EXPECT_EQ(c.status(), 431) << c.received();
}

TEST_F(ServeLimits, AnAddressPastItsConnectionLimitGets429) {
  ServeOptions o;
  o.max_connections_per_client = 2;
  o.idle_timeout_s = 600;  // the two held connections stay open for the test
  Start(o);
  const std::string health = "GET /health HTTP/1.1\r\n" + Host() + "\r\n";
  RawHttp a(port()), b(port());
  for (RawHttp* c : {&a, &b}) {  // each answered once: the server counts it as open
    c->Send(health);
    c->ReadResponse();
    ASSERT_EQ(c->status(), 200) << c->received();
  }
  RawHttp third(port());
  third.Send(health);
  third.ReadToClose();
  ASSERT_EQ(third.status(), 429) << third.received();
  EXPECT_TRUE(third.HasHeader("Retry-After: 1"));
  EXPECT_EQ(ErrorOf(third)["error"]["code"], "too_many_connections");
  // Once one leaves, a new connection is served (the server notices the close first).
  a.Close();
  int status = 0;
  for (int i = 0; i < 600 && status != 200; ++i) {
    RawHttp again(port());
    again.Send(health);
    again.ReadResponse();
    status = again.status();
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
}

TEST_F(ServeLimits, HostOriginAndContentTypeAreCheckedBeforeTheBody) {
  ServeOptions o;
  o.allowed_hosts = {"impress.local"};
  o.allowed_origins = {"http://localhost:3000"};
  Start(o);
  httplib::Client client("127.0.0.1", port());
  auto get = [&](httplib::Headers h) { return client.Get("/health", h); };
  auto res = get({{"Host", "attacker.example.com"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "host_not_allowed");
  for (const char* host : {"localhost", "impress.local:8080", "127.0.0.1"}) {
    res = get({{"Host", host}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << host;
  }
  res = get({{"Origin", "http://attacker.example.com"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "origin_not_allowed");
  res = get({{"Origin", "http://localhost:3000"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  // A cross-site form posts text/plain: refused before its body is read.
  RawHttp c(port());
  c.Send("POST /v1/chat/completions HTTP/1.1\r\n" + Host() +
         "Content-Type: text/plain\r\nContent-Length: " + std::to_string(kSmallChat.size()) + "\r\n\r\n");
  c.ReadToClose();
  ASSERT_EQ(c.status(), 415) << c.received();
  EXPECT_EQ(ErrorOf(c)["error"]["code"], "unsupported_media_type");
  // A POST to no route is refused before its body too (httplib would read it to the end).
  RawHttp n(port());
  n.Send("POST /v1/embeddings HTTP/1.1\r\n" + Host() +
         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  n.ReadToClose();
  EXPECT_EQ(n.status(), 404) << n.received();
}

TEST_F(ServeLimits, WithAKeyMetricsNeedItAndHealthHidesTheModel) {
  ServeOptions o;
  o.api_keys = {"k1"};
  Start(o);
  httplib::Client client("127.0.0.1", port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(Metrics("k1").find("impress_requests_total"), std::string::npos);
  res = client.Get("/health");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_FALSE(json::parse(res->body).contains("model")) << res->body;
  res = client.Get("/health", {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["model"], "m");
  res = client.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
}

TEST_F(ServeLimits, UnsupportedParametersAreRefusedNotIgnored) {
  Start();
  httplib::Client client("127.0.0.1", port());
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  for (const json& extra : {json{{"logit_bias", {{"50256", -100}}}},
                            json{{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}}}) {
    json body = {{"messages", messages}, {"max_tokens", 1}};
    body.update(extra);
    auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << extra.dump();
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "unsupported_parameter");
  }
}

}  // namespace
}  // namespace impress::serve
