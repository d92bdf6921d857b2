// Options shared by every `impress` subcommand (docs/design.md section 8) and the helpers that turn
// them into engine settings. Filled by CLI11 on the main thread before any work starts.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "chat/chat-session.h"

namespace impress::app {

struct CommonOptions {
  std::string model;      // GGUF file or Hugging Face folder (a known name resolved at parse); empty = the default
  std::string store_dir;  // KV store directory; empty = $XDG_DATA_HOME/impress/store
  int threads = 2;
  std::string system = "impress";  // a system's name in the registry (pipeline/system-policy.h)
  float alpha = 0.6f;
  float keep = 0.25f;
  // Keep by attention mass (PipelineSettings::keep_mass, keep_min, keep_max); mass 0: the fixed keep.
  float keep_mass = PipelineSettings{}.keep_mass;
  float keep_min = PipelineSettings{}.keep_min;
  float keep_max = PipelineSettings{}.keep_max;
  int pool = PipelineSettings{}.pool;  // score pooling window (PipelineSettings::pool, pool_max)
  bool pool_max = PipelineSettings{}.pool_max;
  int pool_follow = PipelineSettings{}.pool_follow;  // PipelineSettings::pool_follow, head_max and
  bool head_max = PipelineSettings{}.head_max;       // dense_layers
  int dense_layers = PipelineSettings{}.dense_layers;
  bool cross_layer_prefetch = PipelineSettings{}.cross_layer_prefetch;
  bool predict_next = PipelineSettings{}.predict_next;
  bool predict_select = PipelineSettings{}.predict_select;
  std::string select_budget = GroupBudgetName(PipelineSettings{}.select_budget);  // tokens | mass
  bool attend_while_reading = PipelineSettings{}.attend_while_reading;
  int probe_heads = 3;
  // --probe-keys: fp16 | int8 | int4 (store/kv-codec.h); "" as the KV. int4 by default: a quarter
  // of fp16's bytes, and on the trained model its selections answered as fp16's did.
  std::string probe_keys = "int4";
  int sinks = 4;
  int recent = 32;
  bool no_store = false;    // recompute everything, store nothing
  double store_wait_s = 0;  // wait this long for another program to close the store (0: refuse at once)
  std::string backend = "cpu";
  std::string weights;  // --weights: "" as stored, q8_0 | q4_k | f16 converted at load
  double device_budget_mb = 256;
  double host_budget_mb = 1024;
  double ssd_budget_mb = 16384;
  // Sampling: unset = the model's recommendation (GGUF general.sampling.*, generation_config.json),
  // else ChatSamplerDefaults(). --temperature 0 is greedy.
  std::optional<float> temperature, top_p, min_p, repeat_penalty;
  std::optional<int> top_k;
  uint64_t seed = 42;
  bool raw = false;  // no chat template
  std::string log_level = "warn";
  // The team KV tier (store/prefix-store.h TeamOptions): off unless --team is given.
  std::string team_url;                      // --team redis://host:port
  std::string team_namespace = "default";    // --team-namespace
  std::string team_credentials;              // --team-credentials FILE (else IMPRESS_TEAM_USER / _PASSWORD)
  std::string team_reads = "selective";      // --team-reads selective|exact|whole (TeamOptions)
  std::string team_ca, team_cert, team_key;  // --team-ca / --team-cert / --team-key (rediss://)
};

// Adds the common options to a subcommand.
void AddCommonOptions(CLI::App* cmd, CommonOptions* opts);

// Applies --log-level to spdlog (logs go to stderr).
void ConfigureLogging(const CommonOptions& opts);

// The default model path: $IMPRESS_DEFAULT_MODEL, else the model library's default (the chat
// model when it is downloaded, else the test model, with a one-line notice how to get the better
// one: chat/model-library.h).
std::string DefaultModelPath();

// $IMPRESS_STORE_DIR, else $XDG_DATA_HOME/impress/store (~/.local/share/impress/store).
std::string DefaultStoreDir();

// The assets folder: $IMPRESS_ASSETS_DIR, else the source tree's assets/ (compiled in).
std::string AssetsDir();

// The model to use: --model, else the default. Says how to get the default if it is missing.
std::string ResolveModelPath(const CommonOptions& opts);

// The chat session the options describe: model, backend, store directory (none with
// --no-store) and tier budgets.
ChatSessionOptions SessionOptionsFor(const CommonOptions& opts);
// --team, --team-namespace, --team-credentials as the store's team options.
store::TeamOptions TeamOptionsFor(const CommonOptions& opts);
// --probe-keys as the store's probe_encoding (nullopt: as the KV).
std::optional<store::KVEncoding> ProbeEncodingFor(const CommonOptions& opts);

// Loads the model the options name (--model, --threads, --backend) with a progress bar on stderr.
Result<std::unique_ptr<ModelContext>> LoadModelShowingProgress(const CommonOptions& opts);

// The sampling the options describe: each setting from the command line when given, else the
// model's recommendation, else ChatSamplerDefaults(); --seed always.
SamplerOptions SamplingFor(const CommonOptions& opts, const GenerationDefaults& model);

// The per-request settings the options describe: system, keep, alpha, probe heads, sinks,
// recent, sampling (SamplingFor with the model's recommendation), raw. max_tokens and cancel
// stay at their defaults.
AskOptions AskOptionsFor(const CommonOptions& opts, const GenerationDefaults& model = {});

}  // namespace impress::app
