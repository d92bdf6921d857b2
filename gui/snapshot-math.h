// The numbers the panels show, computed from snapshots by pure functions so they are tested
// without a window (tests/gui/snapshot-math-test.cpp). No ImGui types here.
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gui/png-image.h"
#include "pipeline/report.h"
#include "store/prefix-store.h"

namespace impress::gui {

// Share of chunk accesses served by each tier (each in [0, 1], summing to 1 when total > 0).
struct HitRates {
  double device = 0, host = 0, ssd = 0;
  uint64_t total = 0;
};
// One request: the chunks its reads found in each tier.
HitRates RequestHitRates(const RequestReport& r);
// Store-wide, cumulative: device hits, host hits, SSD reads over all accesses.
HitRates StoreHitRates(const store::TierStats& t);
// Between two cumulative readings (before -> after), e.g. one request's share of the counters.
// Counters that went backwards (store reopened) count as zero.
HitRates HitRatesBetween(const store::TierStats& before, const store::TierStats& after);

// One segment of a request's stacked TTFT bar, in milliseconds from the bar's start.
struct BarSegment {
  int part = 0;  // index into TtftPartNames()
  double start_ms = 0;
  double length_ms = 0;
};
// The parts a TTFT bar stacks, in order: match, probe I/O, probe compute, KV I/O, copy, compute,
// other. (I/O wait = probe I/O + KV I/O, so it is not stacked a second time; the panel shows it
// in the tooltip.) Negative or NaN parts are drawn as zero length.
const std::vector<std::string>& TtftPartNames();
std::vector<BarSegment> StackTtft(const TtftBreakdown& b);

// Importance heatmap: rows = layers, columns = prefix tokens binned into n_cols columns (max over
// the bin); each row normalised by its own maximum into [0, 1] (a row of zeros stays zero; NaN
// and negative values count as zero). selected_cols[l * n_cols + c] is 1 if any token of the bin
// was selected in that layer.
struct Heatmap {
  int n_rows = 0, n_cols = 0;
  int tokens_per_col = 1;         // bin width (the last bin may be narrower)
  std::vector<float> value;       // n_rows * n_cols, row-major, in [0, 1]
  std::vector<uint8_t> selected;  // same shape
};
Heatmap BuildHeatmap(const std::vector<float>& importance, const std::vector<uint8_t>& selected, int n_layer,
                     int n_tokens, int max_cols);
// Token index range [first, last) that heatmap column c covers.
void HeatmapColumnTokens(const Heatmap& h, int n_tokens, int c, int* first, int* last);
// The columns BuildHeatmap makes for n_tokens tokens and at most max_cols columns, without
// building it (n_cols = 0 when either is not positive).
struct HeatmapShape {
  int n_cols = 0, tokens_per_col = 1;
};
HeatmapShape ShapeHeatmap(int n_tokens, int max_cols);

// The heat colour ramp (viridis-like: dark blue, teal, green, yellow) for v in [0, 1]; NaN and
// values outside clamp to the ends.
struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};
Rgb HeatRgb(float v);

// The heatmap as one RGBA picture, to upload as a single texture (one quad instead of a
// rectangle per cell). width = n_cols; each layer is a band of rows_per_layer texel rows
// coloured HeatRgb(value^gamma) (a gamma below 1 lifts the long tail: a few sink tokens hold
// most of a layer's attention); with mark_selected, the band's top texel row is white (blended
// 80%) where the cell holds a selected token. Opaque. An empty heatmap gives an empty image.
struct HeatmapImageOptions {
  float gamma = 0.4f;
  bool mark_selected = true;
  int rows_per_layer = 4;
};
RgbaImage RenderHeatmapImage(const Heatmap& h, const HeatmapImageOptions& o);

// How many store chunks a request's selected tokens fall in, per layer, counting chunks in
// token order: chunk i holds prefix tokens [i * chunk_tokens, (i + 1) * chunk_tokens). This is
// what the selection touches in a store laid out in token order (before any reorder); a
// reordered store groups each layer's important tokens, so the chunks it actually reads can be
// fewer. per_layer is empty when the shapes do not match (selected shorter than n_layer *
// n_tokens, or a non-positive size).
struct ChunkTouch {
  std::vector<int> per_layer;  // distinct chunks holding a selected token, layer by layer
  int total = 0;               // summed over layers
  int chunks_per_layer = 0;    // chunks the prefix spans (ceil(n_tokens / chunk_tokens))
  int selected_tokens = 0;     // selected (layer, token) pairs
};
ChunkTouch CountSelectedChunks(const std::vector<uint8_t>& selected, int n_layer, int n_tokens, int chunk_tokens);

// How a layer's probe result is coloured in the similarity panel.
enum class ProbeVerdict { kNotProbed, kPassed, kFallback };
ProbeVerdict ClassifyLayer(const LayerReport& l);
// Layers that passed out of those probed.
int CountPassed(const std::vector<LayerReport>& layers);

// Where a request's prefix KV came from, as a short text: "1,234 of 1,300 prefix tokens reused
// (device 12 / host 0 / SSD 40 chunks)" or "nothing reused (computed 1,300 tokens)".
std::string ReuseSummary(const RequestReport& r);

// Why an answer ended, as a suffix for its stats line: empty when the model ended its turn,
// else " | stopped: ..." (max tokens, repetition, context full, by the user).
std::string StopNote(const std::string& stop_reason);

// Frame-time statistics (milliseconds).
struct FrameStats {
  size_t n = 0;
  double max_ms = 0, p99_ms = 0, mean_ms = 0;
};
// p99 is the nearest-rank 99th percentile (ceil(0.99 n)-th smallest).
FrameStats ComputeFrameStats(std::vector<double> frame_ms);

// 12345678 -> "11.8 MiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace impress::gui
