// Server: the HTTP layer of `impress serve`, an OpenAI-compatible endpoint over one chat
// session. Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
// GET /metrics. Before any body is read (app/serve/http-connection.h, request-checks.h): the
// Host header must name this server, a browser's Origin must be allowed, the API key must be
// given (every route but a plain /health), and a body must be JSON within the size limit; the
// headers and the body each have a deadline, and each client address a connection limit.
// Requests are then validated on the HTTP threads (app/serve/openai-api.h: nothing reaches the
// model or the store from a request that failed) and run one at a time by the model worker
// (app/serve/model-worker.h); a full queue answers 503 with Retry-After. With several API keys,
// a request reuses only stored prefixes its own key sent (app/serve/prefix-scopes.h), unless
// the cache is shared.
//
// Thread contract: Start, Wait and Stop may be called from any thread; Stop is what a signal
// watcher calls. The session is used only by the worker once Start returned.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "app/serve/model-worker.h"
#include "base/status.h"
#include "chat/chat-session.h"

namespace impress::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (port() tells which)
  std::vector<std::string> api_keys;  // empty: no key required
  std::string model_id;
  size_t max_queue = 8;              // requests waiting beside the running one
  size_t max_body_bytes = 8u << 20;  // larger bodies: 413, read no further
  double request_timeout_s = 300;    // a generation still running then is stopped
  int default_max_tokens = 512;      // when a request names none
  // Host names besides the bound address (and localhost when it is loopback) that requests may
  // name; browser origins whose requests are served ("*": any).
  std::vector<std::string> allowed_hosts, allowed_origins;
  // Every client may reuse every stored prefix, whatever its key (the usage and the speed then
  // tell one client what others sent). Without keys there is one client and it always is.
  bool shared_cache = false;
  double header_timeout_s = 10;            // request line and headers, from their first byte: 408
  double body_timeout_s = 60;              // the body, from the end of the headers: 408
  double idle_timeout_s = 5;               // a kept-alive connection between requests
  size_t max_connections_per_client = 16;  // more from one address: 429
  AskOptions defaults;                     // IMPRESS and sampling settings from the command line
  WorkerHooks test_hooks;                  // tests only: hold the worker at known points
};

class Server {
 public:
  Server(ChatSession& session, ServeOptions options);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the address and starts serving on background threads. IOError when it cannot bind.
  Status Start();
  int port() const;
  // Blocks until Stop.
  void Wait();
  // Graceful: refuses new requests, cancels queued and running generations (their clients get
  // what was generated, or 503), lets the store write finish, then closes the listener. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace impress::serve
