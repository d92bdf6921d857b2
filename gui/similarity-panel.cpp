// Probe similarity panel: per layer, the probe heads' mean Jaccard s as a bar against the
// threshold t (a tick per layer); green = passed (selection from the probe heads), red =
// fallback (all keys scored), grey = not probed. Earlier requests' s drawn as faint lines.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

void DrawSimilarityPanel(const AppSnapshot& s, SimilarityPanelState& st) {
  draw::RequestPicker("request##sim", s, &st.request);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(100);
  ImGui::SliderInt("history", &st.history, 0, 32);
  const RequestRecord* r = draw::PickRequest(s, st.request);
  if (!r || r->report.layers.empty()) {
    ImGui::TextDisabled("no request yet");
    return;
  }
  const auto& layers = r->report.layers;
  const int n = int(layers.size());
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float axis_w = 30;
  const float w = std::max(60.0f, avail.x - axis_w),
              h = std::max(60.0f, avail.y - ImGui::GetTextLineHeightWithSpacing() * 1.5f);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 o(p0.x + axis_w, p0.y);
  auto y_of = [&](double v) { return o.y + h - float(std::clamp(v, 0.0, 1.0)) * h; };
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h), IM_COL32(25, 25, 30, 255));
  for (double g : {0.25, 0.5, 0.75, 1.0}) {
    dl->AddLine(ImVec2(o.x, y_of(g)), ImVec2(o.x + w, y_of(g)), IM_COL32(255, 255, 255, 25));
    dl->AddText(ImVec2(p0.x, y_of(g) - 6), IM_COL32(170, 170, 170, 255), fmt::format("{:.2f}", g).c_str());
  }
  const float bw = w / float(n);
  // History: earlier requests' s per layer, as polylines.
  int drawn = 0;
  for (int i = int(s.requests.size()) - 1; i >= 0 && drawn < st.history; --i) {
    const RequestRecord* q = s.requests[i].get();
    if (q == r || q->report.layers.size() != layers.size()) continue;
    ++drawn;
    for (int l = 1; l < n; ++l)
      dl->AddLine(ImVec2(o.x + (l - 0.5f) * bw, y_of(q->report.layers[l - 1].s)),
                  ImVec2(o.x + (l + 0.5f) * bw, y_of(q->report.layers[l].s)), IM_COL32(200, 200, 255, 50));
  }
  for (int l = 0; l < n; ++l) {
    const LayerReport& L = layers[l];
    const ProbeVerdict v = ClassifyLayer(L);
    const ImU32 col = v == ProbeVerdict::kPassed     ? IM_COL32(80, 200, 110, 255)
                      : v == ProbeVerdict::kFallback ? IM_COL32(230, 80, 70, 255)
                                                     : IM_COL32(120, 120, 120, 255);
    const float x0 = o.x + l * bw + 1, x1 = o.x + (l + 1) * bw - 1;
    dl->AddRectFilled(ImVec2(x0, y_of(L.s)), ImVec2(x1, y_of(0)), col);
    if (L.probed) dl->AddLine(ImVec2(x0 - 1, y_of(L.t)), ImVec2(x1 + 1, y_of(L.t)), IM_COL32(255, 255, 255, 230), 2.0f);
  }
  ImGui::InvisibleButton("##sim", ImVec2(axis_w + w, h));
  if (ImGui::IsItemHovered()) {
    const int l = std::clamp(int((ImGui::GetIO().MousePos.x - o.x) / bw), 0, n - 1);
    const LayerReport& L = layers[l];
    ImGui::SetTooltip(
        "layer %d: s = %.3f, t = %.3f -> %s\nk = %d of n = %d\nkeys %s, values %s read; chunks device %u / host %u / "
        "SSD %u",
        l, L.s, L.t, L.probed ? (L.passed ? "passed" : "fallback") : "not probed", L.k, L.n,
        FormatBytes(L.key_bytes).c_str(), FormatBytes(L.value_bytes).c_str(), L.chunks_device, L.chunks_host,
        L.chunks_ssd);
  }
  ImGui::TextDisabled("%s: passed in %d of %d layers (green passed, red fallback; white tick = threshold t)",
                      r->label.c_str(), CountPassed(layers), n);
}

}  // namespace impress::gui
