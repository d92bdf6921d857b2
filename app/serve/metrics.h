// ServeMetrics: the counters of `impress serve` and their Prometheus text exposition
// (GET /metrics): requests by endpoint and status, a TTFT histogram, prefill/decode speed,
// cached vs computed prompt tokens, IMPRESS layers passed vs fell back, chunks served per tier;
// and, from the store's own statistics at scrape time, tier occupancy and hit ratios, SSD bytes
// read and written, and the store's size against its cap.
//
// Thread contract: internally synchronized; every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "pipeline/report.h"
#include "store/prefix-store.h"

namespace impress::serve {

class ServeMetrics {
 public:
  // TTFT histogram bucket bounds, seconds (+Inf implied).
  static constexpr std::array<double, 10> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  // One finished HTTP request (every endpoint, every status).
  void CountRequest(const std::string& endpoint, int status) EXCLUDES(mu_);
  // One generation that ran: its prefill report, the tokens it generated, whether a cancel
  // (client gone, time limit, shutdown) cut it short.
  void RecordGeneration(const RequestReport& report, int n_completion_tokens, bool cancelled) EXCLUDES(mu_);
  // A request cancelled before or during its prefill.
  void CountCancelled() EXCLUDES(mu_);
  // One answer's KV written to the store: its tokens and their K/V bytes.
  void RecordStored(uint64_t n_tokens, uint64_t kv_bytes) EXCLUDES(mu_);
  void SetQueueDepth(int n) EXCLUDES(mu_);

  // The exposition text; `store` (may be null) adds the store's gauges.
  std::string Render(store::PrefixStore* store) const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ GUARDED_BY(mu_);
  std::array<uint64_t, kTtftBuckets.size() + 1> ttft_counts_ GUARDED_BY(mu_) = {};
  double ttft_sum_s_ GUARDED_BY(mu_) = 0;
  uint64_t ttft_count_ GUARDED_BY(mu_) = 0;
  uint64_t cached_tokens_ GUARDED_BY(mu_) = 0, computed_tokens_ GUARDED_BY(mu_) = 0;
  uint64_t completion_tokens_ GUARDED_BY(mu_) = 0;
  uint64_t cancelled_ GUARDED_BY(mu_) = 0;
  uint64_t layers_passed_ GUARDED_BY(mu_) = 0, layers_fell_back_ GUARDED_BY(mu_) = 0;
  uint64_t chunks_device_ GUARDED_BY(mu_) = 0, chunks_host_ GUARDED_BY(mu_) = 0, chunks_ssd_ GUARDED_BY(mu_) = 0,
                          chunks_team_ GUARDED_BY(mu_) = 0;
  uint64_t ssd_bytes_read_ GUARDED_BY(mu_) = 0;
  uint64_t tokens_stored_ GUARDED_BY(mu_) = 0, kv_bytes_stored_ GUARDED_BY(mu_) = 0;
  double prefill_tok_s_ GUARDED_BY(mu_) = 0, decode_tok_s_ GUARDED_BY(mu_) = 0;
  int queue_depth_ GUARDED_BY(mu_) = 0;
};

}  // namespace impress::serve
