// Private to pipeline/: the state of one prefill in flight, shared by impress-pipeline.cpp (the
// request: match, batches, totals) and layer-steps.cpp (each layer's identify-and-load steps).
// Not part of the pipeline's interface; nothing outside pipeline/ includes it.
//
// Thread contract: lives on the stack of one Prefill call, on that call's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "pipeline/impress-pipeline.h"

namespace impress {

using PipelineClock = std::chrono::steady_clock;

inline double ElapsedMs(PipelineClock::time_point a, PipelineClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Accumulates wall time into buckets: each Lap charges the time since the previous one. One
// stopwatch runs through a whole prefill, so the TTFT breakdown's parts tile its wall time.
class Stopwatch {
 public:
  Stopwatch() : last_(PipelineClock::now()) {}
  double Lap(double* bucket) {
    const auto now = PipelineClock::now();
    const double ms = ElapsedMs(last_, now);
    if (bucket) *bucket += ms;
    last_ = now;
    return ms;
  }

 private:
  PipelineClock::time_point last_;
};

// One prefill: its settings, the report it fills, and the stopwatch that charges each stretch of
// time to a bucket of report.breakdown.
struct ImpressPipeline::Run {
  const PipelineSettings& s;
  const SystemPolicy& sys;  // the registry's policy for s.system
  RequestReport& report;
  bool reuse = false;  // a store is there and the system reuses prefix KV
  Stopwatch sw;
  // When each SSD read was in flight (submitted, completed); their union is report.read_busy_ms.
  std::vector<std::pair<PipelineClock::time_point, PipelineClock::time_point>> read_spans = {};
};

// One layer's selection within a prefill: n matched prefix tokens, k of them to keep; the steps
// fill `selected` (ascending prefix positions) and, where heads were scored, `score` (summed
// normalised importance, n values).
struct ImpressPipeline::LayerJob {
  Run& run;
  LayerReport& lr;
  int il = 0;
  int n = 0;
  int k = 0;
  std::vector<uint32_t> selected;
  std::vector<float> score;  // summed normalised importance, as scored
  bool pooled = false;       // the selection ranked by pool_scratch_ (score pooled), not by score
  // Every prefix token's keys as the KV holds them, when the probe read them all (its store keeps
  // probe keys of every KV head in the KV's encoding, or it read all keys): then no key is read
  // twice. Empty otherwise.
  std::vector<f16_t> keys;
  // Predicted reads: the next layer's prediction runs while this layer's own read is in flight
  // (PredictDuringRead), where the compute would otherwise wait; done once.
  bool predict_in_read = false;
  bool predicted = false;
};

}  // namespace impress
