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
  std::string api_key;
  size_t max_queue = 8;
  double max_body_mb = 8;
  double timeout_s = 300;
  int max_tokens = 512;
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
  so.api_key = a.api_key;
  if (so.api_key.empty()) {
    const char* env = std::getenv("IMPRESS_API_KEY");
    if (env) so.api_key = env;
  }
  so.model_id = serve::ModelId(ResolveModelPath(c));
  so.max_queue = a.max_queue;
  so.max_body_bytes = size_t(a.max_body_mb * (1 << 20));
  so.request_timeout_s = a.timeout_s;
  so.default_max_tokens = a.max_tokens;

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
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' (default: $IMPRESS_API_KEY)");
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
