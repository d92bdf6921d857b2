// The window's layout: documents + settings on the left, the chat in the middle, inspector
// panels on the right (importance and probe similarity on top, TTFT / tiers / tree tabs below),
// a status bar at the bottom. Windows start at these places and can be moved; imgui.ini keeps
// where the user put them.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include "gui/panels.h"

namespace impress::gui {

const std::vector<std::string>& InspectorTabNames() {
  static const std::vector<std::string> names = {"ttft", "tiers", "tree"};
  return names;
}

namespace {

bool BeginPanel(const char* name, float x, float y, float w, float h) {
  ImGui::SetNextWindowPos(ImVec2(x, y), ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowSize(ImVec2(w, h), ImGuiCond_FirstUseEver);
  return ImGui::Begin(name, nullptr, ImGuiWindowFlags_NoCollapse);
}

void StatusBar(const AppSnapshot& s, float y, float w, float h) {
  ImGui::SetNextWindowPos(ImVec2(0, y));
  ImGui::SetNextWindowSize(ImVec2(w, h));
  ImGui::Begin("##status", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  ImGui::TextUnformatted(s.status.empty() ? PhaseName(s.phase) : s.status.c_str());
  if (s.progress >= 0) {
    ImGui::SameLine();
    ImGui::ProgressBar(float(s.progress), ImVec2(200, 0));
  }
  if (!s.messages.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1.0f, 0.8f, 0.4f, 1.0f), "| %s", s.messages.back().c_str());
    if (ImGui::IsItemHovered()) {
      std::string all;
      for (const std::string& m : s.messages) all += m + "\n";
      ImGui::SetTooltip("%s", all.c_str());
    }
  }
  ImGui::End();
}

}  // namespace

void DrawAllPanels(const AppSnapshot& s, UiState& ui, UiActions& out) {
  const ImVec2 d = ImGui::GetIO().DisplaySize;
  const float status_h = ImGui::GetFrameHeightWithSpacing() + 8;
  const float H = std::max(200.0f, d.y - status_h);
  const float left_w = std::max(260.0f, d.x * 0.22f), mid_w = std::max(320.0f, d.x * 0.36f);
  const float right_x = left_w + mid_w, right_w = std::max(300.0f, d.x - right_x);

  if (BeginPanel("Documents", 0, 0, left_w, H * 0.42f)) {
    DrawModelPicker(s, ui.model, out);
    DrawDocumentsPanel(s, ui.documents, out);
  }
  ImGui::End();
  if (BeginPanel("Settings", 0, H * 0.42f, left_w, H * 0.58f)) DrawSettingsPanel(s, ui.settings, out);
  ImGui::End();
  const std::string chat_title = fmt::format("Chat - {}###Chat", s.model_name.empty() ? "loading" : s.model_name);
  if (BeginPanel(chat_title.c_str(), left_w, 0, mid_w, H)) DrawChatPanel(s, ui.chat, out);
  ImGui::End();
  if (BeginPanel("Importance", right_x, 0, right_w, H * 0.36f)) DrawImportancePanel(s, ui.importance);
  ImGui::End();
  if (BeginPanel("Probe similarity", right_x, H * 0.36f, right_w, H * 0.28f)) DrawSimilarityPanel(s, ui.similarity);
  ImGui::End();
  if (BeginPanel("Inspector", right_x, H * 0.64f, right_w, H * 0.36f)) {
    if (ImGui::BeginTabBar("##inspector")) {
      const auto& names = InspectorTabNames();
      for (int i = 0; i < int(names.size()); ++i) {
        const char* title = i == 0 ? "TTFT" : i == 1 ? "Tiers" : "Radix tree";
        const ImGuiTabItemFlags f = ui.inspector_tab == i ? ImGuiTabItemFlags_SetSelected : 0;
        if (ImGui::BeginTabItem(title, nullptr, f)) {
          if (i == 0) DrawTtftPanel(s, ui.ttft);
          if (i == 1) DrawTiersPanel(s, ui.tiers, out);
          if (i == 2) DrawTreePanel(s, ui.tree);
          ImGui::EndTabItem();
        }
      }
      ui.inspector_tab = -1;
      ImGui::EndTabBar();
    }
  }
  ImGui::End();
  StatusBar(s, d.y - status_h, d.x, status_h);
}

}  // namespace impress::gui
