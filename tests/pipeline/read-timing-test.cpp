// Where the pipeline books store reads that take a known time (SlowReadEnv): a wait for a read is
// I/O, not compute, whether the pipeline waits for the whole read or its attention takes the rows
// as they arrive; attending while reading changes when compute runs, never the answer; and rows
// read ahead into a layer's buffers are the rows its selection named.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <vector>

#include "pipeline/impress-pipeline.h"
#include "pipeline/system-policy.h"
#include "tests/pipeline/pipeline-on-model.h"

namespace impress {
namespace {

using ::impress::test_support::PipelineOnModel;
using ::impress::test_support::SlowReadEnv;

// Names, for each layer, the positions in `Replayed()` (another run's selection), read by the
// layer itself once it asks.
std::vector<std::vector<uint32_t>>& Replayed() {
  static std::vector<std::vector<uint32_t>> layers;
  return layers;
}

class ReplaySystem : public SystemPolicy {
 public:
  ReplaySystem() :
      SystemPolicy(SystemTraits{.name = "replay",
                                .display = "replay",
                                .description = "the positions another run chose, layer by layer",
                                .selection = LayerSelection::kPositions,
                                .cache = store::PolicyKind::kLru,
                                .reorders = false}) {}
  Status ChoosePositions(int il, int, int, const PipelineSettings&, std::vector<uint32_t>* out) const override {
    if (size_t(il) >= Replayed().size()) return Status::Internal("replay: no positions for this layer");
    *out = Replayed()[size_t(il)];
    return Status::Ok();
  }
};

SystemKind ReplayId() {
  static const SystemKind id = [] {
    Result<SystemKind> r = RegisterSystem(std::make_unique<ReplaySystem>());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : SystemKind::kRecomp;
  }();
  return id;
}

// A known delay on every store read lands in the I/O buckets, not in compute. The store reads
// on one worker here, so the delayed reads run one after another inside the pipeline's waits:
// the I/O buckets hold at least n_delayed * delay. Had the waits been booked to compute (or left
// to `other`), the rest would have grown by as much; it may grow by less than half of it (how
// busy the machine is). The bounds use only the injected delay, never how fast this machine is.
TEST_F(PipelineOnModel, InjectedReadDelayIsBookedAsIoNotCompute) {
  SlowReadEnv env;
  ASSERT_NO_FATAL_FAILURE(OpenSsdOnlyStore(&env));
  const PromptTokens p = Prompt("Summarise the preamble in one sentence.");
  ASSERT_NO_FATAL_FAILURE(Ingest(p));
  PipelineSettings s;
  s.system = SystemKind::kImpress;
  s.keep = 1.0f;
  s.alpha = 50.0f;           // every layer passes: one probe-key read and one K/V read per layer
  s.overlap = false;         // no prefetch: each read is waited for, whole, in its own bucket
  s.predict_select = false;  // each layer probes, then reads (a predicted selection reads a layer ahead)
  s.attend_while_reading = false;
  std::vector<float> logits;
  const RequestReport plain = Run(p, s, &logits);
  ASSERT_EQ(plain.n_matched, p.n_prefix);
  constexpr int kDelayMs = 60;  // 60 reads: ~3.6 s of I/O, so load swings of the rest stay far below half
  env.delay_ms = kDelayMs;
  const RequestReport slow = Run(p, s, &logits);
  env.delay_ms = 0;
  ASSERT_EQ(slow.n_matched, p.n_prefix);
  const double injected_ms = double(env.n_delayed.load()) * kDelayMs;
  ASSERT_GT(injected_ms, 0.0);

  for (const LayerReport& lr : slow.layers) {
    ASSERT_TRUE(lr.passed) << "layer " << lr.il;
    ASSERT_GT(lr.chunks_ssd, 0u) << "layer " << lr.il << ": tiers are off, every read comes from the files";
    EXPECT_GE(lr.io_wait_ms, 2.0 * kDelayMs) << "layer " << lr.il << ": two delayed reads at least";
  }
  const TtftBreakdown& a = plain.breakdown;
  const TtftBreakdown& b = slow.breakdown;
  EXPECT_GE(b.probe_io_ms, double(ctx_->config().n_layer) * kDelayMs);
  EXPECT_GE(b.kv_io_ms, double(ctx_->config().n_layer) * kDelayMs);
  EXPECT_GE(b.probe_io_ms + b.kv_io_ms, injected_ms);
  EXPECT_NEAR(b.io_wait_ms, b.probe_io_ms + b.kv_io_ms, 1e-6);
  const auto not_io = [](const TtftBreakdown& x) {
    return x.match_ms + x.probe_compute_ms + x.copy_ms + x.compute_ms + x.other_ms;
  };
  spdlog::info(
      "breakdown without / with {} ms on each of {} reads: I/O {:.0f} / {:.0f} ms, the rest {:.0f} / {:.0f} ms",
      kDelayMs, env.n_delayed.load(), a.probe_io_ms + a.kv_io_ms, b.probe_io_ms + b.kv_io_ms, not_io(a), not_io(b));
  // No wall-clock bound on the rest (a loaded machine stretches compute arbitrarily): the buckets
  // add up to TTFT with nothing negative, so the injected time the I/O buckets hold above is time
  // that no other bucket can also have claimed.
  for (double ms : {b.match_ms, b.probe_compute_ms, b.copy_ms, b.compute_ms, b.other_ms}) EXPECT_GE(ms, 0.0);
  EXPECT_NEAR(not_io(b) + b.probe_io_ms + b.kv_io_ms, slow.ttft_ms, 1e-3 * slow.ttft_ms);
  // That sum holds by construction (other_ms takes whatever the stopwatch laps left), so the
  // buckets are checked against the injected delay itself: each I/O bucket grew by (nearly) the
  // delays of its own reads, one of each per layer, and the remainder did not absorb the
  // injected time: other_ms grew by less than half of it (a wait booked to no bucket, or to
  // other, would have grown it by all of it).
  const double per_kind_ms = double(ctx_->config().n_layer) * kDelayMs;
  EXPECT_GE(b.probe_io_ms - a.probe_io_ms, 0.9 * per_kind_ms);
  EXPECT_GE(b.kv_io_ms - a.kv_io_ms, 0.9 * per_kind_ms);
  EXPECT_LT(b.other_ms - a.other_ms, 0.5 * injected_ms);
  EXPECT_LT(b.other_ms, 0.5 * injected_ms);
  // The shares the benchmarks print: the waited-for I/O holds the injected time, and the probe's
  // share is its reads plus its scoring.
  EXPECT_NEAR(slow.unhidden_io_share(), b.io_wait_ms / slow.ttft_ms, 1e-12);
  EXPECT_GE(slow.unhidden_io_share() * slow.ttft_ms, injected_ms);
  EXPECT_NEAR(slow.probe_share(), (b.probe_io_ms + b.probe_compute_ms) / slow.ttft_ms, 1e-12);
  EXPECT_GT(slow.probe_share(), 0.0);
  // The scoring is a part of the probe's compute (every layer passed, so each was scored).
  EXPECT_GT(b.probe_score_ms, 0.0);
  EXPECT_LE(b.probe_score_ms, b.probe_compute_ms);
  EXPECT_LT(slow.probe_share() + slow.breakdown.kv_io_ms / slow.ttft_ms, 1.0 + 1e-9);
}

// Attend while reading: each layer's attention takes its selected rows as their chunks arrive.
// With a delay on every store read, the same request with and without it uses the same tokens and
// gives bit-identical logits (probe passing and falling back alike), and the attention's wait for
// the delayed rows is booked as K/V I/O, not compute: each layer's first block of keys cannot start
// before its read's first delayed op, so the K/V bucket holds most of one delay per layer (half is
// the bound: what the attention did meanwhile is hidden, however busy the machine).
TEST_F(PipelineOnModel, AttendingWhileReadingChangesNothingButWhenComputeRuns) {
  SlowReadEnv env;
  ASSERT_NO_FATAL_FAILURE(OpenSsdOnlyStore(&env));
  const PromptTokens p = Prompt("What does the license say about warranty?");
  ASSERT_NO_FATAL_FAILURE(Ingest(p));
  constexpr int kDelayMs = 40;
  for (const float alpha : {50.0f, 0.0f}) {
    PipelineSettings s = Recording(alpha);
    s.overlap = false;
    s.predict_select = false;  // the layers' own reads stream (a read ahead is not streamed)
    std::vector<float> waited, streamed;
    env.delay_ms = kDelayMs;
    s.attend_while_reading = false;
    const RequestReport r0 = Run(p, s, &waited);
    s.attend_while_reading = true;
    const RequestReport r1 = Run(p, s, &streamed);
    env.delay_ms = 0;
    ASSERT_EQ(r0.n_matched, p.n_prefix);
    ASSERT_EQ(r1.n_matched, p.n_prefix);
    EXPECT_EQ(r0.selected, r1.selected) << "alpha " << alpha;
    EXPECT_EQ(waited, streamed) << "alpha " << alpha;
    EXPECT_EQ(r0.n_layers_passed, r1.n_layers_passed);
    EXPECT_GE(r1.breakdown.kv_io_ms, 0.5 * kDelayMs * ctx_->config().n_layer) << "alpha " << alpha;
    EXPECT_NEAR(r1.breakdown.io_wait_ms, r1.breakdown.probe_io_ms + r1.breakdown.kv_io_ms, 1e-6);
  }
}

// A predicted selection's rows are read straight into the layer's buffers while the layer before
// computes, each chunk's rows placed as it arrives. With a delay on every store read (the layers
// wait for rows still in flight), they are the rows the selection named, in its order: a system
// that names the same positions layer by layer, each read once its layer asks, gives bit-identical
// logits, and so does the same request without the delay.
TEST_F(PipelineOnModel, PredictedRowsReadIntoTheLayerAreTheRowsItNamed) {
  SlowReadEnv env;
  ASSERT_NO_FATAL_FAILURE(OpenSsdOnlyStore(&env, /*int4_probe=*/true));
  const PromptTokens p = Prompt("What does the license say about warranty?");
  ASSERT_NO_FATAL_FAILURE(Ingest(p));
  PipelineSettings s = Recording(50.0f);  // every prediction passes its test
  s.predict_select = true;
  std::vector<float> slow, quick, replayed;
  env.delay_ms = 25;
  const RequestReport r1 = Run(p, s, &slow);
  env.delay_ms = 0;
  ASSERT_GT(env.n_delayed.load(), 0u);
  ASSERT_EQ(r1.n_matched, p.n_prefix);
  const size_t n = size_t(p.n_prefix);
  Replayed().assign(r1.layers.size(), {});
  int predicted = 0;
  for (const LayerReport& l : r1.layers) {
    for (size_t j = 0; j < n; ++j)
      if (r1.selected[size_t(l.il) * n + j]) Replayed()[size_t(l.il)].push_back(uint32_t(j));
    ASSERT_EQ(Replayed()[size_t(l.il)].size(), size_t(l.k)) << "layer " << l.il;
    if (!l.predicted) continue;
    ++predicted;
    EXPECT_EQ(l.prefetch_used, l.k) << "layer " << l.il << ": every row from the read ahead";
  }
  EXPECT_GT(predicted, int(r1.layers.size()) / 2);
  const RequestReport r2 = Run(p, s, &quick);
  EXPECT_EQ(r1.selected, r2.selected);
  EXPECT_EQ(slow, quick);
  PipelineSettings replay = s;
  replay.system = ReplayId();
  const RequestReport r3 = Run(p, replay, &replayed);
  ASSERT_EQ(r3.n_matched, p.n_prefix);
  EXPECT_EQ(r1.selected, r3.selected);
  for (const LayerReport& l : r3.layers) EXPECT_EQ(l.prefetched, 0) << "layer " << l.il << ": read when asked";
  ASSERT_FALSE(slow.empty());
  EXPECT_EQ(slow, replayed);
}

}  // namespace
}  // namespace impress
