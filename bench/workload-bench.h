// `impress bench workload`: the IMPRESS paper's evaluation shape on this machine. Many documents
// (bench/workload.h cuts them from plain texts) are ingested once into a store on the SSD; then
// every system serves the same Zipf-distributed request sequence, with follow-up questions,
// starting from a copy of that store with empty fast tiers whose budgets are fractions of the
// documents' total KV (default: device 10%, host 30%; the SSD holds everything). Per request it
// records TTFT and its breakdown, chunks per tier, SSD bytes, read amplification, the I/O time
// compute did not hide, and whether the first token equals the full-KV (AS-like) one. After the
// requests, each system answers questions about facts hidden in the documents (greedy, n_continue
// tokens): answer accuracy, and the continuation match against full KV (ReComp, else AS-like).
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
#include "pipeline/impress-pipeline.h"
#include "pipeline/report.h"
#include "store/kv-codec.h"

namespace impress {

// One setting varied over a list of values (item "sweeps" of the evaluation): every value runs
// one system over the same requests, from the same ingested documents.
struct WorkloadSweep {
  std::string name;  // empty: no sweep; else one of WorkloadSweepNames()
  std::vector<double> values;
};

// alpha, keep, keep-mass (0: the fixed keep), pool, pool-max (0/1), probe-heads, probe-spread, select-group,
// chunk-tokens, device-fraction, host-fraction.
const std::vector<std::string>& WorkloadSweepNames();

struct WorkloadBenchOptions {
  std::string scratch_dir;  // a fresh directory is made inside it and removed afterwards
  // Non-empty: the ingested store is kept in a folder under it named after what it holds (model,
  // documents' tokens, store shape) and reused by every later run that would ingest the same.
  std::string ingest_dir;
  std::vector<SourceText> sources;
  std::vector<std::string> questions;
  // Hidden in the documents before ingest (PlaceFacts at fact_depths) and asked after each
  // system's requests, n_continue greedy tokens each: answer accuracy and continuation match.
  std::vector<WorkloadFact> facts;
  std::vector<double> fact_depths = {0.1, 0.5, 0.9};
  int n_continue = 32;
  WorkloadSpec spec;
  // How the store keeps K/V (fp16 or int8 with per-token-per-head scales).
  store::KVEncoding kv_encoding = store::KVEncoding::kF16;
  std::optional<store::KVEncoding> probe_encoding;  // probe keys at rest (nullopt: as kv_encoding)
  // Fast-tier budgets as fractions of the documents' total K/V as the store holds it (its
  // encoding: int8 K/V is about half the fp16 bytes, and so are the budgets).
  double device_fraction = 0.10;
  double host_fraction = 0.30;
  std::vector<SystemKind> systems;  // empty: every system of the registry, in its order (a sweep: the first one)
  int recomp_requests = 8;
  int reorder_every = 10;
  int chunk_tokens = 0;       // the store's chunk (C; 0: the model's, ChunkTokensFor)
  PipelineSettings settings;  // keep, alpha, probe heads, ...; system and report_importance set per run
  WorkloadSweep sweep;
  // The team KV tier under the local ones (enabled: team.url): the ingested documents are
  // published to it, and every system starts from an empty local store of its own (publishing
  // nothing), so a document's first request reads from the team tier and later ones find what
  // the local tiers admitted.
  store::TeamOptions team;
  ProgressFn progress;
};

struct WorkloadRequestResult {
  int doc = 0;
  bool follow_up = false;
  int n_prefix = 0, n_matched = 0;
  double ttft_ms = 0;
  double io_wait_ms = 0;  // I/O time compute waited for
  TtftBreakdown breakdown;
  uint64_t ssd_bytes = 0;
  uint32_t ssd_reads = 0;  // read requests those bytes took (a device pays per request as well as per byte)
  // Keys the probe step scored (rows of the probe's KV heads, in their at-rest encoding, over the matched prefix, every
  // probed layer): the probe's I/O, whichever tier served it.
  uint64_t probe_key_bytes = 0;
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0;
  uint32_t chunks_team = 0;  // spans read from the team tier (per layer)
  uint64_t team_bytes = 0;   // received from the team tier on the request's path: lookup, per-layer reads
  double team_ms = 0;        // the team lookup (or the wait for a background fill) before the prefill; in ttft_ms
  double read_amplification = 0;
  int layers_passed = 0, layers = 0;
  int first_token = -1;
  int agrees = -1;  // 1/0: first token equals AS-like's; -1: no AS-like run to compare with
};

// One hidden fact asked after a system's requests.
struct WorkloadFactResult {
  int fact = 0, doc = 0;
  double depth = 0;
  bool correct = false;         // the expected answer is in the greedy output
  int continuation_match = -1;  // leading tokens equal to the full-KV reference's; -1: no reference
  std::string output;           // the greedy output, up to the end of generation
  std::vector<int32_t> tokens;  // n_continue greedy tokens
  // Per layer, the share of the fact's own tokens (its statement in the document) the question
  // attended to; empty when the statement was not found among the prompt's tokens or nothing was
  // reused (ReComp). Full KV keeps all of them.
  std::vector<float> span_kept;
};

struct WorkloadSystemResult {
  std::string system;
  double sweep_value = 0;  // the swept setting's value (sweeps only)
  std::vector<WorkloadRequestResult> requests;
  std::vector<WorkloadFactResult> facts;
  double mean_ttft_ms = 0, p50_ttft_ms = 0, p99_ttft_ms = 0;
  double hit_device = 0, hit_host = 0, hit_ssd = 0;  // shares of the chunks read
  double hit_team = 0;                               // (spans read from the team tier count as chunks)
  double mean_team_bytes = 0;                        // received from the team tier per request
  double mean_ssd_bytes = 0;
  double mean_ssd_reads = 0;
  double mean_probe_key_bytes = 0;
  double mean_read_amplification = 0;
  double unhidden_io_share = 0;       // sum io_wait / sum TTFT
  TtftBreakdown mean_breakdown;       // where the TTFT went, per request on average
  double first_token_agreement = -1;  // -1: not compared
  double fact_accuracy = -1;          // share of facts answered right; -1: no facts asked
  double continuation_match = -1;     // mean share of the n_continue tokens before the first divergence
  // Over the facts asked: the mean share of a fact's tokens kept, per layer, and how often the
  // worst layer kept the whole statement; -1 / empty when no fact's span was found.
  std::vector<double> span_kept_by_layer;
  double span_kept_mean = -1;
  double span_whole_share = -1;  // facts whose every layer kept every token of the statement
};

struct WorkloadBenchResult {
  int n_docs = 0;
  uint64_t doc_tokens = 0;
  uint64_t kv_bytes = 0;  // the documents' K and V as stored (in the store's encoding)
  uint64_t device_bytes = 0, host_bytes = 0;
  double ingest_s = 0;
  bool ingest_reused = false;  // the ingested store came from an earlier run
  std::vector<WorkloadRequest> requests;
  std::vector<std::string> doc_names;
  std::vector<PlacedFact> facts;
  std::string continuation_reference;  // the system the continuation match compares with
  std::string sweep;                   // the swept setting (empty: none)
  std::vector<WorkloadSystemResult> systems;
  std::string io_engine;
  bool direct_io = false;
};

Result<WorkloadBenchResult> RunWorkloadBenchmark(ModelContext& ctx, const WorkloadBenchOptions& options);

// Fills the summary fields of `s` from its requests and facts; `n_continue` scales the
// continuation match to a share.
void SummarizeWorkloadSystem(WorkloadSystemResult* s, int n_continue = 32);

}  // namespace impress
