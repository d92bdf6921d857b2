// ChatSession: one conversation over attached documents, answered through the IMPRESS pipeline
// with the tiered prefix KV store. What the terminal chat, `impress generate` and the GUI's
// worker thread drive. Each answer's prefix (documents, earlier turns) and the answer itself
// are stored, so the next question and the next run of the program reuse them.
//
// Thread contract: requires external synchronization (one thread drives a session); the
// on_token callback runs on that thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "chat/conversation.h"
#include "engine/compute/sampler.h"
#include "engine/runtime/model-context.h"
#include "pipeline/fidelity.h"
#include "pipeline/impress-pipeline.h"
#include "store/prefix-store.h"

namespace impress {

struct ChatSessionOptions {
  std::string model_path;
  ModelContextOptions model;
  std::string store_dir;  // empty: no store (every request recomputes)
  uint64_t device_bytes = 256ull << 20;
  uint64_t host_bytes = 1ull << 30;
  uint64_t ssd_bytes = 16ull << 30;
  int probe_heads_stored = 3;                       // probe keys are kept for the KV heads these query heads use
  std::optional<store::KVEncoding> probe_encoding;  // probe keys at rest (nullopt: as the KV)
  std::chrono::milliseconds reorder_interval = std::chrono::minutes(10);
  // How long to wait for another program to close the store before refusing (0: at once).
  std::chrono::milliseconds store_lock_wait{0};
  store::TeamOptions team;  // the team KV tier (off unless team.url is given)
};

struct AskOptions {
  PipelineSettings pipeline;
  SamplerOptions sampling;
  RepetitionGuardOptions repetition;  // ends an answer that has fallen into a loop
  int max_tokens = 256;
  bool raw = false;      // no chat template
  bool remember = true;  // add the question and answer to the conversation
  bool store = true;     // write the new KV to the store afterwards
  // Compute the KV of the answer's last token too (a follow-up turn attends to it). A one-shot
  // answer (`impress generate`) skips that step: nothing will read it.
  bool feed_last = true;
  // The prompt holds a private document: the team KV tier is neither asked nor published to.
  // Ask sets it when the conversation has a private document.
  bool private_documents = false;
  std::function<bool(const std::string& piece)> on_text;  // streamed text; false stops
  ProgressFn on_prefill_progress;
  const std::atomic<bool>* cancel = nullptr;
};

struct ChatAnswer {
  std::string text;
  std::vector<int32_t> tokens;  // generated, a stop token included when hit
  bool stopped_by_user = false;
  // Why the answer ended: "end" (the model ended its turn), "max_tokens", "repetition" (the
  // guard found a loop), "context" (the context is full) or "user".
  std::string stop_reason = "max_tokens";
  RequestReport report;  // prefill report plus decode numbers
};

class ChatSession {
 public:
  static Result<std::unique_ptr<ChatSession>> Open(const ChatSessionOptions& options,
                                                   const ProgressFn& load_progress = {});
  ~ChatSession();

  Result<ChatAnswer> Ask(const std::string& question, const AskOptions& options);
  // Answers an already built prompt (Conversation::Build of any conversation, e.g. a request's
  // messages): prefill through the pipeline (matching the store on prompt.n_prefix tokens),
  // decode, store the KV. The session's own conversation is neither read nor changed
  // (options.remember is ignored). What Ask runs after building its prompt.
  Result<ChatAnswer> AskPrompt(const PromptTokens& prompt, const AskOptions& options);
  // The same question with the full prefix KV: agreement of first token, KL, continuation.
  Result<FidelityReport> Fidelity(const std::string& question, const AskOptions& options, int n_continue);

  Conversation& conversation() { return conversation_; }
  ModelContext& context() { return *ctx_; }
  store::PrefixStore* store() { return store_.get(); }
  ImpressPipeline& pipeline() { return *pipeline_; }

 private:
  ChatSession() = default;
  std::unique_ptr<ModelContext> ctx_;
  std::unique_ptr<store::PrefixStore> store_;
  std::unique_ptr<ImpressPipeline> pipeline_;
  Conversation conversation_;
};

}  // namespace impress
