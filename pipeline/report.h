// RequestReport: what one request did, for the GUI panels, the benchmark and `--json`
// (docs/design.md sections 2-3, 8). Plain values; copied freely between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace impress {

// A serving system's id: its position in the registry of systems (pipeline/system-policy.h), where
// its policy says what it reads, how it selects and caches. The built-in systems' ids are named here
// for the code that refers to one of them (a default, a reference to compare with); a system added
// later needs no name here.
enum class SystemKind {
  kRecomp,        // no reuse: the whole prompt is computed
  kAsLike,        // AttentionStore-like: full prefix KV from the tiers, next layer prefetched
  kAsH2oLru,      // all keys, all heads scored (H2O), selected values; LRU caching
  kAsH2oLfu,      // the same with LFU caching
  kImpressItf,    // ablation: probe-head ITF, LFU caching, no reorder
  kImpressItfRo,  // ablation: ITF + reorder, LFU caching
  kImpress,       // ITF + reorder + score-based caching
};

// From the registry (pipeline/system-registry.cpp).
const char* SystemName(SystemKind s);  // "impress", "as-h2o-lfu", ...; "?" for an unknown id
bool ParseSystem(const std::string& name, SystemKind* out);

// TTFT, split so that the parts add up to it: match + probe_io + probe_compute + kv_io + copy +
// compute (+ the small remainder in other). probe_io and kv_io count the time compute WAITED
// for those reads (what overlap did not hide); io_wait is their sum.
struct TtftBreakdown {
  double match_ms = 0;
  double probe_io_ms = 0;
  double probe_compute_ms = 0;  // probe scores, Jaccard, selection (and fallback scoring)
  double kv_io_ms = 0;
  double copy_ms = 0;     // host -> device
  double compute_ms = 0;  // embeddings, projections, attention, FFN, logits
  double io_wait_ms = 0;  // probe_io + kv_io
  double other_ms = 0;    // whatever the others do not cover (bookkeeping)
  // Of probe_compute: the scoring kernel itself (the rest is the selection around it: top-k sets,
  // Jaccard, the keep count, the token or group choice). A detail, not a part: Sum leaves it out.
  double probe_score_ms = 0;
  double Sum() const { return match_ms + probe_io_ms + probe_compute_ms + kv_io_ms + copy_ms + compute_ms + other_ms; }
};

struct LayerReport {
  int il = 0;
  double s = 0;            // mean pairwise Jaccard of the probe heads' top-k sets (0 if unused)
  double t = 0;            // threshold (p / (2 - p))^alpha
  bool probed = false;     // the probe step ran
  bool passed = false;     // s >= t: selection from the probe heads alone
  int k = 0;               // prefix tokens used
  int n = 0;               // prefix tokens available (matched)
  uint64_t key_bytes = 0;  // keys read for this layer (probe keys + fallback keys + selected keys)
  uint64_t value_bytes = 0;
  uint64_t ssd_bytes = 0;  // bytes the store read from disk for this layer
  uint32_t ssd_reads = 0;  // read requests those bytes took (runs of consecutive blocks)
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0;
  uint32_t chunks_team = 0;  // spans read from the team tier (a remote match)
  uint64_t team_bytes = 0;   // bytes those reads received
  double io_wait_ms = 0;     // how long compute waited on this layer's reads
  // Cross-layer prefetch (PipelineSettings::cross_layer_prefetch): rows read ahead on the previous
  // layer's selection, and how many of them this layer's own selection used.
  int prefetched = 0, prefetch_used = 0;
  // Predicted selection (PipelineSettings::predict_select): the layer kept the tokens its probe
  // picked one layer early and did not probe again.
  bool predicted = false;
  // The all-heads step took keys read while an earlier layer computed (AS+H2O's prefetch, or a
  // failed prediction's read of the keys its fallback would need).
  bool keys_ahead = false;
};

struct RequestReport {
  SystemKind system = SystemKind::kImpress;
  int n_prompt = 0;          // tokens of the request (prefix + question)
  int n_prefix = 0;          // of which reusable prefix
  int n_matched = 0;         // prefix tokens found in the store
  int n_new = 0;             // tokens computed (n_prompt - n_matched)
  int n_recomputed = 0;      // matched at first, then computed: the store dropped their KV as corrupt
  uint64_t team_tokens = 0;  // prefix tokens whose KV the team tier supplied for this request
  uint64_t team_bytes = 0;   // bytes received from the team tier for them (descriptors and values)
  double team_ms = 0;        // the team-tier lookup (and fill) before the prefill (not part of ttft_ms)
  // The match was a prefix only the team tier held: each layer read its probe keys and selected
  // rows from there (team_read_bytes of team_bytes, inside ttft_ms).
  bool team_remote = false;
  uint64_t team_read_bytes = 0;
  double keep = 0, alpha = 0;
  std::string select_budget;  // how many read groups a layer kept: "mass" or "tokens" (GroupBudget)
  int probe_heads = 0;
  double ttft_ms = 0;
  TtftBreakdown breakdown;
  std::vector<LayerReport> layers;
  uint64_t ssd_bytes_read = 0;
  uint32_t ssd_reads = 0;          // read requests issued to the SSD (a device is bound by these or by bytes)
  uint64_t useful_bytes_read = 0;  // bytes of the K/V the request used, as stored
  uint32_t chunks_device = 0, chunks_host = 0, chunks_ssd = 0, chunks_team = 0;
  // Time some SSD read of the request was in flight (submitted, last block not yet read): the
  // union over its reads, whether compute was waiting or not.
  double read_busy_ms = 0;
  int n_layers_passed = 0;
  // Decode after the first token.
  int n_generated = 0;
  double decode_ms = 0;
  double decode_tok_s() const {
    return decode_ms > 0 ? (n_generated > 1 ? (n_generated - 1) * 1000.0 / decode_ms : 0) : 0;
  }
  // Store write after the answer (background in chat).
  uint64_t tokens_stored = 0;
  // Importance of the prefix tokens per layer, summed over the scored heads and normalised
  // (n_layer x n_matched, row-major); only filled when asked (the GUI's heatmap).
  std::vector<float> importance;
  std::vector<uint8_t> selected;  // same shape: 1 where the token was used
  double read_amplification() const {
    return useful_bytes_read ? double(ssd_bytes_read) / double(useful_bytes_read) : 0.0;
  }
  // The probe's share of TTFT: its key reads compute waited for plus its scoring and selection
  // (for AS+H2O, the all-heads scoring). The paper's bar is <= 6%.
  double probe_share() const {
    return ttft_ms > 0 ? (breakdown.probe_io_ms + breakdown.probe_compute_ms) / ttft_ms : 0.0;
  }
  // How fast the request's SSD reads ran: bytes read / time in flight (GB/s; 0 when none read).
  // Selective reads (many small runs) compare with `bench store`'s sequential rate by this.
  double read_gbs() const { return read_busy_ms > 0 ? double(ssd_bytes_read) / (read_busy_ms * 1e6) : 0.0; }
  // The share of TTFT spent waiting on reads: the I/O that compute did not hide.
  double unhidden_io_share() const { return ttft_ms > 0 ? breakdown.io_wait_ms / ttft_ms : 0.0; }
  // Whether some layer attended to a selection of the reused prefix rather than all of it. The
  // same prompt then answers as full attention would only as closely as the selection allows, so
  // every report says which ran ("selected" or "full").
  bool selected_attention() const {
    for (const LayerReport& l : layers) {
      if (l.k < l.n) return true;
    }
    return false;
  }
  // Prefix tokens attended, summed over layers, over those available (1 for full attention).
  double attended_share() const {
    uint64_t k = 0, n = 0;
    for (const LayerReport& l : layers) {
      k += uint64_t(l.k);
      n += uint64_t(l.n);
    }
    return n ? double(k) / double(n) : 1.0;
  }
};

}  // namespace impress
