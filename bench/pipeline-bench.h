// The end-to-end pipeline benchmark (`impress bench pipeline`): a long document held only on
// the SSD (device and host tiers empty, reads with O_DIRECT so the page cache is bypassed), a
// set of questions about it, and the systems side by side: bytes read, TTFT and its breakdown,
// first-token agreement with the full prefix KV, and read amplification before and after a
// reorder. Single-threaded driver; it owns its store directory while it runs.
#pragma once

#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/runtime/model-context.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/report.h"
#include "store/kv-codec.h"

namespace impress {

struct PipelineBenchOptions {
  std::string store_dir;  // a fresh directory is made inside it and removed afterwards
  std::string document;   // text file (4,000+ tokens for the numbers)
  std::string questions;  // one question per line; '#' lines are comments
  int n_questions = 20;
  // The selection every sparse system runs with (keep or keep_mass, alpha, probe heads, sinks,
  // recent, pooling, select_group, dense_layers, head_max); cross_layer_prefetch for the IMPRESS
  // rows; write_order and pooling for the ingest. `system` and `report_importance` are set per run.
  PipelineSettings settings;
  // How the store keeps the KV at rest. Not fp16: the same ingest is also stored as fp16, and a
  // full-KV (AS-like) run over it is every question's reference (first token, logits).
  store::KVEncoding kv_encoding = store::KVEncoding::kF16;
  std::optional<store::KVEncoding> probe_encoding;  // probe keys at rest (nullopt: as kv_encoding)
  int chunk_tokens = 0;                             // the store's chunk size (0: the model's, ChunkTokensFor)
  ProgressFn progress;
};

struct SystemSummary {
  std::string system;
  int n_requests = 0;
  double mean_ttft_ms = 0;
  double p50_ttft_ms = 0;
  double p99_ttft_ms = 0;
  double probe_share = 0;           // mean of RequestReport::probe_share (the paper's bar: <= 6%)
  double unhidden_io_share = 0;     // mean of RequestReport::unhidden_io_share
  double mean_ssd_bytes = 0;        // read from the data files per request
  double mean_kv_bytes = 0;         // keys + values the request asked for (probe keys included)
  double mean_breakdown_error = 0;  // |sum of parts - TTFT| / TTFT
  double max_breakdown_error = 0;
  double first_token_agreement = 0;  // vs the reference's first token (full KV, fp16)
  double mean_kl = 0;                // KL(reference || system) of the first token's distribution, nats
  double max_kl = 0;
  double mean_read_amplification = 0;  // SSD bytes read / bytes of the K/V used
  double mean_chunks_ssd = 0;
  double mean_ssd_reads = 0;  // read requests per request: an IOPS-bound device pays per request, not per byte
  double layers_passed = 0;   // mean fraction of layers where the probe passed
  TtftBreakdown mean_breakdown;
};

struct PipelineBenchResult {
  int n_document_tokens = 0;
  int n_questions = 0;
  double ingest_ms = 0;  // the first, full prefill of the document
  double recomp_ttft_ms = 0;
  // as, as-h2o-lru, as-h2o-lfu, impress, impress after reorder; then, for a compact encoding,
  // "as (fp16 reference)": the reference over the fp16 copy.
  std::vector<SystemSummary> systems;
  double impress_vs_as_bytes = 0;   // IMPRESS SSD bytes / AS-like SSD bytes (fp16 AS-like when compact)
  double reorder_vs_as_bytes = 0;   // the same after reorder
  double impress_vs_h2o_bytes = 0;  // IMPRESS SSD bytes / AS+H2O+LFU SSD bytes
  // TTFT speedup over AS+H2O+LFU: its mean TTFT / IMPRESS's, before and after reorder.
  double ttft_speedup_vs_h2o = 0, ttft_speedup_vs_h2o_reorder = 0;
  double read_amp_before_reorder = 0;
  double read_amp_after_reorder = 0;
  uint64_t segments_reordered = 0;
  std::string io_engine;
  bool direct_io = false;
  int chunk_tokens = 0;  // the store's chunk size
};

Result<PipelineBenchResult> RunPipelineBenchmark(ModelContext& ctx, const PipelineBenchOptions& options);

// The question path's two attention kernels on a model's shapes, timed on a backend with
// random data: the new tokens' attention over the selected prefix (n_new queries, n_selected
// prefix keys, every head) and the probe scoring (the probe heads over n_document keys of their
// KV heads), each as GFLOP/s next to a plain fp32 sgemm of the attention's own product in the
// same run (HostSgemmNT: all heads of a KV group times the keys), so a ratio says how far each
// kernel is from the engine's GEMM rate. Best of `repeats` calls.
struct QuestionKernelTimes {
  int n_new = 0, n_selected = 0, n_document = 0, probe_heads = 0;
  double attention_ms = 0, attention_gflops = 0;
  double score_ms = 0, score_gflops = 0;
  double score_int4_ms = 0;  // the same scoring from int4 probe-key records, as the store keeps them
  double sgemm_gflops = 0;   // the reference
};
Result<QuestionKernelTimes> TimeQuestionKernels(Backend& be, const ModelConfig& config, int n_new, int n_selected,
                                                int n_document, int probe_heads, bool probe_spread, int repeats = 20);

}  // namespace impress
