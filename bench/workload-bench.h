// `impress bench workload`: the IMPRESS paper's evaluation shape on this machine. Many documents
// (bench/workload.h cuts them from plain texts) are ingested once into a store on the SSD; then
// every system serves the same Zipf-distributed request sequence, with follow-up questions,
// starting from a copy of that store with empty fast tiers whose budgets are fractions of the
// documents' total KV (default: device 10%, host 30%; the SSD holds everything). Per request it
// records TTFT and its breakdown, chunks per tier, SSD bytes, read amplification, the I/O time
// compute did not hide, and whether the first token equals the full-KV (AS-like) one.
//
// Systems: ReComp (only the first few requests: it recomputes everything), AS-like,
// AS+H2O+LRU, AS+H2O+LFU, and IMPRESS with its ablations (+ITF, +ITF+RO, all); the reordering
// systems reorder every `reorder_every` requests, as the background pass would.
//
// Single-threaded driver; it owns its scratch directory while it runs and removes it afterwards.
#pragma once

#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "bench/workload.h"
#include "engine/runtime/model-context.h"
#include "pipeline/report.h"

namespace impress {

struct WorkloadBenchOptions {
  std::string scratch_dir;  // a fresh directory is made inside it and removed afterwards
  std::vector<SourceText> sources;
  std::vector<std::string> questions;
  WorkloadSpec spec;
  double device_fraction = 0.10;  // fast-tier budgets as fractions of the documents' total KV
  double host_fraction = 0.30;
  std::vector<SystemKind> systems;  // empty: all, in the order above
  int recomp_requests = 8;
  int reorder_every = 10;
  float keep = 0.25f;
  float alpha = 0.6f;
  int probe_heads = 3;
  ProgressFn progress;
};

struct WorkloadRequestResult {
  int doc = 0;
  bool follow_up = false;
  int n_prefix = 0, n_matched = 0;
  double ttft_ms = 0;
  double io_wait_ms = 0;  // I/O time compute waited for
  uint64_t ssd_bytes = 0;
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0;
  double read_amplification = 0;
  int layers_passed = 0, layers = 0;
  int first_token = -1;
  int agrees = -1;  // 1/0: first token equals AS-like's; -1: no AS-like run to compare with
};

struct WorkloadSystemResult {
  std::string system;
  std::vector<WorkloadRequestResult> requests;
  double mean_ttft_ms = 0, p50_ttft_ms = 0, p99_ttft_ms = 0;
  double hit_device = 0, hit_host = 0, hit_ssd = 0;  // shares of the chunks read
  double mean_ssd_bytes = 0;
  double mean_read_amplification = 0;
  double unhidden_io_share = 0;       // sum io_wait / sum TTFT
  double first_token_agreement = -1;  // -1: not compared
};

struct WorkloadBenchResult {
  int n_docs = 0;
  uint64_t doc_tokens = 0;
  uint64_t kv_bytes = 0;  // the documents' K and V as stored
  uint64_t device_bytes = 0, host_bytes = 0;
  double ingest_s = 0;
  std::vector<WorkloadRequest> requests;
  std::vector<std::string> doc_names;
  std::vector<WorkloadSystemResult> systems;
  std::string io_engine;
  bool direct_io = false;
};

Result<WorkloadBenchResult> RunWorkloadBenchmark(ModelContext& ctx, const WorkloadBenchOptions& options);

// Fills the summary fields of `s` from its requests.
void SummarizeWorkloadSystem(WorkloadSystemResult* s);

}  // namespace impress
