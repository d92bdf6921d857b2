// Drawing helpers shared by the panels (colour ramps, request picker, elided text).
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

#include "gui/panels.h"
#include "gui/snapshot-math.h"
#include "gui/text-format.h"

namespace impress::gui::draw {

const RequestRecord* PickRequest(const AppSnapshot& s, int index) {
  if (s.requests.empty()) return nullptr;
  if (index >= 0 && size_t(index) < s.requests.size()) return s.requests[index].get();
  return s.requests.back().get();
}

unsigned HeatColour(float v) {
  const Rgb c = HeatRgb(v);  // the same ramp as the heatmap's texture (gui/snapshot-math.h)
  return IM_COL32(c.r, c.g, c.b, 255);
}

unsigned PartColour(int part) {
  static const ImU32 colours[] = {IM_COL32(160, 160, 160, 255), IM_COL32(240, 140, 40, 255),
                                  IM_COL32(200, 90, 200, 255),  IM_COL32(230, 70, 60, 255),
                                  IM_COL32(240, 210, 60, 255),  IM_COL32(70, 140, 230, 255),
                                  IM_COL32(110, 110, 130, 255)};
  return colours[std::clamp(part, 0, int(std::size(colours)) - 1)];
}

void RequestPicker(const char* label, const AppSnapshot& s, int* index) {
  const RequestRecord* cur = PickRequest(s, *index);
  const std::string preview = *index < 0 ? std::string("latest") + (cur ? " (" + cur->label + ")" : "")
                                         : (cur ? cur->label : std::string("none"));
  ImGui::SetNextItemWidth(260);
  if (ImGui::BeginCombo(label, preview.c_str())) {
    if (ImGui::Selectable("latest", *index < 0)) *index = -1;
    for (int i = int(s.requests.size()) - 1; i >= 0; --i) {
      ImGui::PushID(i);
      if (ImGui::Selectable(s.requests[i]->label.c_str(), *index == i)) *index = i;
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
}

void TextElided(const std::string& text, float width, const std::string& tooltip) {
  if (width <= 0) width = ImGui::GetContentRegionAvail().x;
  const std::string shown =
      ElideMiddle(text, width, [](std::string_view t) { return ImGui::CalcTextSize(t.data(), t.data() + t.size()).x; });
  ImGui::TextUnformatted(shown.c_str());
  if (ImGui::IsItemHovered() && (shown != text || !tooltip.empty()))
    ImGui::SetTooltip("%s", tooltip.empty() ? text.c_str() : tooltip.c_str());
}

}  // namespace impress::gui::draw
