// The numbers the GUI panels show: hit rates, stacked TTFT segments, heatmap binning and
// normalisation, probe verdict colouring, frame statistics, settings files and script parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "gui/gui-config.h"
#include "gui/png-image.h"
#include "gui/script.h"
#include "gui/snapshot-math.h"

namespace impress::gui {
namespace {

TEST(HitRates, RequestSharesAddUpToOne) {
  RequestReport r;
  r.chunks_device = 6;
  r.chunks_host = 3;
  r.chunks_ssd = 1;
  const HitRates h = RequestHitRates(r);
  EXPECT_EQ(h.total, 10u);
  EXPECT_DOUBLE_EQ(h.device, 0.6);
  EXPECT_DOUBLE_EQ(h.host, 0.3);
  EXPECT_DOUBLE_EQ(h.ssd, 0.1);
}

TEST(HitRates, NoAccessesIsAllZero) {
  const HitRates h = RequestHitRates(RequestReport{});
  EXPECT_EQ(h.total, 0u);
  EXPECT_EQ(h.device + h.host + h.ssd, 0.0);
}

TEST(HitRates, StoreCountersAndDeltas) {
  store::TierStats a, b;
  a.device.hits = 10;
  a.host.hits = 5;
  a.ssd_reads = 5;
  b = a;
  b.device.hits += 1;
  b.host.hits += 1;
  b.ssd_reads += 2;
  const HitRates all = StoreHitRates(b);
  EXPECT_DOUBLE_EQ(all.device, 11.0 / 24.0);
  const HitRates d = HitRatesBetween(a, b);
  EXPECT_EQ(d.total, 4u);
  EXPECT_DOUBLE_EQ(d.ssd, 0.5);
  // A counter that went backwards (store reopened) counts as zero, never as a huge number.
  const HitRates back = HitRatesBetween(b, a);
  EXPECT_EQ(back.total, 0u);
}

TEST(StackTtft, SegmentsAreContiguousAndSumToTheBreakdown) {
  TtftBreakdown b;
  b.match_ms = 1;
  b.probe_io_ms = 2;
  b.probe_compute_ms = 3;
  b.kv_io_ms = 4;
  b.copy_ms = 0.5;
  b.compute_ms = 100;
  b.other_ms = 0.25;
  b.io_wait_ms = 6;  // = probe_io + kv_io: not stacked again
  const auto segs = StackTtft(b);
  ASSERT_EQ(segs.size(), TtftPartNames().size());
  double at = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(segs[i].part, int(i));
    EXPECT_DOUBLE_EQ(segs[i].start_ms, at);
    at += segs[i].length_ms;
  }
  EXPECT_DOUBLE_EQ(at, b.Sum());
  EXPECT_DOUBLE_EQ(segs[5].length_ms, 100);
}

TEST(StackTtft, NegativeAndNanPartsDrawAsZero) {
  TtftBreakdown b;
  b.match_ms = -3;
  b.compute_ms = std::nan("");
  b.copy_ms = 2;
  const auto segs = StackTtft(b);
  EXPECT_EQ(segs[0].length_ms, 0);
  EXPECT_EQ(segs[5].length_ms, 0);
  EXPECT_EQ(segs.back().start_ms + segs.back().length_ms, 2);
}

// Reference: the heatmap built the slow, obvious way.
TEST(Heatmap, BinsByMaxAndNormalisesEachLayerToItsMaximum) {
  const int n_layer = 5, n_tok = 37, max_cols = 8;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0, 3);
  std::vector<float> imp(n_layer * n_tok);
  std::vector<uint8_t> sel(imp.size());
  for (size_t i = 0; i < imp.size(); ++i) {
    imp[i] = u(rng);
    sel[i] = (i % 11) == 0;
  }
  for (int t = 0; t < n_tok; ++t) imp[3 * n_tok + t] = 0;  // layer 3: all zero
  imp[1 * n_tok + 5] = std::nan("");
  const Heatmap h = BuildHeatmap(imp, sel, n_layer, n_tok, max_cols);
  ASSERT_EQ(h.n_rows, n_layer);
  EXPECT_EQ(h.tokens_per_col, 5);  // ceil(37 / 8)
  EXPECT_EQ(h.n_cols, 8);          // ceil(37 / 5)
  for (int l = 0; l < n_layer; ++l) {
    float row_max = 0;
    for (int t = 0; t < n_tok; ++t) {
      const float v = imp[l * n_tok + t];
      if (std::isfinite(v)) row_max = std::max(row_max, v);
    }
    float seen_max = 0;
    for (int c = 0; c < h.n_cols; ++c) {
      int first, last;
      HeatmapColumnTokens(h, n_tok, c, &first, &last);
      float m = 0;
      uint8_t s = 0;
      for (int t = first; t < last; ++t) {
        if (std::isfinite(imp[l * n_tok + t])) m = std::max(m, imp[l * n_tok + t]);
        s |= sel[l * n_tok + t];
      }
      const float want = row_max > 0 ? m / row_max : 0;
      EXPECT_NEAR(h.value[l * h.n_cols + c], want, 1e-6) << "layer " << l << " col " << c;
      EXPECT_EQ(h.selected[l * h.n_cols + c], s);
      seen_max = std::max(seen_max, h.value[l * h.n_cols + c]);
    }
    EXPECT_FLOAT_EQ(seen_max, l == 3 ? 0.0f : 1.0f);
  }
  int first, last;
  HeatmapColumnTokens(h, n_tok, h.n_cols - 1, &first, &last);
  EXPECT_EQ(first, 35);
  EXPECT_EQ(last, 37);
}

TEST(Heatmap, FewTokensGetOneColumnEach) {
  std::vector<float> imp = {1, 2, 4, 0, 0, 0};
  const Heatmap h = BuildHeatmap(imp, {}, 2, 3, 100);
  EXPECT_EQ(h.n_cols, 3);
  EXPECT_EQ(h.tokens_per_col, 1);
  EXPECT_FLOAT_EQ(h.value[0], 0.25f);
  EXPECT_FLOAT_EQ(h.value[2], 1.0f);
  EXPECT_FLOAT_EQ(h.value[4], 0.0f);
}

TEST(Heatmap, ShapeMismatchGivesAnEmptyMap) {
  const Heatmap h = BuildHeatmap(std::vector<float>(10, 1.0f), {}, 4, 30, 100);
  EXPECT_EQ(h.n_rows, 0);
  EXPECT_TRUE(h.value.empty());
}

TEST(ProbeVerdict, ColourFollowsJaccardAgainstThreshold) {
  LayerReport l;
  EXPECT_EQ(ClassifyLayer(l), ProbeVerdict::kNotProbed);
  l.probed = true;
  l.s = 0.30;
  l.t = JaccardThreshold(0.25, 0.6);  // the pipeline's own threshold
  EXPECT_EQ(ClassifyLayer(l), l.s >= l.t ? ProbeVerdict::kPassed : ProbeVerdict::kFallback);
  l.s = l.t;
  EXPECT_EQ(ClassifyLayer(l), ProbeVerdict::kPassed);  // s >= t passes
  l.s = std::nextafter(l.t, 0.0);
  EXPECT_EQ(ClassifyLayer(l), ProbeVerdict::kFallback);
  std::vector<LayerReport> layers(4, l);
  layers[1].s = 1;
  layers[2].s = 1;
  layers[3].probed = false;
  layers[3].s = 1;
  EXPECT_EQ(CountPassed(layers), 2);
}

TEST(FrameStats, MaxAndNearestRankP99) {
  std::vector<double> ms;
  for (int i = 100; i >= 1; --i) ms.push_back(i);
  const FrameStats s = ComputeFrameStats(ms);
  EXPECT_EQ(s.n, 100u);
  EXPECT_EQ(s.max_ms, 100);
  EXPECT_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.mean_ms, 50.5);
  EXPECT_EQ(ComputeFrameStats({}).n, 0u);
  EXPECT_EQ(ComputeFrameStats({7}).p99_ms, 7);
}

TEST(ReuseSummary, SaysWhereThePrefixCameFrom) {
  RequestReport r;
  r.n_new = 300;
  EXPECT_EQ(ReuseSummary(r), "nothing reused (computed 300 tokens)");
  r.n_matched = 250;
  r.n_prefix = 260;
  r.chunks_device = 1;
  r.chunks_ssd = 3;
  EXPECT_EQ(ReuseSummary(r), "250 of 260 prefix tokens reused (chunks: device 1 / host 0 / SSD 3)");
}

TEST(ImageContent, BlankAndDrawnFrames) {
  RgbaImage im{4, 4, std::vector<uint8_t>(64, 30)};
  ImageContent c = MeasureContent(im);
  EXPECT_EQ(c.distinct_colours, 1u);
  EXPECT_EQ(c.non_background, 0.0);
  im.pixels[0] = 200;   // one pixel red-ish
  im.pixels[4 * 5 + 1] = 90;
  c = MeasureContent(im);
  EXPECT_EQ(c.distinct_colours, 3u);
  EXPECT_DOUBLE_EQ(c.non_background, 2.0 / 16.0);
}

TEST(Png, RoundTrip) {
  const std::string path = (std::filesystem::temp_directory_path() / "impress-gui-png-test.png").string();
  RgbaImage im{3, 2, {}};
  for (int i = 0; i < 6; ++i) im.pixels.insert(im.pixels.end(), {uint8_t(i * 40), uint8_t(255 - i), 7, 255});
  ASSERT_TRUE(WritePng(path, im).ok());
  auto back = ReadPng(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->width, 3);
  EXPECT_EQ(back->pixels, im.pixels);
  std::filesystem::remove(path);
  EXPECT_FALSE(ReadPng(path).ok());
}

TEST(TuningConfig, RoundTripsAndNamesBadKeys) {
  TuningSettings s;
  s.pipeline.alpha = 1.25f;
  s.pipeline.system = SystemKind::kAsH2oLfu;
  s.policy = store::PolicyKind::kLru;
  s.host_budget_mb = 77;
  auto back = ParseTuning(TuningToJson(s), TuningSettings{});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FLOAT_EQ(back->pipeline.alpha, 1.25f);
  EXPECT_EQ(back->pipeline.system, SystemKind::kAsH2oLfu);
  EXPECT_EQ(back->policy, store::PolicyKind::kLru);
  EXPECT_EQ(back->host_budget_mb, 77);

  auto bad = ParseTuning(R"({"alpha": 7})", TuningSettings{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("alpha"), std::string::npos);
  auto wrong_type = ParseTuning(R"({"keep": "half"})", TuningSettings{});
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("keep"), std::string::npos);
  EXPECT_FALSE(ParseTuning("{not json", TuningSettings{}).ok());
  auto unknown_kept = ParseTuning(R"({"future_key": 1, "recent": 64})", TuningSettings{});
  ASSERT_TRUE(unknown_kept.ok());
  EXPECT_EQ(unknown_kept->pipeline.recent, 64);
}

TEST(TuningConfig, SaveThenLoadAndMissingFileGivesDefaults) {
  const auto dir = std::filesystem::temp_directory_path() / "impress-gui-config-test";
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "gui.json").string();
  TuningSettings d;
  d.max_tokens = 99;
  auto first = LoadTuning(path, d);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->max_tokens, 99);
  TuningSettings s;
  s.pipeline.keep = 0.5f;
  ASSERT_TRUE(SaveTuning(path, s).ok());
  auto again = LoadTuning(path, d);
  ASSERT_TRUE(again.ok());
  EXPECT_FLOAT_EQ(again->pipeline.keep, 0.5f);
  std::filesystem::remove_all(dir);
}

TEST(Script, ParsesCommandsAndRejectsTyposWithTheLine) {
  auto ok = ParseScript("# demo\ndoc /tmp/a.md\n\nask What is it?\nwait\nset alpha 1.2\nagain\nwait 30\ntab tiers\n"
                        "screenshot /tmp/x.png\nquit\n",
                        "demo.script");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 9u);
  EXPECT_EQ((*ok)[1].verb, "ask");
  EXPECT_EQ((*ok)[1].arg, "What is it?");
  EXPECT_EQ((*ok)[1].line, 4);
  auto typo = ParseScript("doc a\nasq hello\n", "demo.script");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("demo.script:2"), std::string::npos);
  EXPECT_FALSE(ParseScript("set alpha 9\n", "s").ok());
  EXPECT_FALSE(ParseScript("set nothing 1\n", "s").ok());
  EXPECT_FALSE(ParseScript("tab nowhere\n", "s").ok());
  EXPECT_FALSE(ParseScript("ask\n", "s").ok());
  EXPECT_FALSE(ParseScript("quit now\n", "s").ok());
}

TEST(Script, ApplySettingChangesOnlyThatKnob) {
  TuningSettings s;
  ASSERT_TRUE(ApplySetting(s, "alpha", "1.2").ok());
  EXPECT_FLOAT_EQ(s.pipeline.alpha, 1.2f);
  EXPECT_FLOAT_EQ(s.pipeline.keep, TuningSettings{}.pipeline.keep);
  ASSERT_TRUE(ApplySetting(s, "system", "as-h2o-lru").ok());
  EXPECT_EQ(s.pipeline.system, SystemKind::kAsH2oLru);
  ASSERT_TRUE(ApplySetting(s, "policy", "lfu").ok());
  EXPECT_EQ(s.policy, store::PolicyKind::kLfu);
  EXPECT_FALSE(ApplySetting(s, "keep", "abc").ok());
  EXPECT_FALSE(ApplySetting(s, "system", "fastest").ok());
}

}  // namespace
}  // namespace impress::gui
