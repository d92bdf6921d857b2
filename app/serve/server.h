// Server: the HTTP layer of `impress serve`, an OpenAI-compatible endpoint over one chat
// session. Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions,
// GET /metrics. Requests are validated on the HTTP threads (app/serve/openai-api.h: nothing
// reaches the model or the store from a request that failed), then run one at a time by the
// model worker (app/serve/model-worker.h); a full queue answers 503 with Retry-After.
//
// Thread contract: Start, Wait and Stop may be called from any thread; Stop is what a signal
// watcher calls. The session is used only by the worker once Start returned.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "chat/chat-session.h"

namespace impress::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (port() tells which)
  std::string api_key;  // empty: no key required
  std::string model_id;
  size_t max_queue = 8;              // requests waiting beside the running one
  size_t max_body_bytes = 8u << 20;  // larger bodies: 413
  double request_timeout_s = 300;    // a generation still running then is stopped
  int default_max_tokens = 512;      // when a request names none
  AskOptions defaults;               // IMPRESS and sampling settings from the command line
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
