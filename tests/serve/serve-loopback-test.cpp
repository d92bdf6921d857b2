// The HTTP layer and the model worker of `impress serve` (app/serve/server.h) on a loopback
// port, with the default model and a temporary store: answers plain and streamed agree, the
// stream ends with [DONE], the second request reuses the stored prefix, a client that hangs up
// mid-stream does not stop the server and one that leaves a plain request cancels its
// generation, a request past its time limit gets 504, httplib's own errors (413, 404) carry the OpenAI error
// body, and Stop during a generation answers it and leaves the store consistent.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "app/serve/openai-api.h"
#include "app/serve/server.h"
#include "tests/support/default-model.h"

namespace impress::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ServeLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test_support::DefaultModel())) << "run scripts/setup.sh";
    dir_ = fs::temp_directory_path() / ("impress-serve-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    ChatSessionOptions so;
    so.model_path = test_support::DefaultModel();
    so.store_dir = (dir_ / "store").string();
    auto s = ChatSession::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(*s);
    StartServer(ServeOptions{});
  }
  // (Re)starts the server on a free port with `o` (port, model id, body limit and greedy
  // sampling set here).
  void StartServer(ServeOptions o) {
    client_.reset();
    server_.reset();
    o.port = 0;
    o.model_id = "m";
    o.max_body_bytes = 4096;
    o.defaults.sampling.temperature = 0;
    server_ = std::make_unique<Server>(*session_, o);
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(300, 0);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    session_.reset();
    fs::remove_all(dir_);
  }
  json Post(const std::string& path, const json& body, int want_status = 200) {
    auto res = client_->Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return {};
    EXPECT_EQ(res->status, want_status) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  fs::path dir_;
  std::unique_ptr<ChatSession> session_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

const json kMessages = json::array({{{"role", "system"}, {"content", "You answer briefly. The sky is green here."}},
                                    {{"role", "user"}, {"content", "What colour is the sky?"}}});

TEST_F(ServeLoopback, StreamedTextEqualsPlainTextAndThePrefixIsReused) {
  // Both recompute their prompt: a prefix reused from the store under IMPRESS attends to a
  // selection of its tokens, which alone could change the text.
  const json recomp = {{"system", "recomp"}};
  const json plain = Post("/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 12}, {"impress", recomp}});
  const std::string text = plain["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(plain["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // recomp reuses nothing
  std::string sse;
  auto res = client_->Post("/v1/chat/completions",
                           json{{"messages", kMessages},
                                {"max_tokens", 12},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}},
                                {"impress", recomp}}
                               .dump(),
                           "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  sse = res->body;
  ASSERT_GE(sse.size(), kSseDone.size());
  EXPECT_EQ(sse.substr(sse.size() - kSseDone.size()), kSseDone);
  std::string streamed;
  json usage;
  for (size_t at = 0; (at = sse.find("data: {", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    const json chunk = json::parse(sse.substr(at + 6, end - at - 6));
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content")) {
      streamed += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
    if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
    at = end;
  }
  EXPECT_EQ(streamed, text);
  ASSERT_TRUE(usage.is_object());
  EXPECT_EQ(usage["completion_tokens"], plain["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  // Under IMPRESS, the second request takes the system message from the store.
  Post("/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 4}});
  const json again = Post("/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 4}});
  EXPECT_GT(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST_F(ServeLoopback, ADocumentPastedBeforeTheQuestionIsReusedByTheNextQuestion) {
  std::ifstream in(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
  std::string doc(1500, '\0');
  in.read(doc.data(), std::streamsize(doc.size()));
  ASSERT_EQ(in.gcount(), std::streamsize(doc.size()));
  auto ask = [&](const std::string& question) {
    const json messages = json::array({{{"role", "user"}, {"content", doc + "\n\n" + question}}});
    return Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}, {"impress", {{"report", true}}}});
  };
  const json first = ask("Who wrote this?");
  const int n_prefix = first["impress_report"]["n_prefix"];
  EXPECT_GT(n_prefix, 250);  // the document, not only the template's opening
  const json second = ask("What may I copy?");
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), n_prefix * 95 / 100);
}

TEST_F(ServeLoopback, AClientThatHangsUpMidStreamLeavesTheServerServing) {
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"stream", true}}.dump();
  req.set_header("Content-Type", "application/json");
  // false after the first chunk: the client closes the connection.
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  EXPECT_FALSE(client_->send(req, res, error));
  EXPECT_GE(chunks, 1);
  const json next = Post("/v1/completions", {{"prompt", "One, two,"}, {"max_tokens", 3}});
  EXPECT_EQ(next["object"], "text_completion");
  EXPECT_LE(next["usage"]["completion_tokens"].get<int>(), 3);
}

TEST_F(ServeLoopback, AClientThatLeavesAPlainRequestCancelsItsGeneration) {
  {
    // The client gives up at the body's first bytes (the whitespace sent while tokens come).
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", "Once upon a time"}, {"max_tokens", 2000}}.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    EXPECT_FALSE(client_->send(req, res, error));
  }
  // The next request runs after the abandoned one ended.
  const json next = Post("/v1/completions", {{"prompt", "One, two,"}, {"max_tokens", 3}});
  EXPECT_EQ(next["object"], "text_completion");
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("impress_cancelled_total 1\n"), std::string::npos) << res->body;
}

TEST_F(ServeLoopback, HttpLayerErrorsCarryTheErrorObject) {
  auto res = client_->Post("/v1/chat/completions", std::string(8000, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  json body = json::parse(res->body, nullptr, false);
  EXPECT_EQ(body["error"]["code"], "request_too_large");
  res = client_->Get("/v2/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  body = json::parse(res->body, nullptr, false);
  EXPECT_EQ(body["error"]["code"], "not_found");
  res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("impress_requests_total{endpoint=\"/v1/chat/completions\",status=\"413\"} 1"),
            std::string::npos)
      << res->body;
}

TEST_F(ServeLoopback, ARequestPastItsTimeLimitGetsTheTimeoutError) {
  ServeOptions o;
  o.request_timeout_s = 1e-6;  // past before the worker takes it
  StartServer(o);
  const json body = Post("/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 4}}, 504);
  EXPECT_EQ(body["error"]["code"], "timeout");
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("impress_completion_tokens_total 0\n"), std::string::npos);  // nothing ran
}

TEST_F(ServeLoopback, StopDuringAGenerationAnswersItAndLeavesTheStoreConsistent) {
  std::optional<int> status;
  std::thread request([&] {
    auto res = client_->Post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 2000}}.dump(),
                             "application/json");
    if (res) status = res->status;
  });
  // Wait until the generation runs (its prompt is in the store's future; the queue is empty).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server_->Stop();
  request.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(*status == 200 || *status == 503) << *status;
  ASSERT_NE(session_->store(), nullptr);
  EXPECT_TRUE(session_->pipeline().ReleaseMatch().ok());
  const Status st = session_->store()->CheckConsistency();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

}  // namespace
}  // namespace impress::serve
