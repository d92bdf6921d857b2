// impress bench engine|store|pipeline|kernels|workload [--json]: the benchmarks, each printing a table
// and, with --json, one JSON object with its numbers, always with the CPU model they were measured
// on. Not tests: the numbers are for people and the README.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "base/cpu-info.h"
#include "bench/cuda-bench.h"
#include "bench/engine-bench.h"
#include "bench/kernel-bench.h"
#include "bench/pipeline-bench.h"
#include "bench/store-bench.h"
#include "chat/report-json.h"
#include "engine/compute/cpu-backend.h"
#include "engine/model/model-loader.h"
#include "engine/model/random-model.h"
#include "engine/runtime/model-context.h"

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

nlohmann::json SummaryJson(const SystemSummary& s) {
  const TtftBreakdown& b = s.mean_breakdown;
  return {{"system", s.system},
          {"requests", s.n_requests},
          {"mean_ttft_ms", s.mean_ttft_ms},
          {"p50_ttft_ms", s.p50_ttft_ms},
          {"p99_ttft_ms", s.p99_ttft_ms},
          {"probe_share", s.probe_share},
          {"unhidden_io_share", s.unhidden_io_share},
          {"mean_ssd_bytes", s.mean_ssd_bytes},
          {"mean_kv_bytes", s.mean_kv_bytes},
          {"first_token_agreement", s.first_token_agreement},
          {"mean_kl", s.mean_kl},
          {"max_kl", s.max_kl},
          {"mean_read_amplification", s.mean_read_amplification},
          {"mean_chunks_ssd", s.mean_chunks_ssd},
          {"mean_ssd_reads", s.mean_ssd_reads},
          {"layers_passed", s.layers_passed},
          {"breakdown_unaccounted_mean", s.mean_breakdown_error},
          {"breakdown_unaccounted_max", s.max_breakdown_error},
          {"breakdown_ms", TtftBreakdownJson(b)},
          {"probe_score_ms", b.probe_score_ms}};
}

// The CPU engine benchmark, printed; the exit status.
int RunCpuEngineBench(const Model& model, const ForwardTimingOptions& forward, int n_threads, bool json) {
  ProgressBar bar("benchmark");
  std::error_code ec;
  const auto file_bytes =
      std::filesystem::is_regular_file(model.path, ec) ? std::filesystem::file_size(model.path, ec) : std::uintmax_t(0);
  const EngineBenchOptions opts{.n_threads = n_threads,
                                .model_file_bytes = ec ? 0.0 : double(file_bytes),
                                .forward = forward,
                                .progress = bar.AsFn()};
  auto r = RunEngineBenchmark(model, opts);
  bar.Finish();
  if (!r.ok()) {
    spdlog::error("{}", r.status().ToString());
    return 1;
  }
  nlohmann::json out{
      {"cpu", CpuModelName()},
      {"model", model.config.name},
      {"threads", r->n_threads},
      {"prefill_tokens_short", r->speed.n_prefill_short},
      {"prefill_tokens_long", r->speed.n_prefill_long},
      {"prefill_tok_s_512", r->speed.prefill_tok_s_short},
      {"prefill_tok_s_4096", r->speed.prefill_tok_s_long},
      {"prefill_tok_s_16", r->prefill_tok_s_16},
      {"prefill_tok_s_32", r->prefill_tok_s_32},
      {"prefill_tok_s_64", r->prefill_tok_s_64},
      {"question_gflops", r->question_gflops},
      {"question_gflops_frac", r->question_gflops_frac},
      {"decode_tok_s", r->speed.decode_tok_s},
      {"decode_cpu_ms_per_token", r->speed.decode_cpu_ms_per_token},
      {"decode_ctx_tokens", r->speed.n_decode_ctx},
      {"decode_tok_s_long_ctx", r->speed.decode_tok_s_long_ctx},
      {"decode_cpu_ms_per_token_long_ctx", r->speed.decode_cpu_ms_per_token_long_ctx},
      {"kernel_path", r->kernel_path},
      {"prefill_gflops", r->prefill_gflops},
      {"sgemm_gflops", r->sgemm_gflops},
      {"prefill_vs_sgemm", r->prefill_vs_sgemm},
      {"peak_rss_mb", r->peak_rss_mb},
      {"weights_mb", r->weights_mb},
      {"kv_cache_mb", r->kv_cache_mb},
      {"kv_cache_tokens", r->speed.n_cache},
      {"rss_vs_weights_kv", r->peak_rss_mb / std::max(1.0, r->weights_mb + r->kv_cache_mb)},
      {"decode_tok_s_8k", r->decode_tok_s_8k},
      {"prefill_tok_s_ctx", r->speed.prefill_tok_s_ctx},
      {"prefill_ctx_vs_short", r->prefill_ctx_vs_short},
      {"attention_gflops_ctx", r->attention_gflops_ctx},
      {"decode_bytes_per_token_ctx", r->decode_bytes_per_token_ctx},
      {"decode_bw_fraction_ctx", r->decode_bw_fraction_ctx},
      {"weights_bytes_per_token", r->weights_bytes_per_token},
      {"decode_bytes_per_token", r->decode_bytes_per_token},
      {"mem_bw_gbs", r->mem_bw_gbs},
      {"decode_bw_fraction", r->decode_bw_fraction},
      {"model_file_mb", r->model_file_mb},
      {"rss_vs_file_kv", r->rss_vs_file_kv},
  };
  if (r->speed.n_decode_ctx == 16384) {  // a 16K document, under the names the docs compare
    out["prefill_tok_s_16k"] = r->speed.prefill_tok_s_ctx;
    out["decode_tok_s_16k"] = r->speed.decode_tok_s_long_ctx;
  }
  PrintJsonOrTable(json, out);
  return 0;
}

// The CUDA engine benchmark, printed; the exit status.
int RunCudaEngineBench(const Model& model, const ForwardTimingOptions& forward, const std::string& gemm, bool json) {
  CudaBenchOptions opts;
  opts.forward = forward;
  if (!gemm.empty()) {
    auto g = ParseCudaGemmPrecision(gemm);
    if (!g.ok()) {
      spdlog::error("{}", g.status().ToString());
      return 2;
    }
    opts.gemm = *g;
  }
  ProgressBar bar("benchmark");
  opts.progress = bar.AsFn();
  auto r = RunCudaEngineBenchmark(model, opts);
  bar.Finish();
  if (!r.ok()) {
    spdlog::error("{}", r.status().ToString());
    return 1;
  }
  if (!json) {
    std::cout << fmt::format("{:<28} {}\n{:<28} {}\n", "host CPU", CpuModelName(), "model", model.config.name)
              << FormatCudaBench(*r);
    return 0;
  }
  std::cout << nlohmann::json{{"cpu", CpuModelName()},
                              {"model", model.config.name},
                              {"device", r->device},
                              {"backend", r->backend},
                              {"prefill_tokens_short", r->speed.n_prefill_short},
                              {"prefill_tokens_long", r->speed.n_prefill_long},
                              {"decode_tokens", r->speed.n_decode},
                              {"prefill_tok_s_short", r->speed.prefill_tok_s_short},
                              {"prefill_tok_s_long", r->speed.prefill_tok_s_long},
                              {"decode_tok_s", r->speed.decode_tok_s},
                              {"decode_ms_per_token", r->speed.decode_ms_per_token},
                              {"prefill_tflops", r->prefill_tflops},
                              {"model_gemm_tflops", r->model_gemm_tflops},
                              {"peak_gemm_tflops", r->peak_gemm_tflops},
                              {"peak_sgemm_tflops", r->peak_sgemm_tflops},
                              {"gemm_efficiency", r->gemm_efficiency},
                              {"prefill_vs_peak", r->prefill_vs_peak},
                              {"weights_mb", r->weights_mb},
                              {"kv_cache_mb", r->kv_cache_mb}}
                   .dump(2)
            << "\n";
  return 0;
}

// impress bench engine: the forward pass's speed on the CPU (against OpenBLAS sgemm) or, with
// --backend cuda, on the GPU (against the card's cuBLAS rate); on a model file or, with --shape,
// on random weights of a known model's shape (speed does not depend on the values).
void RegisterEngineBench(CLI::App* bench, CommonOptions* common, int* exit_code) {
  struct EngineArgs {
    bool json = false;
    std::string shape, gemm;
    ForwardTimingOptions cpu = EngineBenchOptions{}.forward;
    ForwardTimingOptions cuda = CudaBenchOptions{}.forward;
  };
  auto ea = std::make_shared<EngineArgs>();
  CLI::App* engine = bench->add_subcommand(
      "engine", "prefill and decode speed against OpenBLAS sgemm (or, with --backend cuda, the card's cuBLAS rate)");
  AddCommonOptions(engine, common);
  engine->add_flag("--json", ea->json, "print JSON");
  engine->add_option("--shape", ea->shape, "random weights of a known model's shape instead of a model file")
      ->check(CLI::IsMember({"smollm2", "llama2-7b"}))
      ->excludes(engine->get_option("--model"));
  engine->add_option("--gemm", ea->gemm, "GEMM precision of the CUDA backend (default f16)")
      ->check(CLI::IsMember({"fp32", "tf32", "f16", "bf16"}));
  // The CPU and CUDA benchmarks have their own defaults; a length given here sets both.
  for (auto [name, cpu, gpu, max, what] :
       {std::tuple{"--short", &ea->cpu.n_prefill_short, &ea->cuda.n_prefill_short, 1 << 16, "short prefill length"},
        std::tuple{"--long", &ea->cpu.n_prefill_long, &ea->cuda.n_prefill_long, 1 << 16, "long prefill length"},
        std::tuple{"--decode", &ea->cpu.n_decode, &ea->cuda.n_decode, 1 << 16, "decode tokens"},
        std::tuple{"--repeats", &ea->cpu.repeats, &ea->cuda.repeats, 100, "runs per prefill size (best kept)"}}) {
    engine
        ->add_option_function<int>(
            name, [cpu = cpu, gpu = gpu](int v) { *cpu = *gpu = v; }, what)
        ->check(CLI::Range(1, max));
  }
  engine
      ->add_option_function<int>(
          "--ctx", [ea](int v) { ea->cpu.n_ctx = ea->cuda.n_ctx = v; },
          "KV cache of at least this many tokens, resident, for peak RSS (the prefills may be shorter)")
      ->check(CLI::Range(0, 1 << 20));
  engine
      ->add_option_function<int>(
          "--decode-ctx", [ea](int v) { ea->cpu.n_decode_ctx = ea->cuda.n_decode_ctx = v; },
          "also time decode after this many tokens of context (0: skip)")
      ->check(CLI::Range(0, 1 << 20));
  engine->callback([=] {
    ConfigureLogging(*common);
    const bool cuda = common->backend == "cuda";
    if (!ea->gemm.empty() && !cuda) {
      spdlog::error("--gemm sets the CUDA backend's GEMM precision: add --backend cuda");
      *exit_code = 2;
      return;
    }
    if (cuda) {
      if (auto n = CudaDeviceCount(); !n.ok()) {  // before loading or building gigabytes of weights
        spdlog::error("{}", n.status().ToString());
        *exit_code = 1;
        return;
      }
    }
    Result<Model> model = Status::Internal("not loaded");
    if (!ea->shape.empty()) {
      auto shape = KnownModelShape(ea->shape);
      model = shape.ok() ? RandomModel(*shape) : Result<Model>(shape.status());
    } else {
      ProgressBar bar("loading model");
      Result<uint32_t> weights = ParseWeightsOption(common->weights);
      model = !weights.ok() ? Result<Model>(weights.status())
                            : LoadModel(ResolveModelPath(*common), bar.AsFn(),
                                        LoadOptions{.n_threads = common->threads, .weights = *weights});
    }
    if (!model.ok()) {
      spdlog::error("{}", model.status().ToString());
      *exit_code = 1;
      return;
    }
    *exit_code = cuda ? RunCudaEngineBench(*model, ea->cuda, ea->gemm, ea->json)
                      : RunCpuEngineBench(*model, ea->cpu, common->threads, ea->json);
  });
}

// impress bench store: a layer's batch of chunk reads vs fio at the same block size and depth.
void RegisterStoreBench(CLI::App* bench, CommonOptions* common, int* exit_code) {
  struct StoreArgs {
    bool json = false;
    store::StoreBenchOptions opts;
  };
  auto sa = std::make_shared<StoreArgs>();
  CLI::App* storecmd = bench->add_subcommand("store", "SSD chunk-read bandwidth against fio");
  AddCommonOptions(storecmd, common);
  storecmd->add_flag("--json", sa->json, "print JSON");
  storecmd->add_option("--dir", sa->opts.dir, "scratch directory on the disk to measure (default: under --store)");
  storecmd->add_option("--queue-depth", sa->opts.queue_depth, "io_uring queue depth")->check(CLI::Range(1, 1024));
  storecmd->add_option("--chunk-tokens", sa->opts.chunk_tokens, "tokens per chunk")->check(CLI::Range(1, 4096));
  storecmd->add_option("--seconds", sa->opts.seconds, "seconds per measurement")->check(CLI::Range(0.1, 600.0));
  storecmd->callback([=] {
    ConfigureLogging(*common);
    store::StoreBenchOptions opts = sa->opts;
    if (opts.dir.empty()) opts.dir = (common->store_dir.empty() ? DefaultStoreDir() : common->store_dir) + "/bench";
    auto r = store::RunStoreBenchmark(opts);
    if (!r.ok()) {
      spdlog::error("{}", r.status().ToString());
      *exit_code = 1;
      return;
    }
    if (!sa->json) {
      std::cout << "CPU " << CpuModelName() << "\n" << store::FormatStoreBench(*r);
      return;
    }
    std::cout << nlohmann::json{{"cpu", CpuModelName()},
                                {"store_mb_s", r->store_mb_s},
                                {"fio_mb_s", r->fio_mb_s},
                                {"ratio", r->ratio},
                                {"block_bytes", r->block_bytes},
                                {"queue_depth", r->queue_depth},
                                {"chunks_per_batch", r->chunks_per_batch},
                                {"batches", r->batches},
                                {"io_engine", r->io_engine},
                                {"direct_io", r->direct_io},
                                {"fio_error", r->fio_error},
                                {"cpu_ms_per_batch", r->cpu_ms_per_batch},
                                {"wall_ms_per_batch", r->wall_ms_per_batch}}
                     .dump(2)
              << "\n";
  });
}

// impress bench pipeline: the systems side by side on a document held only on the SSD.
void RegisterPipelineBench(CLI::App* bench, CommonOptions* common, int* exit_code) {
  struct PipeArgs {
    bool json = false;
    bool kernels_only = false;
    int kernel_keys = 7700;
    std::string kv_encoding = "fp16";
    PipelineBenchOptions opts;
  };
  auto pa = std::make_shared<PipeArgs>();
  CLI::App* pipecmd = bench->add_subcommand("pipeline", "IMPRESS vs the baselines on a long document from the SSD");
  AddCommonOptions(pipecmd, common);
  pipecmd->add_flag("--json", pa->json, "print JSON");
  pipecmd->add_option("--doc", pa->opts.document, "the document (default: assets/docs/gpl-3.0.txt)");
  pipecmd->add_option("--questions", pa->opts.questions, "questions file (default: assets/eval/gpl-questions.txt)");
  pipecmd->add_option("--n-questions", pa->opts.n_questions, "how many questions")->check(CLI::Range(1, 10000));
  pipecmd->add_flag("--kernels-only", pa->kernels_only,
                    "time only the question path's attention and probe scoring (25 new tokens, 1,925 selected, "
                    "7,700 probed) against a plain sgemm");
  pipecmd->add_option("--kernel-keys", pa->kernel_keys, "with --kernels-only: the document's tokens the probe scores")
      ->check(CLI::Range(64, 1 << 20));
  pipecmd->add_flag("--probe-spread", pa->opts.settings.probe_spread, "probe heads spread over the KV groups");
  pipecmd->add_flag("--no-write-order{false}", pa->opts.settings.write_order,
                    "store the document's chunks in token order");
  pipecmd
      ->add_option("--select-group", pa->opts.settings.select_group,
                   "I/O-aware selection: tokens kept in read groups of N slots (-1: whole 4 KiB blocks; 0: per token)")
      ->check(CLI::Range(-1, 4096));
  pipecmd
      ->add_option("--kv-encoding", pa->kv_encoding,
                   "KV at rest: fp16 or int8 (int8: fidelity judged against an fp16 copy of the same ingest)")
      ->check(CLI::IsMember({"fp16", "int8"}));
  pipecmd
      ->add_option("--chunk-tokens", pa->opts.chunk_tokens,
                   "the store's chunk size in tokens (default: sized for the model, 256 for SmolLM2)")
      ->check(CLI::Range(1, 4096));
  pipecmd->callback([=] {
    ConfigureLogging(*common);
    PipelineBenchOptions opts = pa->opts;
    opts.kv_encoding = *store::ParseKVEncoding(pa->kv_encoding);
    opts.probe_encoding = ProbeEncodingFor(*common);
    const std::string assets = AssetsDir();
    if (opts.document.empty()) opts.document = assets + "/docs/gpl-3.0.txt";
    if (opts.questions.empty()) opts.questions = assets + "/eval/gpl-questions.txt";
    opts.store_dir = common->store_dir.empty() ? DefaultStoreDir() : common->store_dir;
    // The common options' selection (keep, keep mass, alpha, probe heads, sinks, recent, pooling),
    // with this command's own flags on top.
    {
      PipelineSettings s = AskOptionsFor(*common).pipeline;
      s.probe_spread = opts.settings.probe_spread;
      s.write_order = opts.settings.write_order;
      s.select_group = opts.settings.select_group;
      opts.settings = s;
    }
    auto ctx = LoadModelShowingProgress(*common);
    if (!ctx.ok()) {
      spdlog::error("{}", ctx.status().ToString());
      *exit_code = 1;
      return;
    }
    if (pa->kernels_only) {
      // The backend's kernels, then (on the CPU) the per-head sgemm path they replace, in one run.
      std::vector<std::pair<std::string, Backend*>> runs = {{(*ctx)->backend().Name(), &(*ctx)->backend()}};
      std::unique_ptr<Backend> per_head;
      if ((*ctx)->backend().Name().starts_with("cpu")) {
        per_head = MakeCpuBackend({.n_threads = common->threads, .tile_attention = false});
        runs.push_back({"cpu, per-head sgemm (before)", per_head.get()});
      }
      std::cout << fmt::format("CPU {}\n", CpuModelName());
      for (const auto& [name, be] : runs) {
        auto kt = TimeQuestionKernels(*be, (*ctx)->config(), 25, 1925, pa->kernel_keys, opts.settings.probe_heads,
                                      opts.settings.probe_spread);
        if (!kt.ok()) {
          spdlog::error("{}", kt.status().ToString());
          *exit_code = 1;
          return;
        }
        std::cout << fmt::format(
            "{}: {} new tokens: attention over {} selected {:.3f} ms ({:.1f} GFLOP/s), probe scoring of {} heads "
            "over {} keys {:.3f} ms ({:.1f} GFLOP/s), from int4 records {:.3f} ms; plain sgemm of the attention's QK^T "
            "{:.1f} GFLOP/s\n",
            name, kt->n_new, kt->n_selected, kt->attention_ms, kt->attention_gflops, kt->probe_heads, kt->n_document,
            kt->score_ms, kt->score_gflops, kt->score_int4_ms, kt->sgemm_gflops);
      }
      return;
    }
    ProgressBar bar("benchmark");
    opts.progress = bar.AsFn();
    auto r = RunPipelineBenchmark(**ctx, opts);
    bar.Finish();
    if (!r.ok()) {
      spdlog::error("{}", r.status().ToString());
      *exit_code = 1;
      return;
    }
    nlohmann::json systems = nlohmann::json::array();
    for (const SystemSummary& s : r->systems) systems.push_back(SummaryJson(s));
    nlohmann::json j{{"cpu", CpuModelName()},
                     {"document_tokens", r->n_document_tokens},
                     {"ingest_ms", r->ingest_ms},
                     {"questions", r->n_questions},
                     {"keep", opts.settings.keep},
                     {"keep_mass", opts.settings.keep_mass},
                     {"keep_min", opts.settings.keep_min},
                     {"keep_max", opts.settings.keep_max},
                     {"alpha", opts.settings.alpha},
                     {"probe_heads", opts.settings.probe_heads},
                     {"probe_spread", opts.settings.probe_spread},
                     {"sinks", opts.settings.sinks},
                     {"recent", opts.settings.recent},
                     {"write_order", opts.settings.write_order},
                     {"pool", opts.settings.pool},
                     {"pool_max", opts.settings.pool_max},
                     {"select_group", opts.settings.select_group},
                     {"select_budget", GroupBudgetName(opts.settings.select_budget)},
                     {"cross_layer_prefetch", opts.settings.cross_layer_prefetch},
                     {"predict_next", opts.settings.predict_next},
                     {"predict_select", opts.settings.predict_select},
                     {"attend_while_reading", opts.settings.attend_while_reading},
                     {"kv_encoding", store::KVEncodingName(opts.kv_encoding)},
                     {"probe_encoding", store::KVEncodingName(store::ProbeEncoding(opts))},
                     {"recomp_ttft_ms", r->recomp_ttft_ms},
                     {"impress_vs_as_bytes", r->impress_vs_as_bytes},
                     {"reorder_vs_as_bytes", r->reorder_vs_as_bytes},
                     {"impress_vs_h2o_lfu_bytes", r->impress_vs_h2o_bytes},
                     {"ttft_speedup_vs_h2o_lfu", r->ttft_speedup_vs_h2o},
                     {"ttft_speedup_vs_h2o_lfu_after_reorder", r->ttft_speedup_vs_h2o_reorder},
                     {"read_amp_before_reorder", r->read_amp_before_reorder},
                     {"read_amp_after_reorder", r->read_amp_after_reorder},
                     {"segments_reordered", r->segments_reordered},
                     {"io_engine", r->io_engine},
                     {"chunk_tokens", r->chunk_tokens},
                     {"direct_io", r->direct_io},
                     {"systems", systems},
                     {"backend", (*ctx)->backend().Name()}};
    if (pa->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << fmt::format("backend {}\n", (*ctx)->backend().Name());
    std::cout << fmt::format(
        "CPU {}; document {} tokens, {} questions, keep {}, alpha {:.2f}, probe heads {}{}, sinks {}, recent {}, {}, "
        "selection {}{}, KV at rest {} (probe keys {}) in chunks of {} tokens, I/O {}{}\n",
        CpuModelName(), r->n_document_tokens, r->n_questions,
        opts.settings.keep_mass > 0 ? fmt::format("{:.0f}% of the attention mass", opts.settings.keep_mass * 100)
                                    : fmt::format("{:.2f}", opts.settings.keep),
        opts.settings.alpha, opts.settings.probe_heads,
        opts.settings.probe_spread ? " spread over the KV groups" : " (the first)", opts.settings.sinks,
        opts.settings.recent,
        opts.settings.write_order ? "chunks written in importance order" : "chunks written in token order",
        opts.settings.select_group == 0 ? std::string("per token")
                                        : fmt::format("in read groups ({})", opts.settings.select_group),
        opts.settings.pool > 1 ? fmt::format(" on scores pooled ({} of {})", opts.settings.pool_max ? "largest" : "sum",
                                             opts.settings.pool)
                               : "",
        store::KVEncodingName(opts.kv_encoding), store::KVEncodingName(store::ProbeEncoding(opts)), r->chunk_tokens,
        r->io_engine, r->direct_io ? " + O_DIRECT" : "");
    // io wait: the I/O compute did not hide (the request waited on the store); probe: its share of TTFT.
    std::cout << fmt::format("{:<31} {:>8} {:>8} {:>8} {:>8} {:>7} {:>11} {:>10} {:>11} {:>7} {:>9} {:>6} {:>7}\n",
                             "system", "TTFT ms", "p50 ms", "p99 ms", "io wait", "probe", "SSD MB/req", "reads/req",
                             "KV MB/req", "agree", "KL", "RA", "passed");
    for (const SystemSummary& s : r->systems) {
      std::cout << fmt::format(
          "{:<31} {:>8.0f} {:>8.0f} {:>8.0f} {:>7.0f}% {:>6.1f}% {:>11.2f} {:>10.0f} {:>11.2f} {:>6.0f}% {:>9.4f} "
          "{:>6.2f} {:>6.0f}%\n",
          s.system, s.mean_ttft_ms, s.p50_ttft_ms, s.p99_ttft_ms, s.unhidden_io_share * 100, s.probe_share * 100,
          s.mean_ssd_bytes / 1e6, s.mean_ssd_reads, s.mean_kv_bytes / 1e6, s.first_token_agreement * 100, s.mean_kl,
          s.mean_read_amplification, s.layers_passed * 100);
    }
    // Where each system's TTFT goes (mean ms per request).
    // "of which score": the probe's scoring kernel within probe cmp; the rest of probe cmp is selection.
    std::cout << fmt::format("{:<31} {:>7} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8} {:>7}\n", "TTFT parts, ms", "match",
                             "probe io", "probe cmp", "(scoring)", "kv io", "copy", "compute", "other");
    for (const SystemSummary& s : r->systems) {
      const TtftBreakdown& b = s.mean_breakdown;
      std::cout << fmt::format("{:<31} {:>7.1f} {:>9.1f} {:>9.1f} {:>8.1f} {:>7.1f} {:>7.1f} {:>8.1f} {:>7.1f}\n",
                               s.system, b.match_ms, b.probe_io_ms, b.probe_compute_ms, b.probe_score_ms, b.kv_io_ms,
                               b.copy_ms, b.compute_ms, b.other_ms);
    }
    std::cout << fmt::format("TTFT: IMPRESS {:.2f}x faster than AS+H2O+LFU ({:.2f}x after reorder)\n",
                             r->ttft_speedup_vs_h2o, r->ttft_speedup_vs_h2o_reorder);
    std::cout << fmt::format(
        "ReComp TTFT {:.0f} ms; IMPRESS reads {:.2f}x the bytes of {} ({:.2f}x after reorder) and {:.2f}x "
        "AS+H2O+LFU's; read amplification {:.2f} -> {:.2f} after reorder; agreement and KL vs full fp16 KV\n",
        r->recomp_ttft_ms, r->impress_vs_as_bytes,
        opts.kv_encoding == store::KVEncoding::kF16 ? "AS-like" : "fp16 AS-like", r->reorder_vs_as_bytes,
        r->impress_vs_h2o_bytes, r->read_amp_before_reorder, r->read_amp_after_reorder);
  });
}

// impress bench kernels --gemm: the prefill GEMM per type and shape; 0 or 1 (the exit code).
int PrintGemmBench(double seconds, bool json) {
  using namespace quant;
  auto rows = RunGemmBenchmark(seconds);
  if (!rows.ok()) {
    spdlog::error("{}", rows.status().ToString());
    return 1;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const GemmBenchRow& r : *rows)
      out.push_back({{"m", r.m},
                     {"n", r.n},
                     {"k", r.k},
                     {"type", WeightTypeName(r.type)},
                     {"int8_gflops", r.int8_gflops},
                     {"tiles_sgemm_gflops", r.tiles_gflops},
                     {"fp32_sgemm_gflops", r.sgemm_gflops}});
    std::cout << nlohmann::json{{"cpu", CpuModelName()},
                                {"path", KernelPathName(ActiveKernelPath())},
                                {"threads", 1},
                                {"results", out}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "CPU {}; path {}; one thread; GFLOP/s per thread-CPU second (quantizing or decoding included)\n"
      "{:>5} {:>5} {:>5} {:<5} {:>10} {:>12} {:>12}\n",
      CpuModelName(), KernelPathName(ActiveKernelPath()), "m", "n", "k", "type", "int8 GEMM", "tiles+sgemm",
      "fp32 sgemm");
  for (const GemmBenchRow& r : *rows)
    std::cout << fmt::format("{:>5} {:>5} {:>5} {:<5} {:>10.1f} {:>12.1f} {:>12.1f}\n", r.m, r.n, r.k,
                             WeightTypeName(r.type), r.int8_gflops, r.tiles_gflops, r.sgemm_gflops);
  return 0;
}

// impress bench kernels: the quantized GEMV kernels (engine/quant), weight GB/s per type and path.
void RegisterKernelBench(CLI::App* bench, int* exit_code) {
  struct KernelArgs {
    bool json = false;
    bool gemm = false;
    double seconds = 0.3;
  };
  auto ka = std::make_shared<KernelArgs>();
  CLI::App* cmd = bench->add_subcommand("kernels", "quantized GEMV weight bandwidth per type and SIMD path");
  cmd->add_flag("--json", ka->json, "print JSON");
  cmd->add_option("--seconds", ka->seconds, "seconds per measurement")->check(CLI::Range(0.01, 60.0));
  cmd->add_flag("--gemm", ka->gemm,
                "the prefill GEMM (512 rows; 16-512 on Qwen2.5-1.5B shapes) instead: GFLOP/s against OpenBLAS sgemm");
  cmd->callback([=] {
    using namespace quant;
    if (ka->gemm) {
      *exit_code = PrintGemmBench(ka->seconds, ka->json);
      return;
    }
    auto rows = RunKernelBenchmark(ka->seconds);
    if (!rows.ok()) {
      spdlog::error("{}", rows.status().ToString());
      *exit_code = 1;
      return;
    }
    const std::vector<KernelPath>& paths = KernelBenchPaths();
    if (ka->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const KernelBenchRow& row : *rows) {
        nlohmann::json gbs;
        for (size_t i = 0; i < paths.size(); ++i) {
          if (row.gbs[i] > 0) gbs[KernelPathName(paths[i])] = row.gbs[i];
        }
        out.push_back({{"rows", row.n_rows},
                       {"cols", row.n_cols},
                       {"type", WeightTypeName(row.type)},
                       {"weight_bytes", row.weight_bytes},
                       {"gb_s", gbs}});
      }
      std::cout << nlohmann::json{{"cpu", CpuModelName()},
                                  {"default_path", KernelPathName(ActiveKernelPath())},
                                  {"threads", 1},
                                  {"results", out}}
                       .dump(2)
                << "\n";
      return;
    }
    std::cout << fmt::format(
        "CPU {}; default path {}; one thread; GB/s of weight bytes per GEMV "
        "(activation quantization included)\n",
        CpuModelName(), KernelPathName(ActiveKernelPath()));
    int64_t shape_rows = -1;
    for (const KernelBenchRow& row : *rows) {
      if (row.n_rows != shape_rows) {
        shape_rows = row.n_rows;
        std::cout << fmt::format("\n{} x {}\n{:<6}", row.n_rows, row.n_cols, "type");
        for (KernelPath p : paths) std::cout << fmt::format(" {:>10}", KernelPathName(p));
        std::cout << "   (MB)\n";
      }
      std::cout << fmt::format("{:<6}", WeightTypeName(row.type));
      for (double g : row.gbs) std::cout << (g > 0 ? fmt::format(" {:>10.2f}", g) : fmt::format(" {:>10}", "n/a"));
      std::cout << fmt::format("   ({:.2f})\n", double(row.weight_bytes) / 1e6);
    }
  });
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CommonOptions* common, int* exit_code) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "benchmarks (engine speed, store bandwidth, the IMPRESS pipeline, kernels, the multi-document workload)");
  bench->require_subcommand(1);
  RegisterEngineBench(bench, common, exit_code);
  RegisterStoreBench(bench, common, exit_code);
  RegisterPipelineBench(bench, common, exit_code);
  RegisterKernelBench(bench, exit_code);
  RegisterWorkloadBench(bench, common, exit_code);
}

}  // namespace impress::app
