// TTFT panel: one stacked bar per request (match, probe I/O, probe compute, KV I/O, copy,
// compute, other), on a common scale, so runs with different settings compare at a glance.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

void DrawTtftPanel(const AppSnapshot& s, TtftPanelState& st) {
  const auto& names = TtftPartNames();
  for (int i = 0; i < int(names.size()); ++i) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float sz = ImGui::GetTextLineHeight();
    ImGui::GetWindowDrawList()->AddRectFilled(p, ImVec2(p.x + sz, p.y + sz), draw::PartColour(i));
    ImGui::Dummy(ImVec2(sz, sz));
    ImGui::SameLine();
    ImGui::TextUnformatted(names[i].c_str());
    if (i + 1 < int(names.size())) ImGui::SameLine();
  }
  if (s.requests.empty()) {
    ImGui::TextDisabled("no request yet");
    return;
  }
  const int first = std::max(0, int(s.requests.size()) - st.max_bars);
  double max_ms = 1;
  for (int i = first; i < int(s.requests.size()); ++i) max_ms = std::max(max_ms, s.requests[i]->report.breakdown.Sum());
  const float label_w = 190;
  const float w = std::max(60.0f, ImGui::GetContentRegionAvail().x - label_w - 70);
  const float bar_h = ImGui::GetTextLineHeight() + 2;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (int i = first; i < int(s.requests.size()); ++i) {
    const RequestRecord& r = *s.requests[i];
    const ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddText(p, IM_COL32(210, 210, 210, 255), r.label.c_str());
    const std::vector<BarSegment> segs = StackTtft(r.report.breakdown);
    const float x0 = p.x + label_w;
    for (const BarSegment& g : segs) {
      const float a = x0 + float(g.start_ms / max_ms) * w, b = x0 + float((g.start_ms + g.length_ms) / max_ms) * w;
      if (b > a) dl->AddRectFilled(ImVec2(a, p.y), ImVec2(b, p.y + bar_h), draw::PartColour(g.part));
    }
    const double total = segs.empty() ? 0 : segs.back().start_ms + segs.back().length_ms;
    dl->AddText(ImVec2(x0 + float(total / max_ms) * w + 4, p.y), IM_COL32(230, 230, 230, 255),
                fmt::format("{:.0f} ms", r.report.ttft_ms).c_str());
    ImGui::PushID(i);
    ImGui::InvisibleButton("##bar", ImVec2(label_w + w + 70, bar_h));
    ImGui::PopID();
    if (ImGui::IsItemHovered()) {
      std::string tip = fmt::format("{}\nquestion: {}\nTTFT {:.1f} ms; {} of {} tokens reused\n", r.label, r.question,
                                    r.report.ttft_ms, r.report.n_matched, r.report.n_prompt);
      for (const BarSegment& g : segs) tip += fmt::format("  {}: {:.1f} ms\n", names[g.part], g.length_ms);
      tip += fmt::format("  (I/O wait = probe I/O + KV I/O: {:.1f} ms)", r.report.breakdown.io_wait_ms);
      ImGui::SetTooltip("%s", tip.c_str());
    }
  }
}

}  // namespace impress::gui
