// impress bench workload: many documents, Zipf popularity, fast tiers smaller than the KV, every
// system side by side (bench/workload-bench.h), or one system over a sweep of one setting. Prints
// a table with the CPU model, first-token agreement, continuation match and fact accuracy next to
// the speed figures, and writes workload.json and CSV files (sweep-NAME.* for a sweep) to --out;
// scripts/plot-workload.py draws them. The ingested documents' store stays in --ingest-dir and is
// reused by the next run over the same documents.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "app/app-options.h"
#include "app/commands.h"
#include "app/progress-bar.h"
#include "base/cpu-info.h"
#include "bench/workload-bench.h"
#include "chat/document.h"
#include "engine/runtime/model-context.h"
#include "pipeline/system-policy.h"

namespace impress::app {
namespace {

namespace fs = std::filesystem;

struct WorkloadArgs {
  std::vector<std::string> texts;  // files or folders of plain text
  std::string questions;
  std::string facts;       // empty: the default set; "none": no facts
  std::string ingest_dir;  // empty: <out>/ingested
  std::string sweep;       // NAME=v1,v2,...
  std::string kv_encoding = "fp16";
  std::vector<std::string> systems;
  std::string out = "workload-results";
  bool json = false;
  WorkloadBenchOptions opts;
};

// Every readable text file under the given paths, in name order (folders are not descended).
Result<std::vector<SourceText>> LoadSources(const std::vector<std::string>& paths) {
  std::vector<SourceText> out;
  std::vector<std::string> seen;  // the same text twice (a symlinked licence) is used once
  for (const std::string& p : paths) {
    std::vector<fs::path> files;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file(ec)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(p);
    }
    for (const fs::path& f : files) {
      auto doc = LoadDocument(f.string());
      if (!doc.ok()) {
        spdlog::warn("workload: skipping {}: {}", f.string(), doc.status().ToString());
        continue;
      }
      if (std::find(seen.begin(), seen.end(), doc->text) != seen.end()) continue;
      seen.push_back(doc->text);
      out.push_back({f.filename().string(), std::move(doc->text)});
    }
  }
  if (out.empty()) return Status::NotFound("workload: no readable text in the paths given");
  return out;
}

Result<std::vector<std::string>> LoadQuestions(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open the questions file " + path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  if (out.empty()) return Status::InvalidArgument(path + " holds no questions");
  return out;
}

Result<std::vector<WorkloadFact>> LoadFacts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open the facts file " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto facts = ParseFacts(text.str());
  if (!facts.ok()) return Status::InvalidArgument(path + ": " + facts.status().ToString());
  return facts;
}

// "alpha=0.2,0.4,0.6" -> {alpha, {0.2, 0.4, 0.6}}.
Result<WorkloadSweep> ParseSweep(const std::string& arg) {
  const size_t eq = arg.find('=');
  WorkloadSweep sw;
  sw.name = arg.substr(0, eq);
  const auto& names = WorkloadSweepNames();
  if (eq == std::string::npos || std::find(names.begin(), names.end(), sw.name) == names.end())
    return Status::InvalidArgument(
        fmt::format("--sweep wants NAME=v1,v2,... with NAME one of {}; got \"{}\"", fmt::join(names, ", "), arg));
  std::stringstream vals(arg.substr(eq + 1));
  for (std::string v; std::getline(vals, v, ',');) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') return Status::InvalidArgument("--sweep: \"" + v + "\" is not a number");
    sw.values.push_back(x);
  }
  if (sw.values.empty()) return Status::InvalidArgument("--sweep " + sw.name + ": no values");
  return sw;
}

std::string Share(double x) { return x < 0 ? std::string("-") : fmt::format("{:.0f}%", x * 100); }

nlohmann::json ToJson(const WorkloadBenchResult& r, const WorkloadBenchOptions& o) {
  nlohmann::json systems = nlohmann::json::array();
  for (const WorkloadSystemResult& s : r.systems) {
    nlohmann::json ttft = nlohmann::json::array();
    for (const WorkloadRequestResult& x : s.requests) ttft.push_back(x.ttft_ms);
    nlohmann::json facts = nlohmann::json::array();
    for (const WorkloadFactResult& f : s.facts)
      facts.push_back({{"fact", f.fact},
                       {"doc", f.doc},
                       {"depth", f.depth},
                       {"correct", f.correct},
                       {"continuation_match", f.continuation_match},
                       {"span_kept", f.span_kept},
                       {"output", f.output}});
    systems.push_back({{"system", s.system},
                       {"sweep_value", s.sweep_value},
                       {"fact_accuracy", s.fact_accuracy},
                       {"continuation_match", s.continuation_match},
                       {"span_kept_by_layer", s.span_kept_by_layer},
                       {"span_kept_mean", s.span_kept_mean},
                       {"span_whole_share", s.span_whole_share},
                       {"facts", facts},
                       {"mean_breakdown_ms",
                        {{"match", s.mean_breakdown.match_ms},
                         {"probe_io", s.mean_breakdown.probe_io_ms},
                         {"probe_compute", s.mean_breakdown.probe_compute_ms},
                         {"kv_io", s.mean_breakdown.kv_io_ms},
                         {"copy", s.mean_breakdown.copy_ms},
                         {"compute", s.mean_breakdown.compute_ms},
                         {"other", s.mean_breakdown.other_ms}}},
                       {"requests", s.requests.size()},
                       {"mean_ttft_ms", s.mean_ttft_ms},
                       {"p50_ttft_ms", s.p50_ttft_ms},
                       {"p99_ttft_ms", s.p99_ttft_ms},
                       {"hit_device", s.hit_device},
                       {"hit_host", s.hit_host},
                       {"hit_ssd", s.hit_ssd},
                       {"hit_team", s.hit_team},
                       {"mean_team_bytes", s.mean_team_bytes},
                       {"mean_ssd_bytes", s.mean_ssd_bytes},
                       {"mean_ssd_reads", s.mean_ssd_reads},
                       {"mean_probe_key_bytes", s.mean_probe_key_bytes},
                       {"read_amplification", s.mean_read_amplification},
                       {"unhidden_io_share", s.unhidden_io_share},
                       {"first_token_agreement", s.first_token_agreement},
                       {"ttft_ms", ttft}});
  }
  return {{"cpu", CpuModelName()},
          {"documents", r.n_docs},
          {"team", o.team.enabled()},
          {"team_reads", !o.team.enabled()         ? ""
                         : !o.team.selective       ? "whole"
                         : o.team.publisher_groups ? "exact"
                                                   : "selective"},
          {"document_tokens", r.doc_tokens},
          {"kv_bytes", r.kv_bytes},
          {"device_bytes", r.device_bytes},
          {"host_bytes", r.host_bytes},
          {"requests", r.requests.size()},
          {"zipf_s", o.spec.zipf_s},
          {"follow_up", o.spec.follow_up},
          {"seed", o.spec.seed},
          {"keep", o.settings.keep},
          {"keep_mass", o.settings.keep_mass},
          {"keep_min", o.settings.keep_min},
          {"keep_max", o.settings.keep_max},
          {"pool", o.settings.pool},
          {"pool_max", o.settings.pool_max},
          {"alpha", o.settings.alpha},
          {"probe_heads", o.settings.probe_heads},
          {"probe_spread", o.settings.probe_spread},
          {"kv_encoding", store::KVEncodingName(o.kv_encoding)},
          {"probe_encoding", store::KVEncodingName(store::ProbeEncoding(o))},
          {"n_continue", o.n_continue},
          {"continuation_reference", r.continuation_reference},
          {"sweep", r.sweep},
          {"ingest_reused", r.ingest_reused},
          {"ingest_s", r.ingest_s},
          {"io_engine", r.io_engine},
          {"direct_io", r.direct_io},
          {"systems", systems}};
}

// workload.json, workload-systems.csv, workload-requests.csv, workload-facts.csv; a sweep writes
// sweep-NAME.* instead.
Status WriteResults(const std::string& out_dir, const WorkloadBenchResult& r, const nlohmann::json& j) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  const std::string stem = out_dir + "/" + (r.sweep.empty() ? std::string("workload") : "sweep-" + r.sweep);
  std::ofstream(stem + ".json") << j.dump(2) << "\n";
  std::ofstream sys(stem + "-systems.csv");
  sys << "system,sweep_value,requests,mean_ttft_ms,p50_ttft_ms,p99_ttft_ms,hit_device,hit_host,hit_ssd,mean_ssd_bytes,"
         "read_amplification,unhidden_io_share,first_token_agreement,continuation_match,fact_accuracy,"
         "mean_probe_key_bytes,mean_ssd_reads,hit_team,mean_team_bytes\n";
  for (const WorkloadSystemResult& s : r.systems)
    sys << fmt::format(
        "{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.0f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.0f},{:.1f},{:."
        "4f},"
        "{:.0f}\n",
        s.system, s.sweep_value, s.requests.size(), s.mean_ttft_ms, s.p50_ttft_ms, s.p99_ttft_ms, s.hit_device,
        s.hit_host, s.hit_ssd, s.mean_ssd_bytes, s.mean_read_amplification, s.unhidden_io_share,
        s.first_token_agreement, s.continuation_match, s.fact_accuracy, s.mean_probe_key_bytes, s.mean_ssd_reads,
        s.hit_team, s.mean_team_bytes);
  std::ofstream facts(stem + "-facts.csv");
  facts << "system,sweep_value,fact,doc,depth,correct,continuation_match,span_kept_min,span_kept_mean\n";
  for (const WorkloadSystemResult& s : r.systems)
    for (const WorkloadFactResult& f : s.facts) {
      const bool found = !f.span_kept.empty();
      const double lo = found ? *std::min_element(f.span_kept.begin(), f.span_kept.end()) : -1;
      const double mean =
          found ? std::accumulate(f.span_kept.begin(), f.span_kept.end(), 0.0) / double(f.span_kept.size()) : -1;
      facts << fmt::format("{},{},{},{},{:.2f},{},{},{:.4f},{:.4f}\n", s.system, s.sweep_value, f.fact, f.doc, f.depth,
                           f.correct ? 1 : 0, f.continuation_match, lo, mean);
    }
  std::ofstream req(stem + "-requests.csv");
  req << "system,sweep_value,request,doc,follow_up,n_prefix,n_matched,ttft_ms,io_wait_ms,ssd_bytes,chunks_device,"
         "chunks_host,"
         "chunks_ssd,read_amplification,layers_passed,layers,first_token,agrees,probe_io_ms,probe_compute_ms,kv_io_ms,"
         "copy_ms,compute_ms,ssd_reads,chunks_team,team_bytes,team_ms\n";
  for (const WorkloadSystemResult& s : r.systems)
    for (size_t i = 0; i < s.requests.size(); ++i) {
      const WorkloadRequestResult& x = s.requests[i];
      const TtftBreakdown& b = x.breakdown;
      req << fmt::format(
          "{},{},{},{},{},{},{},{:.3f},{:.3f},{},{},{},{},{:.4f},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{"
          "},"
          "{:.3f}\n",
          s.system, s.sweep_value, i, x.doc, x.follow_up ? 1 : 0, x.n_prefix, x.n_matched, x.ttft_ms, x.io_wait_ms,
          x.ssd_bytes, x.chunks_device, x.chunks_host, x.chunks_ssd, x.read_amplification, x.layers_passed, x.layers,
          x.first_token, x.agrees, b.probe_io_ms, b.probe_compute_ms, b.kv_io_ms, b.copy_ms, b.compute_ms, x.ssd_reads,
          x.chunks_team, x.team_bytes, x.team_ms);
    }
  if (!sys || !req || !facts) return Status::IOError("cannot write the results to " + out_dir);
  return Status::Ok();
}

// How much of each fact's statement the sparse systems kept: the mean over layers, how many facts
// kept all of it in every layer, and the three layers that kept least.
void PrintSpans(const WorkloadBenchResult& r) {
  for (const WorkloadSystemResult& s : r.systems) {
    if (s.span_kept_mean < 0 || s.span_kept_mean >= 1.0) continue;
    std::vector<int> order(s.span_kept_by_layer.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return s.span_kept_by_layer[size_t(a)] < s.span_kept_by_layer[size_t(b)]; });
    std::string worst;
    for (size_t i = 0; i < std::min<size_t>(3, order.size()); ++i)
      worst += fmt::format("{}layer {} {:.0f}%", i ? ", " : "", order[i], s.span_kept_by_layer[size_t(order[i])] * 100);
    std::cout << fmt::format(
        "{}{}: fact statements kept {:.0f}% of their tokens (mean over layers), whole in every layer for {:.0f}% "
        "of the facts; least: {}\n",
        s.system, r.sweep.empty() ? std::string() : fmt::format(" {}", s.sweep_value), s.span_kept_mean * 100,
        s.span_whole_share * 100, worst);
  }
}

void PrintTable(const WorkloadBenchResult& r, const WorkloadBenchOptions& o) {
  std::cout << fmt::format(
      "CPU {}; {} documents, {} tokens, KV {:.0f} MB ({}, probe keys {}); "
      "device tier {:.0f} MB, host {:.0f} MB; "
      "{} requests (Zipf s={:.2f}, follow-ups {:.0f}%); "
      "keep {}{}, alpha {:.2f}, probe heads {}{}; ingest {:.0f} s{}; I/O {}{}\n",
      CpuModelName(), r.n_docs, r.doc_tokens, double(r.kv_bytes) / 1e6, store::KVEncodingName(o.kv_encoding),
      store::KVEncodingName(store::ProbeEncoding(o)), double(r.device_bytes) / 1e6, double(r.host_bytes) / 1e6,
      r.requests.size(), o.spec.zipf_s, o.spec.follow_up * 100,
      o.settings.keep_mass > 0 ? fmt::format("{:.0f}% of the attention mass ({:.2f}..{:.2f} of the tokens)",
                                             o.settings.keep_mass * 100, o.settings.keep_min, o.settings.keep_max)
                               : fmt::format("{:.2f}", o.settings.keep),
      o.settings.pool > 1
          ? fmt::format(" (scores pooled: {} of {})", o.settings.pool_max ? "max" : "sum", o.settings.pool)
          : "",
      o.settings.alpha, o.settings.probe_heads, o.settings.probe_spread ? " spread" : "", r.ingest_s,
      r.ingest_reused ? " (reused)" : "", r.io_engine, r.direct_io ? " + O_DIRECT" : "");
  if (!r.facts.empty())
    std::cout << fmt::format(
        "fidelity: agree = first token equal to AS-like's; cont = greedy tokens equal to {}'s before the first "
        "divergence (of {}); facts = {} hidden facts answered right\n",
        r.continuation_reference, o.n_continue, r.facts.size());
  const bool sweep = !r.sweep.empty();
  std::cout << fmt::format(
      "{:<24} {:>5} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>10} {:>9} {:>9} {:>6} {:>8} {:>6} {:>6} {:>6}\n",
      sweep ? "system " + r.sweep : std::string("system"), "reqs", "TTFT ms", "p50", "p99", "device", "host", "SSD",
      "SSD MB/req", "reads/req", "probe MB", "RA", "unhid.IO", "agree", "cont", "facts");
  for (const WorkloadSystemResult& s : r.systems) {
    const int right = int(std::count_if(s.facts.begin(), s.facts.end(), [](const auto& f) { return f.correct; }));
    const std::string name =
        sweep && s.system != SystemName(SystemKind::kAsLike) ? fmt::format("{} {}", s.system, s.sweep_value) : s.system;
    std::cout << fmt::format(
        "{:<24} {:>5} {:>9.0f} {:>8.0f} {:>8.0f} {:>6.1f}% {:>6.1f}% {:>6.1f}% {:>10.2f} {:>9.0f} {:>9.2f} {:>6.2f} "
        "{:>7.1f}% "
        "{:>6} {:>6} {:>6}\n",
        name, s.requests.size(), s.mean_ttft_ms, s.p50_ttft_ms, s.p99_ttft_ms, s.hit_device * 100, s.hit_host * 100,
        s.hit_ssd * 100, s.mean_ssd_bytes / 1e6, s.mean_ssd_reads, s.mean_probe_key_bytes / 1e6,
        s.mean_read_amplification, s.unhidden_io_share * 100, Share(s.first_token_agreement),
        Share(s.continuation_match), s.facts.empty() ? std::string("-") : fmt::format("{}/{}", right, s.facts.size()));
    if (s.hit_team > 0 || s.mean_team_bytes > 0)
      std::cout << fmt::format("{:<24} team tier: {:.1f}% of the chunks, {:.2f} MB received per request\n", "",
                               s.hit_team * 100, s.mean_team_bytes / 1e6);
  }
  PrintSpans(r);
}

}  // namespace

void RegisterWorkloadBench(CLI::App* bench, CommonOptions* common, int* exit_code) {
  auto wa = std::make_shared<WorkloadArgs>();
  CLI::App* cmd = bench->add_subcommand("workload", "many documents, Zipf popularity, small fast tiers: all systems");
  AddCommonOptions(cmd, common);
  WorkloadSpec& sp = wa->opts.spec;
  cmd->add_option("--texts", wa->texts,
                  "text files or folders to cut documents from (default: assets/docs and /usr/share/common-licenses)");
  cmd->add_option("--questions", wa->questions, "questions file (default: assets/eval/workload-questions.txt)");
  cmd->add_option("--docs", sp.n_docs, "documents")->check(CLI::Range(1, 10000));
  cmd->add_option("--min-doc-tokens", sp.min_doc_tokens, "shortest document")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--max-doc-tokens", sp.max_doc_tokens, "longest document")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--requests", sp.n_requests, "requests per system")->check(CLI::Range(1, 1000000));
  cmd->add_option("--zipf", sp.zipf_s, "Zipf exponent of document popularity")->check(CLI::Range(0.0, 4.0));
  cmd->add_option("--follow-up", sp.follow_up, "share of follow-up questions")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--workload-seed", sp.seed, "seed of the documents' lengths and the request sequence");
  cmd->add_option("--device-fraction", wa->opts.device_fraction, "device tier as a share of the documents' KV")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--host-fraction", wa->opts.host_fraction, "host tier as a share of the documents' KV")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--systems", wa->systems, "systems to run, of " + SystemNames(",") + " (default: all)")
      ->delimiter(',');
  cmd->add_option("--recomp-requests", wa->opts.recomp_requests, "requests ReComp serves (it recomputes everything)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--reorder-every", wa->opts.reorder_every, "requests between reorders (the +RO systems)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--out", wa->out, "results folder (JSON, CSV)");
  cmd->add_option("--ingest-dir", wa->ingest_dir,
                  "where the ingested documents' store is kept and reused by later runs (default: OUT/ingested)");
  cmd->add_option("--facts", wa->facts,
                  "facts hidden in the documents and asked for (default: assets/eval/workload-facts.txt; none: no "
                  "facts)");
  cmd->add_option("--fact-depths", wa->opts.fact_depths, "depths (0..1) the facts are hidden at, in turn")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--continue", wa->opts.n_continue, "greedy tokens per fact question")->check(CLI::Range(1, 4096));
  cmd->add_option("--chunk-tokens", wa->opts.chunk_tokens,
                  "the store's chunk size in tokens (default: sized for the model, 256 for SmolLM2)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--select-group", wa->opts.settings.select_group,
                  "I/O-aware selection group (tokens; -1: the store's block group; 0: per token)")
      ->check(CLI::Range(-1, 1 << 16));
  cmd->add_option("--kv-encoding", wa->kv_encoding, "how the store keeps K/V: fp16 or int8 (budgets follow it)")
      ->check(CLI::IsMember({"fp16", "int8"}));
  cmd->add_flag("--probe-spread", wa->opts.settings.probe_spread,
                "probe query heads spread over the KV groups (else the first ones)");
  cmd->add_option(
      "--sweep", wa->sweep,
      "run one system (the first of --systems, default impress) over values of one setting: NAME=v1,v2,... "
      "with NAME alpha, keep, keep-mass (0: the fixed keep), pool, pool-max (0/1), probe-heads, "
      "probe-spread (0/1), select-group, chunk-tokens, pool-follow, dense-layers, head-max (0/1), device-fraction or "
      "host-fraction");
  cmd->add_flag("--json", wa->json, "print JSON");
  cmd->callback([=] {
    ConfigureLogging(*common);
    auto fail = [&](const Status& st) {
      spdlog::error("{}", st.ToString());
      *exit_code = 1;
    };
    WorkloadBenchOptions o = wa->opts;
    std::vector<std::string> texts = wa->texts;
    if (texts.empty()) texts = {AssetsDir() + "/docs", "/usr/share/common-licenses"};
    auto sources = LoadSources(texts);
    if (!sources.ok()) return fail(sources.status());
    o.sources = std::move(*sources);
    auto questions =
        LoadQuestions(wa->questions.empty() ? AssetsDir() + "/eval/workload-questions.txt" : wa->questions);
    if (!questions.ok()) return fail(questions.status());
    o.questions = std::move(*questions);
    for (const std::string& name : wa->systems) {
      SystemKind k;
      if (!ParseSystem(name, &k)) {
        return fail(Status::InvalidArgument("unknown system " + name + " (systems: " + SystemNames(", ") + ")"));
      }
      o.systems.push_back(k);
    }
    if (wa->facts != "none") {
      auto facts = LoadFacts(wa->facts.empty() ? AssetsDir() + "/eval/workload-facts.txt" : wa->facts);
      if (!facts.ok()) return fail(facts.status());
      o.facts = std::move(*facts);
    }
    if (!wa->sweep.empty()) {
      auto sweep = ParseSweep(wa->sweep);
      if (!sweep.ok()) return fail(sweep.status());
      o.sweep = std::move(*sweep);
    }
    o.kv_encoding = *store::ParseKVEncoding(wa->kv_encoding);
    o.probe_encoding = ProbeEncodingFor(*common);
    o.scratch_dir = common->store_dir.empty() ? DefaultStoreDir() : common->store_dir;
    o.ingest_dir = wa->ingest_dir.empty() ? wa->out + "/ingested" : wa->ingest_dir;
    if (!common->team_url.empty()) o.team = TeamOptionsFor(*common);
    const int select_group = o.settings.select_group;
    const bool probe_spread = o.settings.probe_spread;
    o.settings = AskOptionsFor(*common).pipeline;
    o.settings.select_group = select_group;
    o.settings.probe_spread = probe_spread;
    auto ctx = LoadModelShowingProgress(*common);
    if (!ctx.ok()) return fail(ctx.status());
    ProgressBar bar("workload");
    o.progress = bar.AsFn();
    auto r = RunWorkloadBenchmark(**ctx, o);
    bar.Finish();
    if (!r.ok()) return fail(r.status());
    nlohmann::json j = ToJson(*r, o);
    j["backend"] = (*ctx)->backend().Name();  // names int8 key scores when they were on
    if (Status w = WriteResults(wa->out, *r, j); !w.ok()) return fail(w);
    if (wa->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << fmt::format("backend {}\n", (*ctx)->backend().Name());
    PrintTable(*r, o);
    std::cout << fmt::format("results in {}/ (plots: scripts/plot-workload.py {}); ingested store in {}\n", wa->out,
                             wa->out, o.ingest_dir);
  });
}

}  // namespace impress::app
