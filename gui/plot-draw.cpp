// Drawing helpers shared by the inspector panels (colour ramps, request picker).
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

#include "gui/panels.h"

namespace impress::gui::draw {

const RequestRecord* PickRequest(const AppSnapshot& s, int index) {
  if (s.requests.empty()) return nullptr;
  if (index >= 0 && size_t(index) < s.requests.size()) return s.requests[index].get();
  return s.requests.back().get();
}

unsigned HeatColour(float v) {
  // A viridis-like ramp through four stops: dark blue, teal, green, yellow.
  static const float stops[4][3] = {{0.07f, 0.04f, 0.25f}, {0.13f, 0.45f, 0.55f}, {0.30f, 0.72f, 0.40f}, {0.99f, 0.91f, 0.15f}};
  v = std::isfinite(v) ? std::clamp(v, 0.0f, 1.0f) : 0.0f;
  const float x = v * 3.0f;
  const int i = std::min(2, int(x));
  const float f = x - float(i);
  float c[3];
  for (int k = 0; k < 3; ++k) c[k] = stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f;
  return ImGui::ColorConvertFloat4ToU32(ImVec4(c[0], c[1], c[2], 1.0f));
}

unsigned PartColour(int part) {
  static const ImU32 colours[] = {IM_COL32(160, 160, 160, 255), IM_COL32(240, 140, 40, 255), IM_COL32(200, 90, 200, 255),
                                  IM_COL32(230, 70, 60, 255),   IM_COL32(240, 210, 60, 255), IM_COL32(70, 140, 230, 255),
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

}  // namespace impress::gui::draw
