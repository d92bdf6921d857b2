#include "app/serve/metrics.h"
#include "pipeline/system-policy.h"

#include <fmt/format.h>

namespace impress::serve {
namespace {

// One metric family's header.
void Family(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

void ServeMetrics::CountRequest(const std::string& endpoint, int status) {
  MutexLock lock(&mu_);
  ++requests_[{endpoint, status}];
}

void ServeMetrics::CountCancelled() {
  MutexLock lock(&mu_);
  ++cancelled_;
}

void ServeMetrics::RecordGeneration(const RequestReport& r, int n_completion_tokens, bool cancelled) {
  MutexLock lock(&mu_);
  if (cancelled) ++cancelled_;
  const double ttft_s = r.ttft_ms / 1000.0;
  size_t b = 0;
  while (b < kTtftBuckets.size() && ttft_s > kTtftBuckets[b]) ++b;
  ++ttft_counts_[b];
  ttft_sum_s_ += ttft_s;
  ++ttft_count_;
  cached_tokens_ += uint64_t(r.n_matched);
  computed_tokens_ += uint64_t(r.n_prompt - r.n_matched);
  completion_tokens_ += uint64_t(n_completion_tokens);
  // Layers that had stored prefix KV to select from: passed the probe, or fell back to all heads.
  if (r.n_matched > 0 && System(r.system).probes()) {
    layers_passed_ += uint64_t(r.n_layers_passed);
    layers_fell_back_ += uint64_t(int(r.layers.size()) - r.n_layers_passed);
  }
  chunks_device_ += r.chunks_device;
  chunks_host_ += r.chunks_host;
  chunks_ssd_ += r.chunks_ssd;
  chunks_team_ += r.chunks_team;
  ssd_bytes_read_ += r.ssd_bytes_read;
  if (r.ttft_ms > 0) prefill_tok_s_ = (r.n_prompt - r.n_matched) * 1000.0 / r.ttft_ms;
  decode_tok_s_ = r.decode_tok_s();
}

void ServeMetrics::RecordStored(uint64_t n_tokens, uint64_t kv_bytes) {
  MutexLock lock(&mu_);
  tokens_stored_ += n_tokens;
  kv_bytes_stored_ += kv_bytes;
}

void ServeMetrics::SetQueueDepth(int n) {
  MutexLock lock(&mu_);
  queue_depth_ = n;
}

std::string ServeMetrics::Render(store::PrefixStore* store) const {
  std::string out;
  {
    MutexLock lock(&mu_);
    Family(&out, "impress_requests_total", "counter", "HTTP requests by endpoint and status code.");
    for (const auto& [key, n] : requests_) {
      out += fmt::format("impress_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
    }
    Family(&out, "impress_ttft_seconds", "histogram", "Time to first token of each generation.");
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kTtftBuckets.size(); ++b) {
      cumulative += ttft_counts_[b];
      out += fmt::format("impress_ttft_seconds_bucket{{le=\"{}\"}} {}\n", kTtftBuckets[b], cumulative);
    }
    cumulative += ttft_counts_.back();
    out += fmt::format("impress_ttft_seconds_bucket{{le=\"+Inf\"}} {}\n", cumulative);
    out += fmt::format("impress_ttft_seconds_sum {}\nimpress_ttft_seconds_count {}\n", ttft_sum_s_, ttft_count_);
    Family(&out, "impress_prompt_tokens_total", "counter", "Prompt tokens, reused from the store or computed.");
    out += fmt::format("impress_prompt_tokens_total{{kind=\"cached\"}} {}\n", cached_tokens_);
    out += fmt::format("impress_prompt_tokens_total{{kind=\"computed\"}} {}\n", computed_tokens_);
    Family(&out, "impress_completion_tokens_total", "counter", "Generated tokens.");
    out += fmt::format("impress_completion_tokens_total {}\n", completion_tokens_);
    Family(&out, "impress_cancelled_total", "counter",
           "Generations a cancel stopped: the client went away, the time limit passed, or shutdown.");
    out += fmt::format("impress_cancelled_total {}\n", cancelled_);
    Family(&out, "impress_prefill_tokens_per_second", "gauge", "Computed prompt tokens per second, last request.");
    out += fmt::format("impress_prefill_tokens_per_second {}\n", prefill_tok_s_);
    Family(&out, "impress_decode_tokens_per_second", "gauge", "Decode speed of the last request.");
    out += fmt::format("impress_decode_tokens_per_second {}\n", decode_tok_s_);
    Family(&out, "impress_layers_total", "counter",
           "IMPRESS layers over a stored prefix: probe passed, or fell back to scoring all heads.");
    out += fmt::format("impress_layers_total{{verdict=\"passed\"}} {}\n", layers_passed_);
    out += fmt::format("impress_layers_total{{verdict=\"fell_back\"}} {}\n", layers_fell_back_);
    Family(&out, "impress_chunks_served_total", "counter", "Stored KV chunks the requests used, by tier.");
    out += fmt::format("impress_chunks_served_total{{tier=\"device\"}} {}\n", chunks_device_);
    out += fmt::format("impress_chunks_served_total{{tier=\"host\"}} {}\n", chunks_host_);
    out += fmt::format("impress_chunks_served_total{{tier=\"ssd\"}} {}\n", chunks_ssd_);
    out += fmt::format("impress_chunks_served_total{{tier=\"team\"}} {}\n", chunks_team_);
    Family(&out, "impress_request_ssd_read_bytes_total", "counter", "Bytes the requests read from SSD.");
    out += fmt::format("impress_request_ssd_read_bytes_total {}\n", ssd_bytes_read_);
    Family(&out, "impress_store_written_tokens_total", "counter", "Tokens whose KV the answers wrote to the store.");
    out += fmt::format("impress_store_written_tokens_total {}\n", tokens_stored_);
    Family(&out, "impress_store_written_bytes_total", "counter",
           "K/V bytes the answers wrote to the store (fp16 payload, without probe keys and chunk headers).");
    out += fmt::format("impress_store_written_bytes_total {}\n", kv_bytes_stored_);
    Family(&out, "impress_queue_depth", "gauge", "Requests waiting for the model worker.");
    out += fmt::format("impress_queue_depth {}\n", queue_depth_);
  }
  if (!store) return out;
  const store::StoreStats s = store->Stats();
  auto ratio = [](uint64_t hits, uint64_t misses) { return hits + misses ? double(hits) / double(hits + misses) : 0; };
  Family(&out, "impress_tier_used_bytes", "gauge", "Bytes held in each memory tier.");
  out += fmt::format("impress_tier_used_bytes{{tier=\"device\"}} {}\n", s.tiers.device.used_bytes);
  out += fmt::format("impress_tier_used_bytes{{tier=\"host\"}} {}\n", s.tiers.host.used_bytes);
  Family(&out, "impress_tier_budget_bytes", "gauge", "Budget of each memory tier.");
  out += fmt::format("impress_tier_budget_bytes{{tier=\"device\"}} {}\n", s.tiers.device.budget_bytes);
  out += fmt::format("impress_tier_budget_bytes{{tier=\"host\"}} {}\n", s.tiers.host.budget_bytes);
  Family(&out, "impress_tier_hit_ratio", "gauge", "Chunk accesses served by each memory tier (store lifetime).");
  out +=
      fmt::format("impress_tier_hit_ratio{{tier=\"device\"}} {}\n", ratio(s.tiers.device.hits, s.tiers.device.misses));
  out += fmt::format("impress_tier_hit_ratio{{tier=\"host\"}} {}\n", ratio(s.tiers.host.hits, s.tiers.host.misses));
  Family(&out, "impress_store_ssd_bytes", "gauge", "Size of the store's data files and catalog.");
  out += fmt::format("impress_store_ssd_bytes {}\n", s.ssd_disk_bytes + s.catalog_bytes);
  Family(&out, "impress_store_ssd_cap_bytes", "gauge", "The store's SSD budget.");
  out += fmt::format("impress_store_ssd_cap_bytes {}\n", s.ssd_cap_bytes);
  Family(&out, "impress_store_ssd_read_bytes_total", "counter", "Bytes the store read from SSD since it opened.");
  out += fmt::format("impress_store_ssd_read_bytes_total {}\n", s.ssd_bytes_read);
  Family(&out, "impress_store_tokens", "gauge", "Tokens whose KV the store holds.");
  out += fmt::format("impress_store_tokens {}\n", s.n_tokens);
  Family(&out, "impress_store_inserts_total", "counter", "KV inserts into the store (and failures).");
  out += fmt::format("impress_store_inserts_total{{result=\"ok\"}} {}\n",
                     s.inserts - std::min(s.inserts, s.insert_failures));
  out += fmt::format("impress_store_inserts_total{{result=\"failed\"}} {}\n", s.insert_failures);
  if (!s.team.configured) return out;
  Family(&out, "impress_team_connected", "gauge", "Whether the team KV tier's last request reached Redis.");
  out += fmt::format("impress_team_connected {}\n", s.team.connected ? 1 : 0);
  Family(&out, "impress_team_fills_total", "counter", "Local misses the team KV tier was asked for (and hits).");
  out += fmt::format("impress_team_fills_total{{result=\"hit\"}} {}\n", s.team.fill_hits);
  out += fmt::format("impress_team_fills_total{{result=\"miss\"}} {}\n", s.team.fills - s.team.fill_hits);
  Family(&out, "impress_team_tokens_total", "counter", "Prefix tokens whose KV came from the team KV tier.");
  out += fmt::format("impress_team_tokens_total {}\n", s.team.tokens_filled);
  Family(&out, "impress_team_read_bytes_total", "counter", "Bytes read from the team KV tier.");
  out += fmt::format("impress_team_read_bytes_total {}\n", s.team.bytes_read);
  Family(&out, "impress_team_errors_total", "counter", "Team KV tier fills that fell back to local KV or recompute.");
  out += fmt::format("impress_team_errors_total {}\n", s.team.errors);
  Family(&out, "impress_team_published_spans_total", "counter", "Spans of KV published to the team KV tier.");
  out += fmt::format("impress_team_published_spans_total {}\n", s.team.spans_published);
  return out;
}

}  // namespace impress::serve
