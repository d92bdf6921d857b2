// impress serve: the OpenAI-compatible local server (app/serve/) over one chat session, with
// the same IMPRESS settings and KV store as the other commands. SIGINT/SIGTERM stop it
// gracefully: running generations are cancelled, the store write finishes, the store closes.
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "app/serve/openai-api.h"
#include "app/serve/server.h"

namespace impress::app {
namespace {

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;
  size_t max_queue = 8;
  double max_body_mb = 8;
  double timeout_s = 300;
  int max_tokens = 512;
  std::vector<std::string> allowed_hosts, allowed_origins;
  bool shared_cache = false;
  double header_timeout_s = 10, body_timeout_s = 60, idle_timeout_s = 5;
  size_t max_connections_per_client = 16;
};

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

int RunServe(const CommonOptions& c, const ServeArgs& a) {
  // The handler only records the signal (any thread may take it: OpenBLAS starts threads before
  // main); a watcher thread stops the server. A client that hangs up must not kill the server
  // with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);

  serve::ServeOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_keys = a.api_keys;
  if (so.api_keys.empty()) {
    const char* env = std::getenv("IMPRESS_API_KEY");
    if (env && *env) so.api_keys.push_back(env);
  }
  so.model_id = serve::ModelId(ResolveModelPath(c));
  so.max_queue = a.max_queue;
  so.max_body_bytes = size_t(a.max_body_mb * (1 << 20));
  so.request_timeout_s = a.timeout_s;
  so.default_max_tokens = a.max_tokens;
  so.allowed_hosts = a.allowed_hosts;
  so.allowed_origins = a.allowed_origins;
  so.shared_cache = a.shared_cache;
  so.header_timeout_s = a.header_timeout_s;
  so.body_timeout_s = a.body_timeout_s;
  so.idle_timeout_s = a.idle_timeout_s;
  so.max_connections_per_client = a.max_connections_per_client;

  ProgressBar bar("loading model");
  auto session = ChatSession::Open(SessionOptionsFor(c), bar.AsFn());
  bar.Finish();
  if (!session.ok()) {
    spdlog::error("{}", session.status().ToString());
    return 1;
  }
  so.defaults = AskOptionsFor(c, (*session)->context().tokenizer().generation_defaults());
  int exit_code = 0;
  {
    serve::Server server(**session, so);
    if (Status st = server.Start(); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return 1;
    }
    std::atomic<bool> serving{true};
    std::thread watcher([&] {
      while (serving.load() && g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (g_stop_signal.load() != 0) {
        spdlog::warn("signal {}: stopping (running requests are cancelled)", g_stop_signal.load());
      }
      server.Stop();
    });
    // One line on stdout that scripts wait for: the address is live.
    std::cout << fmt::format("impress serve: {} on http://{}:{}/v1 (KV store: {})", so.model_id, so.host, server.port(),
                             (*session)->store() ? "on" : "off")
              << std::endl;
    server.Wait();
    serving.store(false);
    watcher.join();
  }
  session->reset();  // the store closes consistent before the process exits
  spdlog::info("stopped");
  return exit_code;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, CommonOptions* common, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible local server (chat/completions, completions)");
  AddCommonOptions(cmd, common);
  cmd->add_option("--host", args->host, "address to listen on");
  cmd->add_option("--port", args->port, "port to listen on (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", args->api_keys,
                  "require 'Authorization: Bearer KEY' (repeatable: several clients, each reusing only the prompts "
                  "it sent; default: $IMPRESS_API_KEY)");
  cmd->add_option("--allowed-host", args->allowed_hosts,
                  "a Host name requests may use besides the bound address (repeatable; DNS-rebinding guard)");
  cmd->add_option("--allowed-origin", args->allowed_origins,
                  "a web page origin allowed to call the server, e.g. http://localhost:3000, or * (repeatable)");
  cmd->add_flag("--shared-cache", args->shared_cache,
                "every API key reuses every stored prompt prefix (usage and speed then tell one client what "
                "another sent)");
  cmd->add_option("--header-timeout", args->header_timeout_s, "seconds for a request's line and headers (408)")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--body-timeout", args->body_timeout_s, "seconds for a request's body (408)")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--idle-timeout", args->idle_timeout_s, "seconds a kept-alive connection waits for a request")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--max-connections-per-client", args->max_connections_per_client,
                  "open connections from one address (more: 429)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-queue", args->max_queue, "requests waiting for the model before 503")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-body-mb", args->max_body_mb, "largest request body (MiB; larger: 413)")
      ->check(CLI::Range(0.001, 1024.0));
  cmd->add_option("--timeout", args->timeout_s, "per-request time limit (seconds)")->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--max-tokens", args->max_tokens, "answer tokens when a request names none")
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([=] {
    ConfigureLogging(*common);
    *exit_code = RunServe(*common, *args);
  });
}

}  // namespace impress::app
