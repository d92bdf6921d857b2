#include "app/serve/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "app/serve/metrics.h"
#include "app/serve/model-worker.h"
#include "app/serve/openai-api.h"
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

// The error for a generation that failed in the worker.
ApiError WorkerError(const Job::Outcome& o) {
  if (o.status.code() == Status::Code::kCancelled && !o.timed_out) {
    return {503, "the request was cancelled: " + o.status.message(), "server_error", "", "cancelled"};
  }
  if (o.timed_out) return {504, "the request's time limit passed", "server_error", "", "timeout"};
  return {500, o.status.ToString(), "server_error", "", "internal_error"};
}

}  // namespace

struct Server::Impl {
  ChatSession& session;
  const ServeOptions opts;
  ServeMetrics metrics;
  ModelWorker worker;
  httplib::Server http;
  std::thread listen_thread;
  int port = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopped{false};
  Mutex stop_mu;
  CondVar stop_cv;
  bool stop_done GUARDED_BY(stop_mu) = false;

  Impl(ChatSession& s, ServeOptions o) : session(s), opts(std::move(o)), worker(s, opts.max_queue, &metrics) {}

  void Routes();
  void Completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void Respond(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
               httplib::Response& res, const std::string& endpoint);
  void Stream(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
              httplib::Response& res);
  // A check before a route's work; false (response set, request counted) when it fails.
  bool Authorized(const httplib::Request& req, httplib::Response& res, const std::string& endpoint) {
    if (auto e = CheckApiKey(opts.api_key, req.get_header_value("Authorization"))) {
      SetError(res, *e);
      metrics.CountRequest(endpoint, res.status);
      return false;
    }
    return true;
  }
};

void Server::Impl::Routes() {
  http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    json j = {{"status", "ok"}, {"model", opts.model_id}, {"queue_depth", worker.queue_depth()}};
    // ?check=store: the store's tree, tiers and catalog agree (run by the worker, between requests).
    if (req.get_param_value("check") == "store") {
      if (!Authorized(req, res, "/health")) return;
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
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res, "/v1/models")) return;
    res.set_content(Dump(ModelsJson(opts.model_id, int64_t(std::time(nullptr)))), "application/json");
    metrics.CountRequest("/v1/models", 200);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics.CountRequest("/metrics", 200);  // counted before rendering, so a scrape sees itself
    res.set_content(metrics.Render(session.store()), "text/plain; version=0.0.4");
  });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { Completion(req, res, true); });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { Completion(req, res, false); });
  // Statuses httplib sets itself (413 body too large, 404 no route, 400 bad HTTP) get the
  // OpenAI error body; responses our handlers made already have one.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "", "invalid_request_error", "", ""};
    if (res.status == 413) {
      e.message = fmt::format("the request body is larger than {} bytes", opts.max_body_bytes);
      e.code = "request_too_large";
    } else if (res.status == 404) {
      e.message = fmt::format("no route {} {}", req.method, req.path);
      e.code = "not_found";
    } else {
      e.message = "the request could not be read";
    }
    res.set_content(Dump(ErrorJson(e)), "application/json");
    metrics.CountRequest(res.status == 404 ? "other" : req.path, res.status);
  });
}

void Server::Impl::Completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  if (!Authorized(req, res, endpoint)) return;
  auto fail = [&](const ApiError& e) {
    SetError(res, e);
    metrics.CountRequest(endpoint, res.status);
  };
  if (stopped.load()) return fail({503, "the server is shutting down", "server_error", "", "shutting_down"});
  CompletionRequest r;
  if (auto e = chat ? ParseChatRequest(req.body, &r) : ParseCompletionRequest(req.body, &r)) return fail(*e);
  if (auto e = CheckModel(r.model, opts.model_id)) return fail(*e);
  auto job = std::make_shared<Job>();
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

// The whole response body of a finished non-streaming job: the completion, or the error.
std::string ResponseBody(const Job& job, const CompletionRequest& r, const ResponseId& rid, const std::string& text) {
  const Job::Outcome& o = job.outcome();
  if (!o.status.ok()) return Dump(ErrorJson(WorkerError(o)));
  const Usage usage{o.answer.report.n_prompt, int(o.answer.tokens.size()), o.answer.report.n_matched};
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
  // Until the answer's first token, whatever fails (queue time limit, shutdown, prefill) still
  // gets its own status.
  std::string text;
  bool done = false;
  while (!(done = job->Wait(&text, Clock::now() + kPoll)) && !job->decoding.load()) {
    if (Clock::now() >= job->deadline) job->cancel.store(true);
  }
  if (done) {
    res.status = job->outcome().status.ok() ? 200 : WorkerError(job->outcome()).http_status;
    if (res.status == 503) res.set_header("Retry-After", "1");
    res.set_content(ResponseBody(*job, r, rid, text), "application/json");
    metrics.CountRequest(endpoint, res.status);
    return;
  }
  // Decoding: the answer comes as 200. The body is sent chunked, led by JSON whitespace while
  // the tokens come, so that a client that went away is noticed (the write fails) and its
  // generation cancelled.
  metrics.CountRequest(endpoint, 200);
  auto so_far = std::make_shared<std::string>(std::move(text));
  res.set_chunked_content_provider(
      "application/json",
      [job, r, rid, so_far](size_t, httplib::DataSink& sink) {
        const bool finished = job->Wait(so_far.get(), Clock::now() + kPoll);
        if (Clock::now() >= job->deadline) job->cancel.store(true);
        const std::string out = finished ? ResponseBody(*job, r, rid, *so_far) : std::string(" ");
        if (!sink.write(out.data(), out.size())) {
          job->cancel.store(true);
          return false;
        }
        if (finished) sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->cancel.store(true);
      });
}

void Server::Impl::Stream(const std::shared_ptr<Job>& job, const CompletionRequest& r, const ResponseId& rid,
                          httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  auto started = std::make_shared<bool>(false);
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, r, rid, started, last_write](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          *last_write = Clock::now();
          if (sink.write(s.data(), s.size())) return true;
          job->cancel.store(true);  // the client went away
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
        if (!text.empty()) {
          const json chunk = r.chat ? ChatChunkJson(rid, nullptr, &text, nullptr, usage_null)
                                    : TextChunkJson(rid, text, nullptr, usage_null);
          if (!write(SseEvent(chunk))) return false;
        } else if (!done && Clock::now() - *last_write > kKeepAlive) {
          if (!write(": keep-alive\n\n")) return false;  // finds a client that left during a long prefill
        }
        if (Clock::now() >= job->deadline) job->cancel.store(true);
        if (!done) return true;
        const Job::Outcome& o = job->outcome();
        if (!o.status.ok()) {
          if (!write(SseEvent(ErrorJson(WorkerError(o))))) return false;
        } else {
          const char* finish = FinishReason(o.ended_by_model, o.stop_string, o.answer.stop_reason);
          json last = r.chat ? ChatChunkJson(rid, nullptr, nullptr, finish, usage_null)
                             : TextChunkJson(rid, "", finish, usage_null);
          if (r.impress.report) {
            last["impress_report"] = RequestReportJson(o.answer.report);
            last["impress_report"]["stop_reason"] = o.answer.stop_reason;
          }
          if (!write(SseEvent(last))) return false;
          if (r.include_usage) {
            const Usage usage{o.answer.report.n_prompt, int(o.answer.tokens.size()), o.answer.report.n_matched};
            if (!write(SseEvent(UsageChunkJson(rid, r.chat, usage)))) return false;
          }
        }
        if (!write(std::string(kSseDone))) return false;
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->cancel.store(true);
      });
}

Server::Server(ChatSession& session, ServeOptions options) :
    impl_(std::make_unique<Impl>(session, std::move(options))) {
  impl_->Routes();
  const size_t n_threads = impl_->opts.max_queue + 8;  // every queued request holds a thread while it waits
  impl_->http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  impl_->http.set_payload_max_length(impl_->opts.max_body_bytes);
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
