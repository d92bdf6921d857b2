// impress bench workload: many documents, Zipf popularity, fast tiers smaller than the KV, every
// system side by side (bench/workload-bench.h). Prints a table with the CPU model and writes
// workload.json, workload-systems.csv and workload-requests.csv to --out; scripts/plot-workload.py
// draws them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "base/cpu-info.h"
#include "bench/workload-bench.h"
#include "chat/document.h"
#include "engine/runtime/model-context.h"

namespace impress::app {
namespace {

namespace fs = std::filesystem;

struct WorkloadArgs {
  std::vector<std::string> texts;  // files or folders of plain text
  std::string questions;
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

nlohmann::json ToJson(const WorkloadBenchResult& r, const WorkloadBenchOptions& o) {
  nlohmann::json systems = nlohmann::json::array();
  for (const WorkloadSystemResult& s : r.systems) {
    nlohmann::json ttft = nlohmann::json::array();
    for (const WorkloadRequestResult& x : s.requests) ttft.push_back(x.ttft_ms);
    systems.push_back({{"system", s.system},
                       {"requests", s.requests.size()},
                       {"mean_ttft_ms", s.mean_ttft_ms},
                       {"p50_ttft_ms", s.p50_ttft_ms},
                       {"p99_ttft_ms", s.p99_ttft_ms},
                       {"hit_device", s.hit_device},
                       {"hit_host", s.hit_host},
                       {"hit_ssd", s.hit_ssd},
                       {"mean_ssd_bytes", s.mean_ssd_bytes},
                       {"read_amplification", s.mean_read_amplification},
                       {"unhidden_io_share", s.unhidden_io_share},
                       {"first_token_agreement", s.first_token_agreement},
                       {"ttft_ms", ttft}});
  }
  return {{"cpu", CpuModelName()},
          {"documents", r.n_docs},
          {"document_tokens", r.doc_tokens},
          {"kv_bytes", r.kv_bytes},
          {"device_bytes", r.device_bytes},
          {"host_bytes", r.host_bytes},
          {"requests", r.requests.size()},
          {"zipf_s", o.spec.zipf_s},
          {"follow_up", o.spec.follow_up},
          {"seed", o.spec.seed},
          {"keep", o.keep},
          {"alpha", o.alpha},
          {"probe_heads", o.probe_heads},
          {"ingest_s", r.ingest_s},
          {"io_engine", r.io_engine},
          {"direct_io", r.direct_io},
          {"systems", systems}};
}

Status WriteResults(const std::string& out_dir, const WorkloadBenchResult& r, const nlohmann::json& j) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", out_dir, ec.message()));
  std::ofstream(out_dir + "/workload.json") << j.dump(2) << "\n";
  std::ofstream sys(out_dir + "/workload-systems.csv");
  sys << "system,requests,mean_ttft_ms,p50_ttft_ms,p99_ttft_ms,hit_device,hit_host,hit_ssd,mean_ssd_bytes,"
         "read_amplification,unhidden_io_share,first_token_agreement\n";
  for (const WorkloadSystemResult& s : r.systems)
    sys << fmt::format("{},{},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.0f},{:.4f},{:.4f},{:.4f}\n", s.system,
                       s.requests.size(), s.mean_ttft_ms, s.p50_ttft_ms, s.p99_ttft_ms, s.hit_device, s.hit_host,
                       s.hit_ssd, s.mean_ssd_bytes, s.mean_read_amplification, s.unhidden_io_share,
                       s.first_token_agreement);
  std::ofstream req(out_dir + "/workload-requests.csv");
  req << "system,request,doc,follow_up,n_prefix,n_matched,ttft_ms,io_wait_ms,ssd_bytes,chunks_device,chunks_host,"
         "chunks_ssd,read_amplification,layers_passed,layers,first_token,agrees\n";
  for (const WorkloadSystemResult& s : r.systems)
    for (size_t i = 0; i < s.requests.size(); ++i) {
      const WorkloadRequestResult& x = s.requests[i];
      req << fmt::format("{},{},{},{},{},{},{:.3f},{:.3f},{},{},{},{},{:.4f},{},{},{},{}\n", s.system, i, x.doc,
                         x.follow_up ? 1 : 0, x.n_prefix, x.n_matched, x.ttft_ms, x.io_wait_ms, x.ssd_bytes,
                         x.chunks_device, x.chunks_host, x.chunks_ssd, x.read_amplification, x.layers_passed, x.layers,
                         x.first_token, x.agrees);
    }
  if (!sys || !req) return Status::IOError("cannot write the results to " + out_dir);
  return Status::Ok();
}

void PrintTable(const WorkloadBenchResult& r, const WorkloadBenchOptions& o) {
  std::cout << fmt::format(
      "CPU {}; {} documents, {} tokens, KV {:.0f} MB; device tier {:.0f} MB, host {:.0f} MB; {} requests (Zipf "
      "s={:.2f}, follow-ups {:.0f}%); keep {:.2f}, alpha {:.2f}; ingest {:.0f} s; I/O {}{}\n",
      CpuModelName(), r.n_docs, r.doc_tokens, double(r.kv_bytes) / 1e6, double(r.device_bytes) / 1e6,
      double(r.host_bytes) / 1e6, r.requests.size(), o.spec.zipf_s, o.spec.follow_up * 100, o.keep, o.alpha, r.ingest_s,
      r.io_engine, r.direct_io ? " + O_DIRECT" : "");
  std::cout << fmt::format("{:<16} {:>5} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>10} {:>6} {:>8} {:>6}\n", "system",
                           "reqs", "TTFT ms", "p50", "p99", "device", "host", "SSD", "SSD MB/req", "RA", "unhid.IO",
                           "agree");
  for (const WorkloadSystemResult& s : r.systems)
    std::cout << fmt::format(
        "{:<16} {:>5} {:>9.0f} {:>8.0f} {:>8.0f} {:>6.1f}% {:>6.1f}% {:>6.1f}% {:>10.2f} {:>6.2f} {:>7.1f}% {:>6}\n",
        s.system, s.requests.size(), s.mean_ttft_ms, s.p50_ttft_ms, s.p99_ttft_ms, s.hit_device * 100, s.hit_host * 100,
        s.hit_ssd * 100, s.mean_ssd_bytes / 1e6, s.mean_read_amplification, s.unhidden_io_share * 100,
        s.first_token_agreement < 0 ? std::string("-") : fmt::format("{:.0f}%", s.first_token_agreement * 100));
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
  cmd->add_option("--systems", wa->systems, "systems to run (default: all)")->delimiter(',');
  cmd->add_option("--recomp-requests", wa->opts.recomp_requests, "requests ReComp serves (it recomputes everything)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--reorder-every", wa->opts.reorder_every, "requests between reorders (the +RO systems)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--out", wa->out, "results folder (JSON, CSV)");
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
      if (!ParseSystem(name, &k)) return fail(Status::InvalidArgument("unknown system " + name));
      o.systems.push_back(k);
    }
    o.scratch_dir = common->store_dir.empty() ? DefaultStoreDir() : common->store_dir;
    o.keep = common->keep;
    o.alpha = common->alpha;
    o.probe_heads = common->probe_heads;
    auto ctx = LoadModelShowingProgress(*common);
    if (!ctx.ok()) return fail(ctx.status());
    ProgressBar bar("workload");
    o.progress = bar.AsFn();
    auto r = RunWorkloadBenchmark(**ctx, o);
    bar.Finish();
    if (!r.ok()) return fail(r.status());
    const nlohmann::json j = ToJson(*r, o);
    if (Status w = WriteResults(wa->out, *r, j); !w.ok()) return fail(w);
    if (wa->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    PrintTable(*r, o);
    std::cout << fmt::format("results in {}/ (plots: scripts/plot-workload.py {})\n", wa->out, wa->out);
  });
}

}  // namespace impress::app
