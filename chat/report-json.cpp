#include "chat/report-json.h"

#include <algorithm>

namespace impress {

nlohmann::json TtftBreakdownJson(const TtftBreakdown& b) {
  return {{"match", b.match_ms},     {"probe_io", b.probe_io_ms}, {"probe_compute", b.probe_compute_ms},
          {"kv_io", b.kv_io_ms},     {"copy", b.copy_ms},         {"compute", b.compute_ms},
          {"io_wait", b.io_wait_ms}, {"other", b.other_ms},       {"probe_score", b.probe_score_ms}};
}

nlohmann::json TeamTierJson(const store::TeamTierInfo& t) {
  return {{"configured", t.configured},
          {"status", t.status},
          {"team", t.team},
          {"fills", t.fills},
          {"hits", t.fill_hits},
          {"tokens", t.tokens_filled},
          {"bytes_read", t.bytes_read},
          {"errors", t.errors},
          {"corrupt", t.corrupt},
          {"mean_latency_ms", t.mean_latency_ms()},
          {"published_spans", t.spans_published},
          {"published_bytes", t.bytes_written},
          {"publish_refused_private", t.publish_refused_private},
          {"publish_refused_full", t.publish_refused_full},
          {"publish_failed", t.publish_failed},
          {"publish_queued_bytes", t.publish_queued_bytes}};
}

nlohmann::json RequestReportJson(const RequestReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerReport& l : r.layers) {
    layers.push_back(
        {{"il", l.il},
         {"s", l.s},
         {"t", l.t},
         {"probed", l.probed},
         {"passed", l.passed},
         {"k", l.k},
         {"n", l.n},
         {"key_bytes", l.key_bytes},
         {"value_bytes", l.value_bytes},
         {"ssd_bytes", l.ssd_bytes},
         {"ssd_reads", l.ssd_reads},
         {"io_wait_ms", l.io_wait_ms},
         {"prefetched", l.prefetched},
         {"prefetch_used", l.prefetch_used},
         {"keys_ahead", l.keys_ahead},
         {"predicted", l.predicted},
         {"team_bytes", l.team_bytes},
         {"chunks",
          {{"device", l.chunks_device}, {"host", l.chunks_host}, {"ssd", l.chunks_ssd}, {"team", l.chunks_team}}}});
  }
  return {{"system", SystemName(r.system)},
          {"ttft_ms", r.ttft_ms},
          {"breakdown_ms", TtftBreakdownJson(r.breakdown)},
          {"probe_score_ms", r.breakdown.probe_score_ms},  // part of probe_compute: the scoring kernels
          {"layers", layers},
          {"n_prompt", r.n_prompt},
          {"n_prefix", r.n_prefix},
          {"reused_tokens", r.n_matched},
          {"team_tokens", r.team_tokens},
          {"team_bytes", r.team_bytes},
          {"team_ms", r.team_ms},
          {"team_remote", r.team_remote},
          {"team_read_bytes", r.team_read_bytes},
          {"new_tokens", r.n_new},
          {"attention", r.selected_attention() ? "selected" : "full"},
          {"attended_share", r.attended_share()},
          {"keep", r.keep},
          {"select_budget", r.select_budget},
          {"alpha", r.alpha},
          {"layers_passed", r.n_layers_passed},
          {"layers_predicted",
           std::count_if(r.layers.begin(), r.layers.end(), [](const LayerReport& l) { return l.predicted; })},
          {"ssd_bytes_read", r.ssd_bytes_read},
          {"ssd_reads", r.ssd_reads},
          {"read_amplification", r.read_amplification()},
          {"probe_share", r.probe_share()},
          {"unhidden_io_share", r.unhidden_io_share()},
          {"read_gbs", r.read_gbs()},
          {"tier_hits",
           {{"device", r.chunks_device}, {"host", r.chunks_host}, {"ssd", r.chunks_ssd}, {"team", r.chunks_team}}},
          {"decode_tok_s", r.decode_tok_s()}};
}

}  // namespace impress
