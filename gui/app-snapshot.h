// AppSnapshot: everything the GUI draws, as one immutable value the worker publishes
// (gui/worker.h). The UI thread never touches the ChatSession or the store: it reads the latest
// snapshot and sends commands.
//
// Thread contract: a published snapshot is never modified again (shared_ptr<const AppSnapshot>);
// any thread may read it. Heavy parts (request records with their importance matrices) are
// shared between consecutive snapshots through shared_ptr<const ...>, so publishing while tokens
// stream copies only the chat text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/pipeline/impress-pipeline.h"
#include "engine/pipeline/report.h"
#include "store/prefix-store.h"

namespace impress::gui {

// The knobs of the Settings panel. They take effect on the next question; budgets and the
// policy are applied to the store when the worker receives them.
struct TuningSettings {
  PipelineSettings pipeline;          // system, keep, alpha, probe heads, sinks, recent
  double device_budget_mb = 256;
  double host_budget_mb = 1024;
  double ssd_budget_mb = 16384;
  store::PolicyKind policy = store::PolicyKind::kImpress;
  int reorder_interval_min = 10;      // applied when the store is opened (next start)
  int max_tokens = 256;
  float temperature = 0.0f;           // 0 = greedy
  int fidelity_tokens = 8;            // greedy tokens compared by "ask again" against full KV
};

enum class WorkerPhase { kStarting, kLoading, kIdle, kPrefill, kDecoding, kFidelity, kStoring, kFailed };
const char* PhaseName(WorkerPhase p);

// One finished (or running) request, with everything the inspector panels need.
struct RequestRecord {
  int id = 0;                         // 1, 2, ... in order of asking
  std::string question;
  std::string label;                  // "#3 impress a=0.6 r=0.25" for legends
  RequestReport report;
  std::vector<std::string> prefix_pieces;  // token text of the matched prefix (importance x axis)
  int chunk_tokens = 64;              // store chunk size: heatmap boundaries
  double tokens_per_s = 0;            // decode speed
  double wall_ms = 0;                 // whole answer
  bool has_fidelity = false;
  FidelityReport fidelity;            // filled by "ask again" (reports inside are not drawn)
  store::StoreStats store_after;      // store counters after the request (tier history)
};

struct ChatEntry {
  std::string role;                   // "user", "assistant", "error", "info"
  std::string text;
  std::shared_ptr<const RequestRecord> request;  // assistant turns: the request that produced it
  bool streaming = false;
  bool stopped = false;
};

struct DocumentEntry {
  std::string path, name;
  uint64_t bytes = 0;
  int n_tokens = 0;
  bool attached = true;               // part of the conversation's context
  std::string residency;              // "not cached", "SSD", "host+SSD", ... (from the last request)
};

struct AppSnapshot {
  uint64_t version = 0;               // increases with every publish
  uint64_t commands_done = 0;         // commands the worker has finished (script `wait`)
  WorkerPhase phase = WorkerPhase::kStarting;
  std::string status;                 // one line for the status bar
  double progress = -1;               // 0..1 while loading or prefilling; -1 when none
  std::string model_name;
  int n_ctx = 0;
  int n_layer = 0;
  std::string store_dir;              // empty: no store
  std::vector<ChatEntry> chat;
  std::vector<DocumentEntry> documents;
  std::vector<std::shared_ptr<const RequestRecord>> requests;  // oldest first (bounded history)
  store::StoreStats store;            // latest counters
  TuningSettings settings;            // what the next question will use
  std::vector<std::string> messages;  // errors and notices for the user (newest last, the last 50)
  uint64_t messages_total = 0;        // messages ever posted (messages holds the newest)
  int context_tokens = 0;             // tokens of the current conversation prefix (documents + turns)
};

}  // namespace impress::gui
