// The HTTP layer and the model worker of `impress serve` (app/serve/server.h) on a loopback
// port, with the default model and a temporary store: answers plain and streamed agree, the
// stream ends with [DONE], the second request reuses the stored prefix, a prompt's stored prefix
// is reused only by the API key that sent it (unless the cache is shared), a client that hangs
// up mid-stream does not stop the server and its generation stops, one that leaves a plain
// request during its prefill cancels it, a request past its time limit gets 504 (and a stream
// cut by it ends with finish_reason "timeout" and an error event, never "length"), a full queue
// answers 503 with Retry-After, httplib's own errors carry the OpenAI error body, and Stop
// during a generation answers it with 503 and leaves the store consistent. Test hooks hold the
// worker at known points, so that none of this depends on timing.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "app/serve/openai-api.h"
#include "app/serve/server.h"
#include "tests/serve/raw-http.h"
#include "tests/support/default-model.h"

namespace impress::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Holds the worker thread at a hook, once, until the test opens it or the job is cancelled
// (or a generous limit passes, which the tests then report as a failure).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, opened = false;
  std::atomic<bool> released_by_cancel{false};  // read by the test once the request is answered
  std::atomic<bool> armed{true};

  void Hold(Job& job) {
    if (!armed.exchange(false)) return;
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!opened && !job.cancel.load() && std::chrono::steady_clock::now() < limit) {
      cv.wait_for(lock, std::chrono::milliseconds(10));
    }
    released_by_cancel.store(job.cancel.load());
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(300), [&] { return entered; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    opened = true;
  }
};

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
  json Post(const std::string& path, const json& body, int want_status = 200, const std::string& key = "") {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    auto res = client_->Post(path.c_str(), headers, body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return {};
    EXPECT_EQ(res->status, want_status) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  std::string Metrics() {
    auto res = client_->Get("/metrics");
    EXPECT_TRUE(res);
    return res ? res->body : std::string();
  }

  Gate gate_;  // outlives the server, whose hooks use it
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
  EXPECT_EQ(plain["usage"]["impress_attention"], "full");                  // so it attends to everything
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
  // From the store, IMPRESS attends to a selection of the document, and every response says so.
  EXPECT_EQ(second["usage"]["impress_attention"], "selected");
  EXPECT_EQ(second["impress_report"]["attention"], "selected");
  EXPECT_LT(second["impress_report"]["attended_share"].get<double>(), 1.0);
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

// The raw bytes of a POST with a JSON body.
std::string RawPost(int port, const std::string& path, const json& body) {
  const std::string b = body.dump();
  return fmt::format(
      "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      path, port, b.size(), b);
}

TEST_F(ServeLoopback, AClientThatLeavesAPlainRequestDuringItsPrefillCancelsIt) {
  ServeOptions o;
  o.test_hooks.on_prefill = [this](Job& job) { gate_.Hold(job); };
  StartServer(o);
  {
    test::RawHttp c(server_->port());
    c.Send(RawPost(server_->port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 50}}));
    ASSERT_TRUE(gate_.WaitEntered());  // the prefill has begun
  }                                    // the client hangs up
  // The next request runs after the abandoned one ended.
  const json next = Post("/v1/completions", {{"prompt", "One, two,"}, {"max_tokens", 3}});
  EXPECT_EQ(next["object"], "text_completion");
  EXPECT_TRUE(gate_.released_by_cancel);
  const std::string m = Metrics();
  EXPECT_NE(m.find("impress_cancelled_total 1\n"), std::string::npos) << m;
  // Only the second request generated: the first never reached its answer.
  EXPECT_NE(m.find(fmt::format("impress_completion_tokens_total {}\n", next["usage"]["completion_tokens"].get<int>())),
            std::string::npos)
      << m;
}

TEST_F(ServeLoopback, AStreamingClientThatHangsUpStopsItsGeneration) {
  ServeOptions o;
  o.test_hooks.on_first_token = [this](Job& job) { gate_.Hold(job); };
  StartServer(o);
  {
    test::RawHttp c(server_->port());
    c.Send(RawPost(server_->port(), "/v1/completions",
                   {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"stream", true}}));
    ASSERT_TRUE(gate_.WaitEntered());  // the answer's first token is out
  }
  const json next = Post("/v1/completions", {{"prompt", "One, two,"}, {"max_tokens", 3}});
  EXPECT_EQ(next["object"], "text_completion");
  EXPECT_TRUE(gate_.released_by_cancel);
  const std::string m = Metrics();
  EXPECT_NE(m.find("impress_cancelled_total 1\n"), std::string::npos) << m;
  // The abandoned answer stopped at the token after the hook (at most two), not at 400.
  const std::string name = "\nimpress_completion_tokens_total ";
  const size_t at = m.find(name);
  ASSERT_NE(at, std::string::npos);
  EXPECT_LE(std::stoi(m.substr(at + name.size())), next["usage"]["completion_tokens"].get<int>() + 2) << m;
}

TEST_F(ServeLoopback, ATimeLimitReachedMidAnswerIsNotReportedAsLength) {
  ServeOptions o;
  // The time limit passes at the first answer token (as the worker's own deadline check does).
  o.test_hooks.on_first_token = [](Job& job) { job.Cancel(CancelReason::kTimeout); };
  StartServer(o);
  const json plain = Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 200}}, 504);
  EXPECT_EQ(plain["error"]["code"], "timeout");
  EXPECT_GE(plain["impress_partial"]["completion_tokens"].get<int>(), 1);
  auto res =
      client_->Post("/v1/chat/completions", json{{"messages", kMessages}, {"max_tokens", 200}, {"stream", true}}.dump(),
                    "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::string& sse = res->body;
  std::vector<std::string> finishes;
  bool error_event = false;
  for (size_t at = 0; (at = sse.find("data: {", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    const json event = json::parse(sse.substr(at + 6, end - at - 6));
    if (event.contains("error")) error_event = event["error"]["code"] == "timeout";
    if (event.contains("choices") && !event["choices"].empty() && !event["choices"][0]["finish_reason"].is_null()) {
      finishes.push_back(event["choices"][0]["finish_reason"]);
    }
    at = end;
  }
  EXPECT_EQ(finishes, std::vector<std::string>{"timeout"}) << sse;
  EXPECT_TRUE(error_event) << sse;
  EXPECT_EQ(sse.substr(sse.size() - kSseDone.size()), kSseDone);
}

TEST_F(ServeLoopback, AFullQueueAnswers503WithRetryAfter) {
  ServeOptions o;
  o.max_queue = 1;
  o.test_hooks.on_prefill = [this](Job& job) { gate_.Hold(job); };
  StartServer(o);
  const std::string body = json{{"prompt", "One, two,"}, {"max_tokens", 2}}.dump();
  auto post = [&](std::optional<int>* status) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(300, 0);
    auto res = c.Post("/v1/completions", body, "application/json");
    if (res) *status = res->status;
  };
  std::optional<int> first, second;
  std::thread running([&] { post(&first); });
  ASSERT_TRUE(gate_.WaitEntered());  // the first runs, held in its prefill
  std::thread queued([&] { post(&second); });
  int depth = 0;
  for (int i = 0; i < 2400 && depth != 1; ++i) {  // until the second waits in the queue
    auto h = client_->Get("/health");
    if (h && h->status == 200) depth = json::parse(h->body)["queue_depth"];
    if (depth != 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(depth, 1);
  auto res = client_->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "overloaded");
  gate_.Open();
  running.join();
  queued.join();
  EXPECT_EQ(first, 200);
  EXPECT_EQ(second, 200);
}

TEST_F(ServeLoopback, AStoredPromptIsReusedOnlyByTheKeyThatSentIt) {
  ServeOptions o;
  o.api_keys = {"alice", "bob"};
  StartServer(o);
  const json secret =
      json::array({{{"role", "system"},
                    {"content", "Patient record 4411. Diagnosis code F32.1, seen on 3 March. Keep it private."}},
                   {{"role", "user"}, {"content", "Summarise the record."}}});
  auto cached = [&](const std::string& key) {
    const json r = Post("/v1/chat/completions", {{"messages", secret}, {"max_tokens", 2}}, 200, key);
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached("alice"), 0);
  EXPECT_EQ(cached("bob"), 0);  // stored by alice: not bob's to reuse or to learn of
  EXPECT_GT(cached("alice"), 0);
  EXPECT_GT(cached("bob"), 0);  // bob has sent it himself now
  // A shared cache lets a new key reuse what others stored.
  o.api_keys = {"alice", "bob", "carol"};
  o.shared_cache = true;
  StartServer(o);
  EXPECT_GT(cached("carol"), 0);
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

TEST_F(ServeLoopback, StopDuringAGenerationAnswers503AndLeavesTheStoreConsistent) {
  ServeOptions o;
  o.test_hooks.on_first_token = [this](Job& job) { gate_.Hold(job); };
  StartServer(o);
  std::optional<int> status;
  std::string retry_after;
  json body;
  std::thread request([&] {
    auto res = client_->Post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 2000}}.dump(),
                             "application/json");
    if (!res) return;
    status = res->status;
    retry_after = res->get_header_value("Retry-After");
    body = json::parse(res->body, nullptr, false);
  });
  ASSERT_TRUE(gate_.WaitEntered());  // the answer has begun
  server_->Stop();
  request.join();
  EXPECT_TRUE(gate_.released_by_cancel);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 503);  // a cut answer is not a complete one: the client may retry
  EXPECT_EQ(retry_after, "1");
  EXPECT_EQ(body["error"]["code"], "shutting_down");
  ASSERT_NE(session_->store(), nullptr);
  EXPECT_TRUE(session_->pipeline().ReleaseMatch().ok());
  const Status st = session_->store()->CheckConsistency();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

}  // namespace
}  // namespace impress::serve
