// The numbers the GUI panels show: hit rates, stacked TTFT segments, heatmap binning and
// normalisation, probe verdict colouring, frame statistics, settings files and script parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

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

TEST(Heatmap, ShapeMatchesWhatBuildHeatmapMakes) {
  for (int n_tok : {1, 7, 37, 64, 700, 4050})
    for (int max_cols : {1, 3, 8, 100, 613, 5000}) {
      const Heatmap h = BuildHeatmap(std::vector<float>(size_t(n_tok), 1.0f), {}, 1, n_tok, max_cols);
      const HeatmapShape s = ShapeHeatmap(n_tok, max_cols);
      EXPECT_EQ(s.n_cols, h.n_cols) << n_tok << " tokens, " << max_cols << " columns";
      EXPECT_EQ(s.tokens_per_col, h.tokens_per_col);
      EXPECT_LE(s.n_cols, max_cols);
      EXPECT_GE(s.n_cols * s.tokens_per_col, n_tok);        // every token has a column
      EXPECT_LT((s.n_cols - 1) * s.tokens_per_col, n_tok);  // and no column is empty
    }
  EXPECT_EQ(ShapeHeatmap(0, 10).n_cols, 0);
  EXPECT_EQ(ShapeHeatmap(10, 0).n_cols, 0);
}

TEST(HeatRgb, EndsAndStopsOfTheRamp) {
  const Rgb lo = HeatRgb(0), hi = HeatRgb(1), mid = HeatRgb(1.0f / 3.0f);
  EXPECT_EQ(lo.r, 18);    // round(0.07 * 255)
  EXPECT_EQ(lo.b, 64);    // round(0.25 * 255)
  EXPECT_EQ(hi.r, 252);   // round(0.99 * 255)
  EXPECT_EQ(hi.g, 232);   // round(0.91 * 255)
  EXPECT_EQ(mid.g, 115);  // round(0.45 * 255): the second stop
  const Rgb nan = HeatRgb(std::nanf("")), below = HeatRgb(-2), above = HeatRgb(7);
  EXPECT_EQ(nan.r, lo.r);
  EXPECT_EQ(below.b, lo.b);
  EXPECT_EQ(above.g, hi.g);
  // Brighter for larger values (green channel rises along the whole ramp).
  for (float v = 0; v < 1.0f; v += 0.05f) EXPECT_LE(HeatRgb(v).g, HeatRgb(v + 0.05f).g) << v;
}

// Reference: each texel of the picture from the heatmap cell under it.
TEST(HeatmapImage, OneTexelColumnPerCellAndABandPerLayerWithSelectionMarks) {
  const int n_layer = 3, n_tok = 10;
  std::vector<float> imp(n_layer * n_tok);
  std::vector<uint8_t> sel(imp.size(), 0);
  for (int i = 0; i < int(imp.size()); ++i) imp[size_t(i)] = float((i * 7) % 11);
  sel[1 * n_tok + 4] = 1;  // layer 1, column 2 (2 tokens per column)
  const Heatmap h = BuildHeatmap(imp, sel, n_layer, n_tok, 5);
  ASSERT_EQ(h.n_cols, 5);
  HeatmapImageOptions o;
  o.gamma = 0.5f;
  o.rows_per_layer = 3;
  const RgbaImage im = RenderHeatmapImage(h, o);
  ASSERT_EQ(im.width, 5);
  ASSERT_EQ(im.height, 9);
  ASSERT_EQ(im.pixels.size(), size_t(5 * 9 * 4));
  auto px = [&](int x, int y) { return &im.pixels[(size_t(y) * im.width + x) * 4]; };
  for (int l = 0; l < n_layer; ++l)
    for (int c = 0; c < h.n_cols; ++c) {
      const Rgb want = HeatRgb(std::pow(h.value[size_t(l) * h.n_cols + c], 0.5f));
      const bool marked = h.selected[size_t(l) * h.n_cols + c] != 0;
      for (int y = 0; y < 3; ++y) {
        const uint8_t* p = px(c, l * 3 + y);
        EXPECT_EQ(p[3], 255);
        if (y == 0 && marked) {
          EXPECT_GT(p[0], 200) << "a selected cell's top row is near white";
          EXPECT_GT(p[2], 200);
        } else {
          EXPECT_EQ(p[0], want.r) << "layer " << l << " col " << c << " row " << y;
          EXPECT_EQ(p[1], want.g);
          EXPECT_EQ(p[2], want.b);
        }
      }
    }
  EXPECT_GT(px(2, 3)[0], 200);  // the one selected cell, marked
  // Without marks, the same texel has the plain colour.
  o.mark_selected = false;
  const RgbaImage plain = RenderHeatmapImage(h, o);
  const Rgb want = HeatRgb(std::pow(h.value[1 * 5 + 2], 0.5f));
  EXPECT_EQ(plain.pixels[(size_t(3) * 5 + 2) * 4], want.r);
  // An empty heatmap gives an empty picture.
  EXPECT_EQ(RenderHeatmapImage(Heatmap{}, o).width, 0);
}

// Reference: a set of chunk indices per layer.
TEST(ChunkTouch, DistinctChunksOfSelectedTokensPerLayer) {
  const int n_layer = 4, n_tok = 300, chunk = 64;  // 5 chunks, the last one 44 tokens
  std::mt19937 rng(11);
  std::vector<uint8_t> sel(size_t(n_layer) * n_tok, 0);
  // layer 0: nothing; layer 1: everything; layer 2: random sparse; layer 3: only the last token.
  for (int t = 0; t < n_tok; ++t) sel[size_t(1) * n_tok + t] = 1;
  for (int t = 0; t < n_tok; ++t) sel[size_t(2) * n_tok + t] = (rng() % 50) == 0;
  sel[size_t(3) * n_tok + n_tok - 1] = 1;
  const ChunkTouch ct = CountSelectedChunks(sel, n_layer, n_tok, chunk);
  ASSERT_EQ(ct.per_layer.size(), size_t(n_layer));
  EXPECT_EQ(ct.chunks_per_layer, 5);
  int total = 0, pairs = 0;
  for (int l = 0; l < n_layer; ++l) {
    std::set<int> chunks;
    for (int t = 0; t < n_tok; ++t)
      if (sel[size_t(l) * n_tok + t]) {
        chunks.insert(t / chunk);
        ++pairs;
      }
    EXPECT_EQ(ct.per_layer[size_t(l)], int(chunks.size())) << "layer " << l;
    total += int(chunks.size());
  }
  EXPECT_EQ(ct.per_layer[0], 0);
  EXPECT_EQ(ct.per_layer[1], 5);
  EXPECT_EQ(ct.per_layer[3], 1);
  EXPECT_EQ(ct.total, total);
  EXPECT_EQ(ct.selected_tokens, pairs);
}

TEST(ChunkTouch, ClusteredSelectionTouchesFewerChunksThanScattered) {
  // The same number of selected tokens per layer: grouped into one chunk vs one per chunk (what
  // a reorder does to the physical layout, here expressed in token order).
  const int n_tok = 256, chunk = 32;
  std::vector<uint8_t> grouped(n_tok, 0), scattered(n_tok, 0);
  for (int i = 0; i < 8; ++i) {
    grouped[size_t(i)] = 1;
    scattered[size_t(i * chunk)] = 1;
  }
  EXPECT_EQ(CountSelectedChunks(grouped, 1, n_tok, chunk).total, 1);
  EXPECT_EQ(CountSelectedChunks(scattered, 1, n_tok, chunk).total, 8);
}

TEST(ChunkTouch, ShapeMismatchGivesNoCounts) {
  EXPECT_TRUE(CountSelectedChunks(std::vector<uint8_t>(10, 1), 2, 30, 64).per_layer.empty());
  EXPECT_TRUE(CountSelectedChunks(std::vector<uint8_t>(60, 1), 2, 30, 0).per_layer.empty());
  EXPECT_TRUE(CountSelectedChunks({}, 0, 0, 64).per_layer.empty());
  // A chunk larger than the prefix: one chunk per layer.
  const ChunkTouch one = CountSelectedChunks(std::vector<uint8_t>(60, 1), 2, 30, 64);
  EXPECT_EQ(one.chunks_per_layer, 1);
  EXPECT_EQ(one.total, 2);
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
  im.pixels[0] = 200;  // one pixel red-ish
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
  s.pipeline.pool = 7;
  s.pipeline.pool_max = true;
  s.pipeline.pool_follow = 5;
  s.pipeline.head_max = false;
  s.pipeline.predict_next = true;
  s.pipeline.predict_select = true;
  s.pipeline.select_budget = GroupBudget::kTokens;
  auto back = ParseTuning(TuningToJson(s), TuningSettings{});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FLOAT_EQ(back->pipeline.alpha, 1.25f);
  EXPECT_EQ(back->pipeline.system, SystemKind::kAsH2oLfu);
  EXPECT_EQ(back->policy, store::PolicyKind::kLru);
  EXPECT_EQ(back->host_budget_mb, 77);
  EXPECT_EQ(back->pipeline.pool, 7);
  EXPECT_TRUE(back->pipeline.pool_max);
  EXPECT_EQ(back->pipeline.pool_follow, 5);
  EXPECT_FALSE(back->pipeline.head_max);
  EXPECT_TRUE(back->pipeline.predict_next);
  EXPECT_TRUE(back->pipeline.predict_select);
  EXPECT_EQ(back->pipeline.select_budget, GroupBudget::kTokens);
  EXPECT_FALSE(ParseTuning(R"({"select_budget": "bytes"})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"predict_next": 1})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"predict_select": "on"})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"pool_follow": -1})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"head_max": "yes"})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"pool": 99})", TuningSettings{}).ok());
  EXPECT_FALSE(ParseTuning(R"({"pool_max": 1})", TuningSettings{}).ok());

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

TEST(TuningConfig, SamplingFollowsTheModelUntilTheUserSetsIt) {
  // Without sampling keys the file keeps following the model, and writes none back.
  auto plain = ParseTuning(R"({"recent": 64})", TuningSettings{});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->sampling.user_set);
  EXPECT_EQ(TuningToJson(*plain).find("temperature"), std::string::npos);
  // One sampling key marks the choice as the user's; all four round-trip.
  auto set = ParseTuning(R"({"temperature": 0})", TuningSettings{});
  ASSERT_TRUE(set.ok());
  EXPECT_TRUE(set->sampling.user_set);
  EXPECT_EQ(set->sampling.temperature, 0.0f);
  set->sampling.top_k = 7;
  set->sampling.top_p = 0.5f;
  set->sampling.min_p = 0.25f;
  auto back = ParseTuning(TuningToJson(*set), TuningSettings{});
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->sampling.user_set);
  EXPECT_EQ(back->sampling.top_k, 7);
  EXPECT_FLOAT_EQ(back->sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(back->sampling.min_p, 0.25f);
  EXPECT_FALSE(ParseTuning(R"({"top_p": 1.5})", TuningSettings{}).ok());

  // The model's recommendation wins over the chat defaults, key by key.
  GenerationDefaults model;
  model.temperature = 0.2f;
  model.top_k = 20;
  const TuningSettings::Sampling m = ModelSampling(model);
  const SamplerOptions d = ChatSamplerDefaults();
  EXPECT_FLOAT_EQ(m.temperature, 0.2f);
  EXPECT_EQ(m.top_k, 20);
  EXPECT_FLOAT_EQ(m.top_p, d.top_p);
  EXPECT_FLOAT_EQ(m.min_p, d.min_p);
  EXPECT_FALSE(m.user_set);
  // A fresh settings object samples as a chat does, not greedily.
  const SamplerOptions o = ToSamplerOptions(TuningSettings{}.sampling);
  EXPECT_FLOAT_EQ(o.temperature, d.temperature);
  EXPECT_EQ(o.top_k, d.top_k);
}

TEST(StopNote, SaysWhyAnAnswerEnded) {
  EXPECT_EQ(StopNote("end"), "");
  EXPECT_EQ(StopNote(""), "");
  EXPECT_NE(StopNote("repetition").find("repeating"), std::string::npos);
  EXPECT_NE(StopNote("max_tokens").find("max tokens"), std::string::npos);
  EXPECT_NE(StopNote("context").find("context"), std::string::npos);
  EXPECT_NE(StopNote("user").find("you"), std::string::npos);
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
  auto ok = ParseScript(
      "# demo\ndoc /tmp/a.md\n\nask What is it?\nwait\nset alpha 1.2\nagain\nwait 30\ntab tiers\n"
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
