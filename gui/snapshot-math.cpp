#include "gui/snapshot-math.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

#include "gui/app-snapshot.h"

namespace impress::gui {

const char* PhaseName(WorkerPhase p) {
  switch (p) {
    case WorkerPhase::kStarting: return "starting";
    case WorkerPhase::kLoading: return "loading model";
    case WorkerPhase::kIdle: return "ready";
    case WorkerPhase::kIngesting: return "reading document";
    case WorkerPhase::kPrefill: return "prefill";
    case WorkerPhase::kDecoding: return "answering";
    case WorkerPhase::kFidelity: return "fidelity check";
    case WorkerPhase::kStoring: return "storing KV";
    case WorkerPhase::kFailed: return "failed";
  }
  return "?";
}

namespace {
HitRates FromCounts(uint64_t device, uint64_t host, uint64_t ssd) {
  HitRates h;
  h.total = device + host + ssd;
  if (h.total == 0) return h;
  h.device = double(device) / double(h.total);
  h.host = double(host) / double(h.total);
  h.ssd = double(ssd) / double(h.total);
  return h;
}
uint64_t Delta(uint64_t before, uint64_t after) { return after >= before ? after - before : 0; }
double Clean(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }
}  // namespace

HitRates RequestHitRates(const RequestReport& r) { return FromCounts(r.chunks_device, r.chunks_host, r.chunks_ssd); }

HitRates StoreHitRates(const store::TierStats& t) { return FromCounts(t.device.hits, t.host.hits, t.ssd_reads); }

HitRates HitRatesBetween(const store::TierStats& a, const store::TierStats& b) {
  return FromCounts(Delta(a.device.hits, b.device.hits), Delta(a.host.hits, b.host.hits),
                    Delta(a.ssd_reads, b.ssd_reads));
}

const std::vector<std::string>& TtftPartNames() {
  static const std::vector<std::string> names = {"match", "probe I/O", "probe compute", "KV I/O",
                                                 "copy",  "compute",   "other"};
  return names;
}

std::vector<BarSegment> StackTtft(const TtftBreakdown& b) {
  const double parts[] = {b.match_ms, b.probe_io_ms, b.probe_compute_ms, b.kv_io_ms,
                          b.copy_ms,  b.compute_ms,  b.other_ms};
  std::vector<BarSegment> out;
  double at = 0;
  for (int i = 0; i < int(std::size(parts)); ++i) {
    const double len = Clean(parts[i]);
    out.push_back({i, at, len});
    at += len;
  }
  return out;
}

Heatmap BuildHeatmap(const std::vector<float>& importance, const std::vector<uint8_t>& selected, int n_layer,
                     int n_tokens, int max_cols) {
  Heatmap h;
  if (n_layer <= 0 || n_tokens <= 0 || max_cols <= 0) return h;
  if (importance.size() < size_t(n_layer) * size_t(n_tokens)) return h;  // report without importance
  h.n_rows = n_layer;
  const HeatmapShape shape = ShapeHeatmap(n_tokens, max_cols);
  h.n_cols = shape.n_cols;
  h.tokens_per_col = shape.tokens_per_col;
  h.value.assign(size_t(h.n_rows) * h.n_cols, 0.0f);
  h.selected.assign(h.value.size(), 0);
  const bool has_sel = selected.size() >= importance.size();
  for (int l = 0; l < n_layer; ++l) {
    float row_max = 0;
    for (int c = 0; c < h.n_cols; ++c) {
      float m = 0;
      uint8_t sel = 0;
      for (int t = c * h.tokens_per_col; t < std::min(n_tokens, (c + 1) * h.tokens_per_col); ++t) {
        const float v = importance[size_t(l) * n_tokens + t];
        if (std::isfinite(v) && v > m) m = v;
        if (has_sel && selected[size_t(l) * n_tokens + t]) sel = 1;
      }
      h.value[size_t(l) * h.n_cols + c] = m;
      h.selected[size_t(l) * h.n_cols + c] = sel;
      row_max = std::max(row_max, m);
    }
    if (row_max > 0)
      for (int c = 0; c < h.n_cols; ++c) h.value[size_t(l) * h.n_cols + c] /= row_max;
  }
  return h;
}

void HeatmapColumnTokens(const Heatmap& h, int n_tokens, int c, int* first, int* last) {
  *first = std::clamp(c * h.tokens_per_col, 0, n_tokens);
  *last = std::clamp((c + 1) * h.tokens_per_col, 0, n_tokens);
}

HeatmapShape ShapeHeatmap(int n_tokens, int max_cols) {
  HeatmapShape s;
  if (n_tokens <= 0 || max_cols <= 0) return s;
  s.n_cols = std::min(n_tokens, max_cols);
  s.tokens_per_col = (n_tokens + s.n_cols - 1) / s.n_cols;
  s.n_cols = (n_tokens + s.tokens_per_col - 1) / s.tokens_per_col;
  return s;
}

Rgb HeatRgb(float v) {
  static const float stops[4][3] = {
      {0.07f, 0.04f, 0.25f}, {0.13f, 0.45f, 0.55f}, {0.30f, 0.72f, 0.40f}, {0.99f, 0.91f, 0.15f}};
  v = std::isfinite(v) ? std::clamp(v, 0.0f, 1.0f) : 0.0f;
  const float x = v * 3.0f;
  const int i = std::min(2, int(x));
  const float f = x - float(i);
  uint8_t c[3];
  for (int k = 0; k < 3; ++k) c[k] = uint8_t(std::lround(255.0f * (stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f)));
  return {c[0], c[1], c[2]};
}

RgbaImage RenderHeatmapImage(const Heatmap& h, const HeatmapImageOptions& o) {
  RgbaImage im;
  if (h.n_rows <= 0 || h.n_cols <= 0 || h.value.size() < size_t(h.n_rows) * h.n_cols) return im;
  const int band = std::max(1, o.rows_per_layer);
  im.width = h.n_cols;
  im.height = h.n_rows * band;
  im.pixels.resize(size_t(im.width) * im.height * 4);
  const bool has_sel = h.selected.size() >= h.value.size();
  for (int l = 0; l < h.n_rows; ++l) {
    for (int c = 0; c < h.n_cols; ++c) {
      const size_t cell = size_t(l) * h.n_cols + c;
      const float v = h.value[cell];
      const Rgb rgb = HeatRgb(std::isfinite(v) && v > 0 ? std::pow(v, o.gamma) : 0.0f);
      for (int y = 0; y < band; ++y) {
        uint8_t* px = &im.pixels[(size_t(l * band + y) * im.width + c) * 4];
        px[0] = rgb.r;
        px[1] = rgb.g;
        px[2] = rgb.b;
        px[3] = 255;
        if (y == 0 && o.mark_selected && has_sel && h.selected[cell])
          for (int k = 0; k < 3; ++k) px[k] = uint8_t((px[k] * 51 + 255 * 204 + 127) / 255);  // 80% white
      }
    }
  }
  return im;
}

ChunkTouch CountSelectedChunks(const std::vector<uint8_t>& selected, int n_layer, int n_tokens, int chunk_tokens) {
  ChunkTouch t;
  if (n_layer <= 0 || n_tokens <= 0 || chunk_tokens <= 0) return t;
  if (selected.size() < size_t(n_layer) * size_t(n_tokens)) return t;
  t.chunks_per_layer = (n_tokens + chunk_tokens - 1) / chunk_tokens;
  t.per_layer.assign(size_t(n_layer), 0);
  for (int l = 0; l < n_layer; ++l) {
    const uint8_t* row = &selected[size_t(l) * n_tokens];
    int n = 0;
    for (int ci = 0; ci < t.chunks_per_layer; ++ci) {
      const int end = std::min(n_tokens, (ci + 1) * chunk_tokens);
      bool any = false;
      for (int tok = ci * chunk_tokens; tok < end; ++tok) {
        if (row[tok]) {
          any = true;
          ++t.selected_tokens;
        }
      }
      n += any;
    }
    t.per_layer[size_t(l)] = n;
    t.total += n;
  }
  return t;
}

ProbeVerdict ClassifyLayer(const LayerReport& l) {
  if (!l.probed) return ProbeVerdict::kNotProbed;
  return l.s >= l.t ? ProbeVerdict::kPassed : ProbeVerdict::kFallback;
}

int CountPassed(const std::vector<LayerReport>& layers) {
  return int(std::count_if(layers.begin(), layers.end(),
                           [](const LayerReport& l) { return ClassifyLayer(l) == ProbeVerdict::kPassed; }));
}

std::string StopNote(const std::string& stop_reason) {
  if (stop_reason.empty() || stop_reason == "end") return "";
  if (stop_reason == "max_tokens") return " | stopped: max tokens reached";
  if (stop_reason == "repetition") return " | stopped: the answer was repeating itself";
  if (stop_reason == "context") return " | stopped: the context is full";
  if (stop_reason == "user") return " | stopped by you";
  return " | stopped: " + stop_reason;
}

std::string ReuseSummary(const RequestReport& r) {
  if (r.n_matched <= 0) return fmt::format("nothing reused (computed {} tokens)", r.n_new);
  return fmt::format("{} of {} prefix tokens reused (chunks: device {} / host {} / SSD {})", r.n_matched, r.n_prefix,
                     r.chunks_device, r.chunks_host, r.chunks_ssd);
}

FrameStats ComputeFrameStats(std::vector<double> ms) {
  FrameStats s;
  s.n = ms.size();
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.max_ms = ms.back();
  const size_t rank = size_t(std::ceil(0.99 * double(ms.size())));  // 1-based nearest rank
  s.p99_ms = ms[std::max<size_t>(rank, 1) - 1];
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / double(ms.size());
  return s;
}

std::string FormatBytes(uint64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < (1ull << 20)) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  if (b < (1ull << 30)) return fmt::format("{:.1f} MiB", double(b) / double(1 << 20));
  return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
}

}  // namespace impress::gui
