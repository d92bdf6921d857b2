// AppSnapshot: everything the GUI draws, as one immutable value the worker publishes
// (gui/worker.h). The UI thread never touches the ChatSession or the store: it reads the latest
// snapshot and sends commands.
//
// Thread contract: a published snapshot is never modified again (shared_ptr<const AppSnapshot>);
// any thread may read it. Heavy parts (request records with their importance matrices) are
// shared between consecutive snapshots through shared_ptr<const ...>, so publishing while tokens
// stream copies only the chat text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/compute/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "pipeline/fidelity.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/report.h"
#include "store/prefix-store.h"

namespace impress::gui {

// The knobs of the Settings panel. They take effect on the next question; budgets and the
// policy are applied to the store when the worker receives them.
struct TuningSettings {
  PipelineSettings pipeline;  // system, keep, alpha, probe heads, sinks, recent
  double device_budget_mb = 256;
  double host_budget_mb = 1024;
  double ssd_budget_mb = 16384;
  store::PolicyKind policy = store::PolicyKind::kImpress;
  int reorder_interval_min = 10;  // background reorder period (0: only "reorder now")
  int max_tokens = 256;
  // Answer sampling. Until the user sets it (user_set), it follows the loaded model's
  // recommendation, else ChatSamplerDefaults(); temperature 0 is greedy.
  struct Sampling {
    float temperature = 0.7f;
    int top_k = 40;
    float top_p = 0.9f;
    float min_p = 0.05f;
    bool user_set = false;
  } sampling;
  int fidelity_tokens = 8;  // greedy tokens compared by "ask again" against full KV
};

// The knobs a chat starts from for a model: its recommended sampling over ChatSamplerDefaults().
TuningSettings::Sampling ModelSampling(const GenerationDefaults& model);
// What an answer samples with.
SamplerOptions ToSamplerOptions(const TuningSettings::Sampling& s);

// A budget knob (MiB, negative read as 0) in bytes.
inline uint64_t MibBytes(double mb) { return uint64_t(std::max(0.0, mb) * double(1 << 20)); }

enum class WorkerPhase { kStarting, kLoading, kIdle, kIngesting, kPrefill, kDecoding, kFidelity, kStoring, kFailed };
const char* PhaseName(WorkerPhase p);

// One finished (or running) request, with everything the inspector panels need.
struct RequestRecord {
  int id = 0;  // 1, 2, ... in order of asking
  std::string question;
  std::string label;  // "#3 impress a=0.6 r=0.25" for legends
  RequestReport report;
  std::vector<std::string> prefix_pieces;  // token text of the matched prefix (importance x axis)
  int chunk_tokens = 64;                   // store chunk size: heatmap boundaries
  double tokens_per_s = 0;                 // decode speed
  double wall_ms = 0;                      // whole answer
  std::string stop_reason;                 // ChatAnswer::stop_reason: end, max_tokens, repetition, context, user
  bool has_fidelity = false;
  FidelityReport fidelity;            // filled by "ask again" (reports inside are not drawn)
  std::vector<std::string> passages;  // retrieval mode: the passages the prompt carried ("name #k")
  store::StoreStats store_after;      // store counters after the request (tier history)
};

struct ChatEntry {
  std::string role;  // "user", "assistant", "error", "info"
  std::string text;
  std::shared_ptr<const RequestRecord> request;  // assistant turns: the request that produced it
  bool streaming = false;
  bool stopped = false;
  bool saved = false;  // reopened from the saved conversation (no request record)
};

struct DocumentEntry {
  std::string path, name;
  uint64_t bytes = 0;
  int n_tokens = 0;
  bool attached = true;   // part of the conversation's context
  std::string residency;  // "not cached", "SSD 1200 / host 0 / device 0 tokens", ...
  // Where its KV is, from the store (refreshed after requests and cache commands): tokens of
  // [span_begin, span_end) of the context prefix held by each tier (device and host also on SSD).
  int span_begin = -1, span_end = -1;  // -1: not attached or not known
  uint64_t tokens_cached = 0, tokens_device = 0, tokens_host = 0;
  bool pinned = false;
  bool is_private = false;  // never shared through the team KV tier
};

// One node of the store's radix tree, for the tree panel (pre-order: parents first).
struct TreeRow {
  int parent = -1;  // index in rows; -1 under the root
  int depth = 0;
  uint64_t start = 0, n_tokens = 0, kv_bytes = 0, hits = 0;
  double score = 0;        // the cache policy's priority
  double importance = -1;  // mean reported token importance; -1: never reported
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0;
  bool pinned = false, locked = false;
  std::string label;  // the node's first tokens as text
};
struct TreeView {
  std::vector<TreeRow> rows;
  bool truncated = false;
};

// A saved conversation (the conversation list).
struct ConversationEntry {
  int64_t id = 0;
  std::string title;
  int64_t updated = 0;  // unix seconds
  int n_turns = 0, n_documents = 0;
  bool retrieval = false;
};

struct AppSnapshot {
  uint64_t version = 0;        // increases with every publish
  uint64_t commands_done = 0;  // commands the worker has finished (script `wait`)
  WorkerPhase phase = WorkerPhase::kStarting;
  std::string status;    // one line for the status bar
  double progress = -1;  // 0..1 while loading or prefilling; -1 when none
  std::string model_name;
  std::string model_path;                  // the file or folder loaded
  uint64_t model_bytes = 0;                // its estimated RAM (weights + KV for its context; gui/model-info.h)
  std::vector<std::string> recent_models;  // most recent first (the model picker)
  int n_ctx = 0;
  int n_layer = 0;
  uint64_t kv_bytes_per_token = 0;  // the model's fp16 K and V per token, all layers
  std::string store_dir;            // empty: no store
  std::vector<ChatEntry> chat;
  // Entries are only appended, except when the chat is cut (regenerate, another conversation):
  // then chat_epoch increases and the first chat_kept entries are the unchanged ones.
  uint64_t chat_epoch = 0;
  size_t chat_kept = 0;
  std::vector<DocumentEntry> documents;
  std::vector<std::shared_ptr<const RequestRecord>> requests;  // oldest first (bounded history)
  store::StoreStats store;                                     // latest counters
  TuningSettings settings;                                     // what the next question will use
  std::vector<std::string> messages;     // errors and notices for the user (newest last, the last 50)
  uint64_t messages_total = 0;           // messages ever posted (messages holds the newest)
  int context_tokens = 0;                // tokens of the current conversation prefix (documents + turns)
  std::shared_ptr<const TreeView> tree;  // the store's radix tree (null: no store)
  // Saved conversations (empty db_path: not saved).
  std::string db_path;
  std::vector<ConversationEntry> conversations;  // most recent first
  int64_t conversation_id = 0;                   // the open one
  std::string conversation_title;
  bool retrieval = false;  // retrieve passages per question (FTS5 bm25) instead of whole documents
};

}  // namespace impress::gui
