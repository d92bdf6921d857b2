// ImpressPipeline: one request's prefill and decode over the tiered prefix KV store
// (docs/design.md sections 2, 3 and 5). It joins the engine (Forward, layer by layer) and the store
// (PrefixStore: match, per-layer reads, insert, importance statistics).
//
// For a request S = P + Q it matches the longest cached prefix R of P, then for each layer:
//   IMPRESS: read the probe heads' keys of R (prefetched one layer ahead), score them with the
//     probe query heads (ProbeQueryHeads) (H2O importance), take each head's top-k set, compare the
//     mean pairwise Jaccard s with t = (p / (2 - p))^alpha, p = k/n. Pass: select the top-k of
//     the probe heads' summed normalised importance and read K and V of just those tokens.
//     Fallback: read all keys, score all heads, select, read the selected values.
//   AS+H2O (LRU/LFU): always the fallback path (all keys, all heads).
//   AS-like: read all K/V of R (next layer prefetched).
//   ReComp: no reuse.
// Which of these a layer runs is the request's system's policy (SystemPolicy::SelectionFor,
// pipeline/system-policy.h); so is the tiers' cache policy while it serves.
// Attention sinks and a recent window of R are always kept and count toward k. New tokens
// (the unmatched part of P, then Q) are numbered from len(R); reused tokens keep their positions.
// After the first token, Decode() continues over the same per-layer KV (selected R + new
// tokens), and Store() writes the KV of everything after R to the store in the background.
//
// Files: this header and impress-pipeline.cpp hold the request (match, prefill batches, decode,
// store); layer-steps.cpp holds each layer's identify-and-load steps; the math they use is in
// selection.h and the fidelity check in fidelity.h.
//
// Thread contract: requires external synchronization (one request at a time); the background
// store write it starts is joined before the next request and in the destructor. The
// ModelContext and PrefixStore must outlive it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/compute/forward.h"
#include "engine/compute/sampler.h"
#include "engine/runtime/model-context.h"
#include "pipeline/report.h"
#include "pipeline/selection.h"  // the selection math the settings tune (threshold, keep ratio)
#include "pipeline/system-policy.h"
#include "store/prefix-store.h"

namespace impress {

struct PipelineSettings {
  SystemKind system = SystemKind::kImpress;
  float keep = 0.25f;              // keep ratio r: k = ceil(r * n)
  float alpha = 0.6f;              // threshold exponent (0..2); larger alpha lowers t
  int probe_heads = 3;             // P: query heads that probe each layer
  bool probe_spread = false;       // the P heads spread over the KV groups (else the first P heads)
  int sinks = 4;                   // first tokens always kept
  int recent = 32;                 // last prefix tokens always kept
  bool overlap = true;             // prefetch the next layer's probe keys (or KV for AS-like)
  bool record_importance = false;  // fill RequestReport::importance / selected (GUI heatmap)
  bool report_importance = true;   // feed the store's statistics (reorder, score caching)
  int ubatch = 512;                // new tokens per forward batch
  // The question's forward batches also report, per layer, every head's attention over the new
  // tokens (H2O column sums); StoreAsync hands it to the store, which writes each layer's chunks in
  // that order (packed from the first write), attention sinks and the recent window first.
  bool write_order = true;
  // I/O-aware selection: the unit selected is the unit read. > 1: tokens are kept in groups of this
  // many consecutive stored slots (SelectGroups: whole groups by summed importance, up to the
  // importance mass token-level selection keeps); -1: the store's block group (whole 4 KiB blocks,
  // PrefixStore::BlockGroupTokens); 0 or 1: token by token (SelectTokens). Block groups by default:
  // on a fresh 7,700-token document they read 0.50x of AS-like's bytes against 0.62x per token,
  // with the same first-token agreement (impress bench pipeline).
  int select_group = -1;
  // How many read groups a layer keeps (GroupBudget): as many tokens as the keep ratio names (its
  // bytes; the default), or as much importance mass as token-level selection keeps (on the 1.5B
  // model 29-36% of the tokens at keep 0.25: 0.39x of AS-like's bytes instead of 0.35x, mean KL
  // against full KV 0.028 instead of 0.044 on six questions; at equal bytes the two are alike).
  GroupBudget select_budget = GroupBudget::kTokens;
  // Cross-layer prefetch: once layer l has chosen its tokens, the K/V of the same positions in
  // layer l+1 are read (they overlap strongly) while l computes and l+1 probes. Layer l+1's own
  // selection still decides what is used: missing tokens are read then, extra ones dropped. Reads
  // sooner, and more bytes (the extra ones); IMPRESS's probe path only.
  bool cross_layer_prefetch = false;
  // Predicted reads: once layer l has chosen its tokens, layer l+1's probe runs once early on the
  // residual stream as layer l received it (Forward::PredictScores) and the K/V of the tokens it
  // picks are read while layer l computes. Layer l+1's own probe still decides what is used:
  // missing rows are read then, extra ones dropped, so the answer is the same as without it.
  // IMPRESS's probe path with integer-coded probe keys on a host-addressable backend only.
  bool predict_next = false;
  // Predicted selection (implies predict_next): where the prediction's probe heads agree (its
  // Jaccard test passes), layer l+1 keeps the tokens the prediction picked and does not probe
  // again, so its whole read runs under layer l's compute and nothing is read after its queries
  // are known. The answer may differ from the layer's own probe's (docs/benchmarks.md measures
  // by how much); where the prediction's test fails the layer probes as usual.
  bool predict_select = true;
  // Attend while reading: a layer's selected K/V rows are handed to its attention as their chunks
  // arrive (RowArrivals), so the attention computes on the blocks of keys already complete while
  // the disk still reads the rest, instead of after the whole read. The same rows in the same
  // order: the same answer. Host-addressable backends, local matches, reads not split by a read
  // ahead. Off by default: on two cores the attention's threads then take the core the read's
  // checksums and copies need, and the first token came later (docs/benchmarks.md).
  bool attend_while_reading = false;
  // Keep by attention mass (0: off, the fixed ratio `keep`). > 0: per layer, the fewest tokens
  // whose summed normalised importance (the probe heads', or all heads' where they score) reaches
  // this share of the layer's total (MassKeepCount), at least a `keep_min` and at most a
  // `keep_max` share of the prefix; `keep` is then unused.
  float keep_mass = 0.0f;
  float keep_min = 0.05f;
  float keep_max = 1.0f;
  // Score pooling before the selection (PoolScoresInto): a token's score becomes the largest
  // (pool_max; else the sum) of the scores of the `pool` tokens centred on it, so neighbours of an
  // important token are kept with it; <= 1: off. The write order pools the question's attention the
  // same way, so the spans a later question keeps lie together on disk. The largest of 7 by
  // default: on 11 documents and 20 hidden facts (impress bench workload, keep 25%) it answers 8
  // facts against 5 unpooled, at 15.2 SSD MB per request against 15.6 (sum of 7: 7 facts, 15.0 MB).
  int pool = 7;
  bool pool_max = true;
  // With pooling: the `pool_follow` tokens after an important token rank with it too (the pooling
  // window reaches that much further back), for the selection and the write order alike: what
  // follows the words a question matches is usually its answer.
  int pool_follow = 8;
  // The first `dense_layers` layers load every prefix token (no probe, no selection), as sparse
  // attention methods often keep the lowest layers dense: their attention is spread widely.
  int dense_layers = 0;
  // How the scored heads' normalised importance becomes one score per token: the largest over
  // the heads (head_max), so each head's own favourites compete, or the sum (every head votes).
  // Measured on 11 documents and 20 hidden facts at keep 25% (impress bench workload, one
  // ingest): head_max and pool_follow 8 together answer 7 facts with 3 probe heads against 5, and
  // 12 with all 9 heads scoring against 8 (full KV: 13); each alone answers 7.
  bool head_max = true;
};

// The query heads that probe each layer: `probe_heads` of them (clamped to [1, n_head]),
// ascending. spread: heads floor(j * n_head / P), evenly over the heads, so with grouped-query
// attention every KV group has one once P >= n_head_kv (SmolLM2, P = 3: heads 0, 3, 6, one per KV
// head); the first P heads would all share KV head 0 and never see what the other groups attend
// to. Not spread (the default): heads 0..P-1, the paper's choice for one KV head per query head,
// whose probe reads the fewest keys under GQA (SmolLM2: a third of them; spread: all of them).
std::vector<int> ProbeQueryHeads(const ModelConfig& config, int probe_heads, bool spread = false);

// The KV heads those query heads use (GQA: h / (n_head / n_head_kv)), ascending, distinct: the
// keys the probe reads (its I/O is their share of all keys).
std::vector<int> ProbeKvHeads(const ModelConfig& config, int probe_heads, bool spread = false);

// Tokens per stored chunk for a model. A chunk is the unit of a layer's reads and of tier
// caching, and an SSD read costs per request as well as per byte, so chunks are sized by bytes:
// the largest power of two whose K region (fp16) stays within kChunkRegionTarget, at least 64
// tokens (the paper's size) and at most 1,024. SmolLM2 (384 bytes of K per token and layer): 256;
// Llama-3.2-1B (1 KiB): 128; Llama-3.1-8B (2 KiB): 64. On a 7,700-token document 256-token
// chunks cut IMPRESS's TTFT about 20% and AS-like's about 30% against 64 (impress bench pipeline
// --chunk-tokens): the same bytes in a quarter of AS-like's reads and 0.57x of IMPRESS's.
constexpr int kChunkRegionTarget = 128 * 1024;
int ChunkTokensFor(const ModelConfig& config);

// Store options matching a model: layer and head shapes, its fingerprint, the chunk size
// (ChunkTokensFor), and probe keys for the KV heads of ProbeQueryHeads(config, probe_heads,
// spread). The caller sets dir and budgets.
store::PrefixStoreOptions StoreOptionsFor(const ModelConfig& config, int probe_heads, bool spread = false);

struct PipelineRequest {
  std::span<const int32_t> tokens;  // the whole prompt
  int n_prefix = 0;                 // its reusable part (documents, earlier turns)
};

class ImpressPipeline {
 public:
  // `store` may be null: every request then runs as ReComp.
  ImpressPipeline(ModelContext& ctx, store::PrefixStore* store);
  ~ImpressPipeline();
  ImpressPipeline(const ImpressPipeline&) = delete;
  ImpressPipeline& operator=(const ImpressPipeline&) = delete;

  // Runs the prompt up to the first token's logits (into *logits, n_vocab floats).
  // `max_new_tokens` reserves room for Decode. OutOfRange if the prompt plus that exceeds the
  // model's context. The report's TTFT covers this call (match to logits). Stored KV that fails
  // its checksum is not an error: the store drops it, the tokens are recomputed (warning logged,
  // report.n_recomputed counts them) and the answer comes as without the store.
  Result<RequestReport> Prefill(const PipelineRequest& request, const PipelineSettings& settings, int max_new_tokens,
                                std::vector<float>* logits, const ProgressFn& progress = {},
                                const std::atomic<bool>* cancel = nullptr);

  // Appends one token (the one just sampled) and gives the next logits.
  Status Decode(int32_t token, std::vector<float>* logits);

  // Writes the KV of every token after the matched prefix (prompt and decoded tokens, up to
  // `n_tokens` of them counted from the start of the sequence; 0 = all) to the store, on a
  // background thread. Returns at once; the result shows in the next report's tokens_stored
  // and in WaitForStore(). `into`: another store to write to instead (nullptr: this pipeline's);
  // it must hold the matched prefix (e.g. after a prefill that matched nothing), else the write
  // fails with NotFound. The same KV may so go to stores of different encodings. `io` goes to
  // the store's Insert (e.g. a private document's KV is never published to the team tier).
  void StoreAsync(size_t n_tokens = 0, store::PrefixStore* into = nullptr, const store::InsertOptions& io = {});
  Result<uint64_t> WaitForStore();
  // Waits for the store write, then releases the lock the last Prefill took on its matched
  // prefix (otherwise held until the next Prefill), so the store may evict, drop or reorder it.
  // Decoding may go on: it does not read the store. A later StoreAsync may then fail if the
  // prefix went meanwhile (reported by WaitForStore).
  Status ReleaseMatch();

  // Tokens of the current sequence (prompt + decoded).
  const std::vector<int32_t>& sequence() const { return seq_; }
  int n_matched() const { return n_matched_; }
  ModelContext& context() { return ctx_; }
  store::PrefixStore* store() { return store_; }

 private:
  // One prefill in flight, and one layer's selection within it (pipeline/prefill-run.h).
  struct Run;
  struct LayerJob;
  // A cross-layer prefetch in flight: K/V of a layer at the previous layer's selection.
  struct KvPrefetch {
    store::ReadTicket ticket = 0;
    std::vector<uint32_t> positions;  // ascending
    // A prediction's verdict (PipelineSettings::predict_select): the layer may keep `positions`.
    std::optional<ProbeVerdict> verdict;
    // Where the read puts its rows as they arrive (ReadInto): the layer's own buffers, when the
    // layer keeps `positions` as they are; null for a read the store buffers until it is waited.
    f16_t* into_k = nullptr;
    f16_t* into_v = nullptr;
  };
  // Waits for a read ahead that nobody will use, discarding what it brought.
  void DiscardPrefetch(const KvPrefetch& pf);

  // impress-pipeline.cpp: the request.
  // One attempt at Prefill (which retries after a corrupt stored chunk); TTFT counts from t_start.
  Result<RequestReport> PrefillOnce(const PipelineRequest& request, const PipelineSettings& settings,
                                    int max_new_tokens, std::vector<float>* logits, const ProgressFn& progress,
                                    const std::atomic<bool>* cancel, std::chrono::steady_clock::time_point t_start,
                                    bool allow_reuse);
  void DrainPrefetches();
  Status EnsureBuffers(size_t rows);
  void BeginRequest(const PipelineRequest& request, Run& run);  // match, reset per-request state
  Status PrefillBatch(Run& run, std::span<const int32_t> tokens, int b, int nb);
  // A batch's attention over the new tokens of layer il, added to write_imp_[il].
  Status AttendRecordingImportance(int il, const PrefixKV& prefix, int n_cols_before);
  void FinishRequest(Run& run);  // totals, importance statistics to the store

  // layer-steps.cpp: identify and load the prefix KV of one layer (docs/design.md section 3).
  Status PrefetchLayer(Run& run, int il);          // reads that do not depend on the layer's queries
  Status SelectLayer(Run& run, int il);            // the system's LayerSelection, then RecordSelection
  Status LoadFullLayer(LayerJob& job);             // AS-like: all K/V of the prefix
  Status SelectByProbe(LayerJob& job);             // IMPRESS: probe, then selective load or fallback
  Result<ProbeVerdict> ProbeLayer(LayerJob& job);  // probe keys, probe heads scored, verdict
  Status SelectByAllHeads(LayerJob& job);          // fallback and AS+H2O: all keys, all heads scored
  Status SelectByPolicy(LayerJob& job);            // positions the system's policy chooses, then their K/V
  // PipelineSettings::predict_select: the prediction's tokens, read ahead, as the layer's choice.
  Status SelectByPrediction(LayerJob& job);
  // Reads K/V of job.selected into the layer's buffers; `keys` (all keys of the layer, token-major)
  // when the fallback already has them, so only values are read.
  Status LoadSelected(LayerJob& job, const std::vector<f16_t>* keys);
  // job.k from job.score when the keep is by attention mass (PipelineSettings::keep_mass).
  void SetKeepCount(LayerJob& job);
  // job.selected from job.score: token by token, or in read groups (PipelineSettings::select_group).
  // With pooling the pooled scores go to *pool (pool_scratch_ unless given).
  Status ChooseTokens(LayerJob& job, std::vector<float>* pool = nullptr);
  void RecordSelection(LayerJob& job);  // for the report and the store's statistics
  // Cross-layer prefetch: reads layer il + 1's K/V at layer il's selection.
  Status PrefetchNextLayerKV(Run& run, int il);
  // How the probe gets its keys under the store's options: the store's probe keys when they cover
  // the probe heads (else all keys), kept as the layer's keys when they are exactly all keys, and
  // scored straight from their integer codes where the backend addresses host memory.
  struct ProbeKeysPlan {
    bool store_covers = false, keep_keys = false;
    int code_bits = 0;  // 4 or 8: scored from the records; 0: from fp16 keys
    store::KVEncoding encoding{};
    std::vector<int> kv_heads;  // the KV heads whose keys the probe reads
  };
  ProbeKeysPlan PlanProbeKeys(const PipelineSettings& s);
  // Layer il's probe keys as stored (plan.code_bits) in its slot (probe_slots_): from its read
  // ahead or a read now; the wait is booked to probe I/O and the read to lr. Once waited, a
  // second call returns them without reading again.
  Result<const uint8_t*> ReadProbeRecords(Run& run, LayerReport& lr, int il, const ProbeKeysPlan& plan);
  // Submits layer il's probe read into its slot (waiting first for a read still in flight there).
  Status SubmitProbeRecords(int il, const ProbeKeysPlan& plan);
  // Waits for every probe read in flight into a slot and forgets what the slots hold.
  void DiscardProbeSlots();
  struct ProbeSlot;
  void DiscardProbeSlot(ProbeSlot& slot);  // the same for one slot
  // Predicted reads: layer il + 1's probe on the current residual stream picks the K/V to read
  // ahead (pending_predict_); SubmitPrediction starts that read once layer il's own is done, so the
  // two do not share the disk.
  Status PredictNextLayer(Run& run, int il);
  Status SubmitPrediction(Run& run);
  // PredictNextLayer for job.il, once, where the job asks for it: called between submitting the
  // layer's read and waiting for it, so the prediction computes while the disk reads.
  Status PredictDuringRead(LayerJob& job);
  // K/V of job.selected, in order, into k_dst / v_dst (host memory; k_dst null: keys not read):
  // the rows a read ahead brought that the layer chose, plus a read of what it missed.
  Status ReadSelectedWithPrefetch(LayerJob& job, KvPrefetch pf, f16_t* k_dst, f16_t* v_dst);
  Result<store::ReadResult> WaitRead(LayerJob& job, store::ReadTicket ticket, double* bucket);
  // The same, gathering straight into memory the compute reads (a host-addressable backend's
  // buffers): no staging vector, no copy; out_rows as PrefixStore::WaitInto's.
  Status WaitReadInto(LayerJob& job, store::ReadTicket ticket, f16_t* k, f16_t* v, double* bucket,
                      std::span<const uint32_t> out_rows = {});
  // Attend while reading: waits layer il's streamed read after its attention; the time the
  // attention waited for rows is the read's unhidden time (moved from compute to I/O wait).
  Status FinishStreamedRead(Run& run, int il);
  void NoteRead(LayerJob& job, const store::ReadStats& st);
  static void NoteRead(Run& run, LayerReport& lr, const store::ReadStats& st);
  std::optional<store::ReadTicket> TakePrefetch(int il);
  Status EnsureKeysScratch(size_t rows);
  void Upload(DevPtr<f16_t> dst, const std::vector<f16_t>& src, size_t n_rows);

  ModelContext& ctx_;
  store::PrefixStore* store_;
  std::unique_ptr<Forward> fwd_;

  // Per layer device KV: rows [0, n_sel[il]) selected prefix tokens, then the new tokens.
  std::vector<DevPtr<f16_t>> k_buf_, v_buf_;
  size_t buf_rows_ = 0;
  std::vector<int> n_sel_;    // selected prefix rows per layer
  int n_new_done_ = 0;        // new tokens in the buffers (prompt + decoded)
  std::vector<int32_t> seq_;  // the sequence so far
  int n_matched_ = 0;
  store::MatchHandle handle_;
  std::vector<std::vector<uint32_t>> selected_;  // per layer, for ReportImportance
  std::vector<std::vector<float>> selected_scores_;
  // The write order (PipelineSettings::write_order) of the last prefill.
  std::vector<std::vector<float>> write_imp_;  // per layer: (n_head, n_new) the question's attention
  std::vector<float> write_scratch_;           // one layer's importance rows (n_head x columns)
  int write_from_ = 0;                         // the new-token index where the question starts
  int n_new_total_ = 0;                        // new tokens of the last prefill
  struct {
    int sinks = 0, recent_begin = 0, recent_end = 0;  // kept by every later request: stored first
    int pool = 0;                                     // PipelineSettings::pool, pool_max, pool_follow
    bool pool_max = false;
    int pool_follow = 0;
  } write_order_;

  // Scratch (host): one layer's per-head importance from ScoreKeys, reused by every layer.
  std::vector<float> score_scratch_;
  std::vector<float> score_sum_;     // one layer's summed normalised importance (LayerJob::score)
  std::vector<float> pool_scratch_;  // the layer's LayerJob::score pooled (PipelineSettings::pool)
  SelectionScratch sel_scratch_;     // the selection's reused buffers
  // Int8/int4 probe keys as stored (scored from their codes), of up to three layers: layer il's
  // in probe_slots_[il % 3] (a read goes two layers ahead with predicted reads). A read submitted
  // ahead names its slot's buffer, so the store checks and copies its chunks there as they
  // arrive; the buffer is neither touched nor resized while that read is in flight. The
  // prediction's records stay for the layer's own probe.
  struct ProbeSlot {
    std::vector<uint8_t> records;
    int il = -1;                                 // the layer it holds or is reading (-1: none)
    std::optional<store::ReadTicket> in_flight;  // a read into `records`, not yet waited
  };
  std::array<ProbeSlot, 3> probe_slots_;
  // Predicted reads: the prediction's summed importance.
  std::vector<float> predict_score_;
  std::vector<float> predict_pool_;  // the prediction's pooled scores (pool_scratch_ is the layer's)
  struct PendingPrediction {
    int il = -1;
    std::vector<uint32_t> positions;      // ascending
    std::optional<ProbeVerdict> verdict;  // judged for PipelineSettings::predict_select
  };
  std::optional<PendingPrediction> pending_predict_;  // chosen, not yet submitted
  // Scratch (device) for probe / all keys and the selected K/V before they land in the buffers.
  DevPtr<f16_t> keys_scratch_;
  size_t keys_scratch_rows_ = 0;
  std::vector<DevPtr<void>> allocs_;

  // Prefetch tickets for the next layer (probe keys, all keys, or full KV), and whether each
  // layer's was submitted this request (a prediction takes a ticket early).
  std::vector<std::optional<store::ReadTicket>> prefetch_;
  std::vector<uint8_t> prefetch_issued_;
  // Cross-layer prefetch: per layer, K/V of the previous layer's selection, read ahead.
  std::vector<std::optional<KvPrefetch>> kv_prefetch_;
  // Attend while reading (PipelineSettings::attend_while_reading): the layer's read whose rows its
  // attention takes as they arrive (arrivals_), waited once the attention is done.
  struct StreamedRead {
    store::ReadTicket ticket = 0;
    f16_t* k = nullptr;  // null: keys not read
    f16_t* v = nullptr;
  };
  std::optional<StreamedRead> streamed_;
  RowArrivals arrivals_;

  std::thread store_thread_;
  Result<uint64_t> store_result_ = uint64_t{0};
};

}  // namespace impress
