#include "app/app-options.h"

#include "app/progress-bar.h"
#include "chat/model-library.h"
#include "pipeline/system-policy.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace impress::app {

namespace {
std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}
std::string Home() { return EnvOr("HOME", "."); }
}  // namespace

void AddCommonOptions(CLI::App* cmd, CommonOptions* o) {
  cmd->add_option("--model", o->model,
                  "GGUF file, Hugging Face folder, or a known model's name (`impress models`; default: the chat "
                  "model when downloaded, else the test model)")
      ->transform(CLI::Validator(
          [](std::string& text) {
            auto catalog = LoadModelCatalog(CatalogPath(AssetsDir()));
            if (!catalog.ok()) return std::string();  // a path as given; loading it says what is wrong
            auto path = ResolveModelArgument(text, *catalog, ModelsDir());
            if (!path.ok()) return path.status().message();
            text = *path;
            return std::string();
          },
          "PATH|NAME"));
  cmd->add_option("--store", o->store_dir, "KV store directory (default: $XDG_DATA_HOME/impress/store)");
  cmd->add_option("--threads", o->threads, "compute threads")->check(CLI::Range(1, 256));
  std::vector<std::string> systems;
  for (SystemKind k : AllSystems()) systems.push_back(SystemName(k));
  cmd->add_option("--system", o->system, "serving system: " + SystemNames("|"))->check(CLI::IsMember(systems));
  cmd->add_option("--alpha", o->alpha, "IMPRESS similarity threshold exponent (0..2)")->check(CLI::Range(0.0, 8.0));
  cmd->add_option("--keep", o->keep, "keep ratio of prefix tokens (0..1]")->check(CLI::Range(0.001, 1.0));
  cmd->add_option("--keep-mass", o->keep_mass,
                  "keep per layer the fewest prefix tokens holding this share of the attention mass (0: the fixed "
                  "--keep ratio)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--keep-min", o->keep_min, "with --keep-mass: keep at least this share of the prefix")
      ->check(CLI::Range(0.001, 1.0));
  cmd->add_option("--keep-max", o->keep_max, "with --keep-mass: keep at most this share of the prefix")
      ->check(CLI::Range(0.001, 1.0));
  cmd->add_option("--pool", o->pool,
                  "rank each prefix token by the scores of the N tokens around it, so spans are kept whole (0 or 1: "
                  "off; default 7)")
      ->check(CLI::Range(0, kMaxPoolWidth));
  cmd->add_flag("--pool-max,!--pool-sum", o->pool_max,
                "with --pool: the window's largest score (the default) or its sum");
  cmd->add_option("--pool-follow", o->pool_follow,
                  "with --pool: the N tokens after an important token rank with it too (what follows a cue)")
      ->check(CLI::Range(0, kMaxPoolWidth));
  cmd->add_flag("--head-max,!--head-sum", o->head_max,
                "one score per token from the scored heads: the largest share (each head's favourites count) or "
                "the sum");
  cmd->add_option("--dense-layers", o->dense_layers, "the first N layers load every prefix token")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_flag("--cross-layer-prefetch,!--no-cross-layer-prefetch", o->cross_layer_prefetch,
                "IMPRESS: read a layer's likely rows (the previous layer's choice) while that layer computes");
  cmd->add_flag("--predict-next,!--no-predict-next", o->predict_next,
                "IMPRESS: read a layer's likely rows (its probe run early on the previous layer's input) while the "
                "previous layer computes; the layer's own probe still decides");
  cmd->add_flag("--predict-select,!--no-predict-select", o->predict_select,
                "IMPRESS: predicted reads where a layer keeps the predicted rows and does not probe again (when "
                "the prediction's heads agree): its read hides under the previous layer; the answer may differ");
  cmd->add_option("--select-budget", o->select_budget,
                  "read groups a layer keeps: as many tokens as the keep ratio (tokens, the default) or as much "
                  "importance as token-by-token selection keeps (mass: more tokens and bytes)")
      ->check(CLI::IsMember({"mass", "tokens"}));
  cmd->add_flag("--attend-while-reading,!--no-attend-while-reading", o->attend_while_reading,
                "start a layer's attention on the selected rows already read while the rest is still read "
                "(off by default: on two cores it was slower)");
  cmd->add_option("--probe-heads", o->probe_heads, "probe query heads per layer")->check(CLI::Range(1, 1024));
  cmd->add_option("--probe-keys", o->probe_keys,
                  "probe keys at rest: fp16, int8 or int4 (default int4); they rank tokens only. A store's KV is "
                  "matched only under the encoding it was written with")
      ->check(CLI::IsMember({"fp16", "int8", "int4"}));
  cmd->add_option("--sinks", o->sinks, "attention sinks always kept")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--recent", o->recent, "recent prefix tokens always kept")->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--no-store", o->no_store, "do not use the KV store (recompute every prefix)");
  cmd->add_option("--store-wait", o->store_wait_s,
                  "seconds to wait for another program using the store to close it (default: refuse at once)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--backend", o->backend, "compute backend: cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--weights", o->weights,
                  "convert the model's matrices at load: q8_0|q4_k|f16 (default: as stored in the file)");
  cmd->add_option("--device-budget-mb", o->device_budget_mb, "device tier budget (MiB)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--host-budget-mb", o->host_budget_mb, "host tier budget (MiB)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--ssd-budget-mb", o->ssd_budget_mb, "SSD tier budget (MiB)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o->temperature,
                  "sampling temperature (0 = greedy; default: the model's recommendation, else 0.7)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--top-k", o->top_k, "top-k sampling (0 = off; default: the model's, else 40)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "top-p sampling (default: the model's, else 0.9)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", o->min_p, "min-p sampling (0 = off; default: the model's, else 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1 = off; default: the model's, else 1)")
      ->check(CLI::Range(0.5, 5.0));
  cmd->add_option("--seed", o->seed, "sampling seed");
  cmd->add_flag("--raw", o->raw, "no chat template: tokenize the prompt as given");
  cmd->add_option("--team", o->team_url,
                  "share prefix KV with a team through Redis at redis://HOST:PORT (the password never goes here: "
                  "--team-credentials or IMPRESS_TEAM_USER / IMPRESS_TEAM_PASSWORD)");
  cmd->add_option("--team-namespace", o->team_namespace,
                  "the team's namespace on the Redis server (1-64 of A-Z a-z 0-9 . _ -; default: default)");
  cmd->add_option("--team-credentials", o->team_credentials,
                  "file with the Redis user (first line) and password (second line; one line: the password alone)");
  cmd->add_option("--team-reads", o->team_reads,
                  "a prefix only the team holds: read per layer what the request selects, then fill the rest in the "
                  "background (selective, the default; exact: select exactly the tokens the publishing desktop would, "
                  "for its answer at temperature 0, reading more bytes), or fill the whole prefix before the request "
                  "(whole)")
      ->check(CLI::IsMember({"selective", "exact", "whole"}));
  cmd->add_option("--team-ca", o->team_ca,
                  "rediss:// (TLS): PEM CA certificates to verify the server with "
                  "(default: the system's)");
  cmd->add_option("--team-cert", o->team_cert, "rediss:// (TLS): PEM client certificate to present");
  cmd->add_option("--team-key", o->team_key, "rediss:// (TLS): PEM key of the client certificate");
  cmd->add_option("--log-level", o->log_level, "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

void ConfigureLogging(const CommonOptions& o) {
  auto logger = spdlog::stderr_color_mt("impress");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
}

namespace {
std::string FindDefaultModel() {
  if (const char* e = std::getenv("IMPRESS_DEFAULT_MODEL"); e && *e) return e;
  const std::string fallback = ModelsDir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  auto catalog = LoadModelCatalog(CatalogPath(AssetsDir()));
  if (!catalog.ok()) {
    spdlog::warn("{}; trying {}", catalog.status().ToString(), fallback);
    return fallback;
  }
  std::string notice;
  auto path = DefaultModelFile(*catalog, ModelsDir(), &notice);
  if (!notice.empty()) spdlog::warn("{}", notice);
  if (!path.ok()) {
    spdlog::error("{}", path.status().message());
    return fallback;
  }
  return *path;
}
}  // namespace

// Decided once per process, so the notice is said once.
std::string DefaultModelPath() {
  static const std::string path = FindDefaultModel();
  return path;
}

std::string DefaultStoreDir() {
  return EnvOr("IMPRESS_STORE_DIR", EnvOr("XDG_DATA_HOME", Home() + "/.local/share") + "/impress/store");
}

std::string AssetsDir() { return EnvOr("IMPRESS_ASSETS_DIR", IMPRESS_ASSETS_DIR_DEFAULT); }

std::string ResolveModelPath(const CommonOptions& o) { return o.model.empty() ? DefaultModelPath() : o.model; }

std::optional<store::KVEncoding> ProbeEncodingFor(const CommonOptions& c) {
  return c.probe_keys.empty() ? std::nullopt : store::ParseKVEncoding(c.probe_keys);
}

store::TeamOptions TeamOptionsFor(const CommonOptions& c) {
  store::TeamOptions t;
  t.url = c.team_url;
  t.team = c.team_namespace;
  t.credentials_file = c.team_credentials;
  t.selective = c.team_reads != "whole";
  t.publisher_groups = c.team_reads == "exact";
  t.tls = {.ca_file = c.team_ca, .cert_file = c.team_cert, .key_file = c.team_key};
  return t;
}

ChatSessionOptions SessionOptionsFor(const CommonOptions& c) {
  ChatSessionOptions o;
  o.model_path = ResolveModelPath(c);
  o.model = ModelContextOptions{.n_threads = c.threads, .backend = c.backend, .weights = c.weights};
  o.store_dir = c.no_store ? "" : (c.store_dir.empty() ? DefaultStoreDir() : c.store_dir);
  o.store_lock_wait = std::chrono::milliseconds(int64_t(c.store_wait_s * 1000));
  o.device_bytes = uint64_t(c.device_budget_mb * (1 << 20));
  o.host_bytes = uint64_t(c.host_budget_mb * (1 << 20));
  o.ssd_bytes = uint64_t(c.ssd_budget_mb * (1 << 20));
  o.probe_heads_stored = c.probe_heads;
  o.probe_encoding = ProbeEncodingFor(c);
  o.team = TeamOptionsFor(c);
  return o;
}

Result<std::unique_ptr<ModelContext>> LoadModelShowingProgress(const CommonOptions& c) {
  ProgressBar bar("loading model");
  return ModelContext::Load(ResolveModelPath(c),
                            ModelContextOptions{.n_threads = c.threads, .backend = c.backend, .weights = c.weights},
                            bar.AsFn());
}

SamplerOptions SamplingFor(const CommonOptions& c, const GenerationDefaults& model) {
  SamplerOptions o = ChatSamplerDefaults();
  auto pick = [](const auto& cli, const auto& from_model, auto* out) {
    if (cli) {
      *out = *cli;
    } else if (from_model) {
      *out = *from_model;
    }
  };
  pick(c.temperature, model.temperature, &o.temperature);
  pick(c.top_k, model.top_k, &o.top_k);
  pick(c.top_p, model.top_p, &o.top_p);
  pick(c.min_p, model.min_p, &o.min_p);
  pick(c.repeat_penalty, model.repeat_penalty, &o.repeat_penalty);
  o.seed = c.seed;
  return o;
}

AskOptions AskOptionsFor(const CommonOptions& c, const GenerationDefaults& model) {
  AskOptions o;
  SystemKind sys = SystemKind::kImpress;
  ParseSystem(c.system, &sys);  // CLI11 already checked the name
  o.pipeline.system = sys;
  o.pipeline.keep = c.keep;
  o.pipeline.keep_mass = c.keep_mass;
  o.pipeline.keep_min = c.keep_min;
  o.pipeline.keep_max = c.keep_max;
  o.pipeline.pool = c.pool;
  o.pipeline.pool_max = c.pool_max;
  o.pipeline.pool_follow = c.pool_follow;
  o.pipeline.head_max = c.head_max;
  o.pipeline.dense_layers = c.dense_layers;
  o.pipeline.cross_layer_prefetch = c.cross_layer_prefetch;
  o.pipeline.predict_next = c.predict_next;
  o.pipeline.predict_select = c.predict_select;
  (void)ParseGroupBudget(c.select_budget, &o.pipeline.select_budget);  // the flag's check allows only the names
  o.pipeline.attend_while_reading = c.attend_while_reading;
  o.pipeline.alpha = c.alpha;
  o.pipeline.probe_heads = c.probe_heads;
  o.pipeline.sinks = c.sinks;
  o.pipeline.recent = c.recent;
  o.sampling = SamplingFor(c, model);
  o.raw = c.raw;
  return o;
}

}  // namespace impress::app
