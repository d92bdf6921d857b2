// impress bench engine|store [--json]: the benchmarks, each printing a table and, with --json,
// one JSON object with its numbers. Not tests: the numbers are for people and the README.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "engine/compute/engine-bench.h"
#include "engine/model/model-loader.h"

namespace impress::app {
namespace {

void PrintJsonOrTable(bool json, const nlohmann::json& j) {
  if (json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::cout << fmt::format("{:<24} {}\n", it.key(), it.value().dump());
  }
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CommonOptions* common, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks (engine speed, store bandwidth)");
  bench->require_subcommand(1);

  struct EngineArgs {
    bool json = false;
    EngineBenchOptions opts;
  };
  auto ea = std::make_shared<EngineArgs>();
  CLI::App* engine = bench->add_subcommand("engine", "prefill and decode speed against OpenBLAS sgemm");
  AddCommonOptions(engine, common);
  engine->add_flag("--json", ea->json, "print JSON");
  engine->add_option("--short", ea->opts.n_prefill_short, "short prefill length")->check(CLI::Range(1, 1 << 16));
  engine->add_option("--long", ea->opts.n_prefill_long, "long prefill length")->check(CLI::Range(1, 1 << 16));
  engine->add_option("--decode", ea->opts.n_decode, "decode tokens")->check(CLI::Range(1, 1 << 16));
  engine->add_option("--repeats", ea->opts.repeats, "runs per prefill size (best kept)")->check(CLI::Range(1, 100));
  engine->callback([=] {
    ConfigureLogging(*common);
    Result<Model> model = Status::Internal("not loaded");
    {
      ProgressBar bar("loading model");
      model = LoadModel(ResolveModelPath(*common), bar.AsFn(), LoadOptions{.n_threads = common->threads});
    }
    if (!model.ok()) {
      spdlog::error("{}", model.status().ToString());
      *exit_code = 1;
      return;
    }
    EngineBenchOptions opts = ea->opts;
    opts.n_threads = common->threads;
    ProgressBar bar("benchmark");
    opts.progress = bar.AsFn();
    auto r = RunEngineBenchmark(*model, opts);
    bar.Finish();
    if (!r.ok()) {
      spdlog::error("{}", r.status().ToString());
      *exit_code = 1;
      return;
    }
    PrintJsonOrTable(ea->json, nlohmann::json{
                                   {"model", model->config.name},
                                   {"threads", r->n_threads},
                                   {"prefill_tokens_short", r->n_prefill_short},
                                   {"prefill_tokens_long", r->n_prefill_long},
                                   {"prefill_tok_s_512", r->prefill_tok_s_512},
                                   {"prefill_tok_s_4096", r->prefill_tok_s_4096},
                                   {"decode_tok_s", r->decode_tok_s},
                                   {"prefill_gflops", r->prefill_gflops},
                                   {"sgemm_gflops", r->sgemm_gflops},
                                   {"prefill_vs_sgemm", r->prefill_vs_sgemm},
                                   {"peak_rss_mb", r->peak_rss_mb},
                                   {"weights_mb", r->weights_mb},
                                   {"kv_cache_mb", r->kv_cache_mb},
                                   {"rss_vs_weights_kv", r->peak_rss_mb / std::max(1.0, r->weights_mb + r->kv_cache_mb)},
                               });
  });
}

}  // namespace impress::app
