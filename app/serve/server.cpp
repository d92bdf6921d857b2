#include "app/serve/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "app/serve/http-connection.h"
#include "app/serve/metrics.h"
#include "app/serve/model-worker.h"
#include "app/serve/openai-api.h"
#include "app/serve/prefix-scopes.h"
#include "app/serve/request-checks.h"
#include "chat/report-json.h"

namespace impress::serve {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr auto kPoll = std::chrono::milliseconds(200);
constexpr auto kKeepAlive = std::chrono::seconds(2);  // SSE comment while nothing else is sent

void SetError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(Dump(ErrorJson(e)), "application/json");
}

// The metrics label of a path: the route, or "other".
std::string Endpoint(const std::string& path) {
  for (const char* p : {"/health", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions"}) {
    if (path == p) return path;
  }
  return "other";
}

// Whether a route exists for the method and path (others get 404 before their body is read).
bool IsRoute(const std::string& method, const std::string& path) {
  if (method == "GET" || method == "HEAD") return path == "/health" || path == "/v1/models" || path == "/metrics";
  if (method == "POST") return path == "/v1/chat/completions" || path == "/v1/completions";
  return false;
}

// The error for a request body that could not be read whole.
ApiError BodyError(ReadFailure f, const ServeOptions& o) {
  switch (f) {
    case ReadFailure::kBodyTooLarge:
      return {413, fmt::format("the request body is larger than {} bytes", o.max_body_bytes), "invalid_request_error",
              "", "request_too_large"};
    case ReadFailure::kBodyTimeout:
    case ReadFailure::kHeaderTimeout:
      return {408, fmt::format("the request body did not arrive within {} s", o.body_timeout_s),
              "invalid_request_error", "", "request_timeout"};
    case ReadFailure::kHeadersTooLarge:
      return {431, "the request's trailer fields are too large", "invalid_request_error", "", "headers_too_large"};
    case ReadFailure::kMalformed:
      return {400, "the request body's chunked framing is malformed", "invalid_request_error", "", "invalid_framing"};
    default:
      return {400, "the request body ended before it was complete", "invalid_request_error", "", "incomplete_body"};
  }
}

// The error for a generation that failed in the worker, or that a cancel cut short.
ApiError WorkerError(const Job::Outcome& o) {
  switch (o.cancel_reason) {
    case CancelReason::kTimeout:
      return {504, fmt::format("the request's time limit passed after {} answer tokens", o.answer.tokens.size()),
              "server_error", "", "timeout"};
    case CancelReason::kShutdown:
      return {503, "the server is shutting down; the request was stopped", "server_error", "", "shutting_down"};
    case CancelReason::kClientGone: return {499, "the client closed the connection", "server_error", "", "cancelled"};
    case CancelReason::kNone: break;
  }
  if (o.status.code() == Status::Code::kCancelled) {
    return {503, "the request was cancelled: " + o.status.message(), "server_error", "", "cancelled"};
  }
  return {500, o.status.ToString(), "server_error", "", "internal_error"};
}

// finish_reason of an answer a cancel cut short: never "length", which tells a client it asked
// for too few tokens.
const char* CutFinishReason(CancelReason why) { return why == CancelReason::kTimeout ? "timeout" : "cancelled"; }

}  // namespace

struct Server::Impl {
  ChatSession& session;
  const ServeOptions opts;
  ServeMetrics metrics;
  std::unique_ptr<PrefixScopes> scopes;  // null: one cache for every client
  ModelWorker worker;
  GuardedHttpServer http;
  std::thread listen_thread;
  int port = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopped{false};
  Mutex stop_mu;
  CondVar stop_cv;
  bool stop_done GUARDED_BY(stop_mu) = false;

  Impl(ChatSession& s, ServeOptions o) :
      session(s),
      opts(std::move(o)),
      scopes(opts.api_keys.size() > 1 && !opts.shared_cache ? std::make_unique<PrefixScopes>() : nullptr),
      worker(s, opts.max_queue, &metrics, scopes.get(), opts.test_hooks),
      http(ConnectionLimits{.header_timeout_s = opts.header_timeout_s,
                            .body_timeout_s = opts.body_timeout_s,
                            .idle_timeout_s = opts.idle_timeout_s,
                            .max_connections_per_client = opts.max_connections_per_client},
           [this](int status, const std::string& message) {
             metrics.CountRequest("other", status);
             const char* code = status == 408   ? "request_timeout"
                                : status == 429 ? "too_many_connections"
                                                : "headers_too_large";
             return Dump(ErrorJson({status, message, "invalid_request_error", "", code}));
           }) {}

  void Routes();
  httplib::Server::HandlerResponse PreRouting(const httplib::Request& req, httplib::Response& res);
  void Completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void Respond(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
               httplib::Response& res, const std::string& endpoint);
  void Stream(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
              httplib::Response& res);
  bool KeyGiven(const httplib::Request& req) {
    return !CheckApiKey(opts.api_keys, req.get_header_value("Authorization")).has_value();
  }
};

// Runs once the headers are read, before any body: every refusal here leaves the body unread and
// closes the connection after the answer.
httplib::Server::HandlerResponse Server::Impl::PreRouting(const httplib::Request& req, httplib::Response& res) {
  Connection* conn = CurrentConnection();
  if (conn) conn->BeginBody();
  const std::string endpoint = Endpoint(req.path);
  auto refuse = [&](const ApiError& e) {
    SetError(res, e);
    metrics.CountRequest(endpoint, res.status);
    if (conn) conn->CloseAfterResponse();
    return httplib::Server::HandlerResponse::Handled;
  };
  if (auto e = CheckHost(req.get_header_value("Host"), opts.host, opts.allowed_hosts)) return refuse(*e);
  const std::string origin = req.get_header_value("Origin");
  if (auto e = CheckOrigin(origin, opts.allowed_origins)) return refuse(*e);
  if (!origin.empty()) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS" && !origin.empty()) {  // a browser's preflight for an allowed origin
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "600");
    metrics.CountRequest(endpoint, 204);
    if (conn) conn->CloseAfterResponse();
    return httplib::Server::HandlerResponse::Handled;
  }
  if (!IsRoute(req.method, req.path)) {
    return refuse({404, fmt::format("no route {} {}", req.method, req.path), "invalid_request_error", "", "not_found"});
  }
  const bool open = req.path == "/health" && !req.has_param("check");
  if (!open) {
    if (auto e = CheckApiKey(opts.api_keys, req.get_header_value("Authorization"))) return refuse(*e);
  }
  if (req.method == "POST") {
    if (auto e = CheckBodyHeaders(req.get_header_value("Content-Type"), req.get_header_value("Content-Length"),
                                  req.get_header_value("Transfer-Encoding"), req.get_header_value("Content-Encoding"),
                                  opts.max_body_bytes)) {
      return refuse(*e);
    }
  } else if (req.has_header("Transfer-Encoding") ||
             (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0")) {
    return refuse(
        {400, fmt::format("a {} request has no body", req.method), "invalid_request_error", "", "unexpected_body"});
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

void Server::Impl::Routes() {
  http.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return PreRouting(req, res); });
  http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    // The model's id only to those with the key: /health answers anyone.
    json j = {{"status", "ok"}, {"queue_depth", worker.queue_depth()}};
    if (KeyGiven(req)) j["model"] = opts.model_id;
    // ?check=store: the store's tree, tiers and catalog agree (run by the worker, between requests).
    if (req.get_param_value("check") == "store") {
      auto job = std::make_shared<Job>();
      job->kind = Job::Kind::kCheckStore;
      if (Status st = worker.Submit(job); !st.ok()) {
        SetError(res, {503, st.ToString(), "server_error", "", "overloaded"});
        metrics.CountRequest("/health", res.status);
        return;
      }
      std::string unused;
      while (!job->Wait(&unused, Clock::now() + kPoll)) {
      }
      j["store"] = {{"present", session.store() != nullptr},
                    {"consistent", job->outcome().status.ok()},
                    {"message", job->outcome().status.ToString()}};
    }
    res.set_content(Dump(j), "application/json");
    metrics.CountRequest("/health", 200);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump(ModelsJson(opts.model_id, int64_t(std::time(nullptr)))), "application/json");
    metrics.CountRequest("/v1/models", 200);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics.CountRequest("/metrics", 200);  // counted before rendering, so a scrape sees itself
    res.set_content(metrics.Render(session.store()), "text/plain; version=0.0.4");
  });
  // The body is read by Completion (Connection::ReadBody), within its limits, never by httplib.
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader&) { Completion(req, res, true); });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader&) { Completion(req, res, false); });
  // Statuses httplib sets itself (400 bad HTTP, which is 408 / 431 when a deadline or the header
  // budget stopped the read) get the OpenAI error body; responses our handlers made have one.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "the request could not be read", "invalid_request_error", "", ""};
    const Connection* conn = CurrentConnection();
    const ReadFailure f = conn ? conn->failure() : ReadFailure::kNone;
    if (f == ReadFailure::kHeaderTimeout) {
      e = {408, fmt::format("the request's headers did not arrive within {} s", opts.header_timeout_s),
           "invalid_request_error", "", "request_timeout"};
    } else if (f == ReadFailure::kHeadersTooLarge) {
      e = {431, "the request's headers are too large", "invalid_request_error", "", "headers_too_large"};
    } else if (res.status == 413) {
      e.message = fmt::format("the request body is larger than {} bytes", opts.max_body_bytes);
      e.code = "request_too_large";
    } else if (res.status == 404) {
      e.message = fmt::format("no route {} {}", req.method, req.path);
      e.code = "not_found";
    }
    SetError(res, e);
    metrics.CountRequest(Endpoint(req.path), res.status);
  });
}

void Server::Impl::Completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) {
    SetError(res, e);
    metrics.CountRequest(endpoint, res.status);
  };
  Connection* conn = CurrentConnection();
  if (!conn) return fail({500, "the request has no connection", "server_error", "", "internal_error"});
  std::string body;
  if (ReadFailure f = conn->ReadBody(req, opts.max_body_bytes, &body); f != ReadFailure::kNone) {
    return fail(BodyError(f, opts));
  }
  int key = -1;
  if (auto e = CheckApiKey(opts.api_keys, req.get_header_value("Authorization"), &key)) return fail(*e);
  if (stopped.load()) return fail({503, "the server is shutting down", "server_error", "", "shutting_down"});
  CompletionRequest r;
  if (auto e = chat ? ParseChatRequest(body, &r) : ParseCompletionRequest(body, &r)) return fail(*e);
  if (auto e = CheckModel(r.model, opts.model_id)) return fail(*e);
  auto job = std::make_shared<Job>();
  job->scope = fmt::format("key{}", key);
  ModelContext& ctx = session.context();  // tokenizer and template: immutable, any thread
  if (auto e = BuildRequestPrompt(r, ctx.tokenizer(), ctx.chat_template(), &job->prompt)) return fail(*e);
  job->ask = opts.defaults;
  if (auto e = AnswerBudget(int(job->prompt.tokens.size()), ctx.config().n_ctx_train, r.max_tokens,
                            opts.default_max_tokens, &job->ask.max_tokens)) {
    return fail(*e);
  }
  if (r.temperature) job->ask.sampling.temperature = *r.temperature;
  if (r.top_p) job->ask.sampling.top_p = *r.top_p;
  if (r.seed) job->ask.sampling.seed = *r.seed;
  if (r.impress.system) job->ask.pipeline.system = *r.impress.system;
  if (r.impress.keep) job->ask.pipeline.keep = *r.impress.keep;
  if (r.impress.alpha) job->ask.pipeline.alpha = *r.impress.alpha;
  job->stop = r.stop;
  job->deadline = Clock::now() + std::chrono::milliseconds(int64_t(opts.request_timeout_s * 1000));
  if (Status st = worker.Submit(job); !st.ok()) {
    return fail({503, st.message(), "server_error", "",
                 st.code() == Status::Code::kCancelled ? "shutting_down" : "overloaded"});
  }
  const ResponseId rid{fmt::format("{}{:016x}", chat ? "chatcmpl-" : "cmpl-", next_id.fetch_add(1)),
                       int64_t(std::time(nullptr)), opts.model_id};
  if (r.stream) {
    metrics.CountRequest(endpoint, 200);
    Stream(job, r, rid, res);
  } else {
    Respond(job, r, rid, res, endpoint);
  }
}

namespace {

// The whole response body of a finished non-streaming job: the completion, or the error (with
// what was generated before a cancel, as "impress_partial").
std::string ResponseBody(const Job& job, const CompletionRequest& r, const ResponseId& rid, const std::string& text) {
  const Job::Outcome& o = job.outcome();
  if (!o.status.ok() || o.cancelled) {
    json j = ErrorJson(WorkerError(o));
    if (o.status.ok()) j["impress_partial"] = {{"text", text}, {"completion_tokens", o.answer.tokens.size()}};
    return Dump(j);
  }
  const Usage usage{o.answer.report.n_prompt, int(o.answer.tokens.size()), o.answer.report.n_matched,
                    o.answer.report.selected_attention() ? "selected" : "full"};
  const char* finish = FinishReason(o.ended_by_model, o.stop_string, o.answer.stop_reason);
  json report = r.impress.report ? RequestReportJson(o.answer.report) : json();
  if (r.impress.report) report["stop_reason"] = o.answer.stop_reason;
  const json* rp = r.impress.report ? &report : nullptr;
  return Dump(r.chat ? ChatCompletionJson(rid, text, finish, usage, rp)
                     : TextCompletionJson(rid, text, finish, usage, rp));
}

}  // namespace

void Server::Impl::Respond(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
                           httplib::Response& res, const std::string& endpoint) {
  // Nothing is sent before the end, so a cut answer still gets the status a client acts on
  // (504 time limit, 503 shutdown). A client that hangs up, in the prefill or the decode, is
  // seen on its socket and its generation cancelled.
  Connection* conn = CurrentConnection();
  std::string text;
  while (!job->Wait(&text, Clock::now() + kPoll)) {
    if (Clock::now() >= job->deadline) job->Cancel(CancelReason::kTimeout);
    if (conn && conn->PeerClosed()) job->Cancel(CancelReason::kClientGone);
  }
  const Job::Outcome& o = job->outcome();
  res.status = o.status.ok() && !o.cancelled ? 200 : WorkerError(o).http_status;
  if (res.status == 503) res.set_header("Retry-After", "1");
  res.set_content(ResponseBody(*job, r, rid, text), "application/json");
  metrics.CountRequest(endpoint, res.status);
}

void Server::Impl::Stream(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
                          httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  auto started = std::make_shared<bool>(false);
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  Connection* conn = CurrentConnection();  // the provider runs on this connection's thread
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, r, rid, started, last_write, conn](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          *last_write = Clock::now();
          if (sink.write(s.data(), s.size())) return true;
          job->Cancel(CancelReason::kClientGone);
          return false;
        };
        const bool usage_null = r.include_usage;
        if (!*started) {
          *started = true;
          const std::string role = "assistant";
          if (r.chat && !write(SseEvent(ChatChunkJson(rid, &role, nullptr, nullptr, usage_null)))) return false;
        }
        std::string text;
        const bool done = job->Wait(&text, Clock::now() + kPoll);
        if (conn && conn->PeerClosed()) {  // gone, in the prefill as in the decode
          job->Cancel(CancelReason::kClientGone);
          return false;
        }
        if (!text.empty()) {
          const json chunk = r.chat ? ChatChunkJson(rid, nullptr, &text, nullptr, usage_null)
                                    : TextChunkJson(rid, text, nullptr, usage_null);
          if (!write(SseEvent(chunk))) return false;
        } else if (!done && Clock::now() - *last_write > kKeepAlive) {
          if (!write(": keep-alive\n\n")) return false;
        }
        if (Clock::now() >= job->deadline) job->Cancel(CancelReason::kTimeout);
        if (!done) return true;
        const Job::Outcome& o = job->outcome();
        const Usage usage{o.answer.report.n_prompt, int(o.answer.tokens.size()), o.answer.report.n_matched,
                          o.answer.report.selected_attention() ? "selected" : "full"};
        if (!o.status.ok()) {
          if (!write(SseEvent(ErrorJson(WorkerError(o))))) return false;
        } else {
          // A cut answer ends with its own finish_reason, then the error a client acts on.
          const char* finish = o.cancelled ? CutFinishReason(o.cancel_reason)
                                           : FinishReason(o.ended_by_model, o.stop_string, o.answer.stop_reason);
          json last = r.chat ? ChatChunkJson(rid, nullptr, nullptr, finish, usage_null)
                             : TextChunkJson(rid, "", finish, usage_null);
          if (r.impress.report) {
            last["impress_report"] = RequestReportJson(o.answer.report);
            last["impress_report"]["stop_reason"] = o.answer.stop_reason;
          }
          if (!write(SseEvent(last))) return false;
          if (r.include_usage && !write(SseEvent(UsageChunkJson(rid, r.chat, usage)))) return false;
          if (o.cancelled && !write(SseEvent(ErrorJson(WorkerError(o))))) return false;
        }
        if (!write(std::string(kSseDone))) return false;
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->Cancel(CancelReason::kClientGone);
      });
}

Server::Server(ChatSession& session, ServeOptions options) :
    impl_(std::make_unique<Impl>(session, std::move(options))) {
  impl_->Routes();
  // Every queued request holds a thread while it waits; one client address holds at most its
  // connection limit, so others still find threads.
  const size_t n_threads = std::max(impl_->opts.max_queue, impl_->opts.max_connections_per_client) + 8;
  impl_->http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  impl_->http.set_payload_max_length(impl_->opts.max_body_bytes);  // httplib never reads a body here; a guard
}

Server::~Server() {
  Stop();
  if (impl_->listen_thread.joinable()) impl_->listen_thread.join();
}

Status Server::Start() {
  Impl& m = *impl_;
  if (m.opts.port == 0) {
    m.port = m.http.bind_to_any_port(m.opts.host);
    if (m.port <= 0) return Status::IOError("cannot bind " + m.opts.host + " to a free port");
  } else {
    if (!m.http.bind_to_port(m.opts.host, m.opts.port)) {
      return Status::IOError(
          fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", m.opts.host, m.opts.port));
    }
    m.port = m.opts.port;
  }
  m.listen_thread = std::thread([&m] { m.http.listen_after_bind(); });
  return Status::Ok();
}

int Server::port() const { return impl_->port; }

void Server::Wait() {
  MutexLock lock(&impl_->stop_mu);
  while (!impl_->stop_done) impl_->stop_cv.Wait(&impl_->stop_mu);
}

void Server::Stop() {
  Impl& m = *impl_;
  if (m.stopped.exchange(true)) return;
  // The worker first: in-flight requests end (cancelled) and their handlers answer; the store
  // write of the last answer finishes. Then the listener and the connections close.
  m.worker.Shutdown();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // handlers send those answers
  m.http.stop();
  MutexLock lock(&m.stop_mu);
  m.stop_done = true;
  m.stop_cv.SignalAll();
}

}  // namespace impress::serve
