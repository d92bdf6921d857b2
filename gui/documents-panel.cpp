// Documents panel: add text/Markdown files by path (drag-and-drop arrives through the frame
// loop as the same command), see each one's size in tokens and where its KV lives, attach or
// detach it as context, drop it, or drop the whole cache.
#include <imgui.h>
#include <imgui_stdlib.h>
#include <spdlog/fmt/fmt.h>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

void DrawDocumentsPanel(const AppSnapshot& s, DocumentsPanelState& st, UiActions& out) {
  ImGui::TextDisabled("Drop files on the window, or type a path:");
  ImGui::SetNextItemWidth(-50);
  const bool enter = ImGui::InputText("##path", &st.path_input, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if ((ImGui::Button("Add", ImVec2(-1, 0)) || enter) && !st.path_input.empty()) {
    out.commands.push_back(MakeCommand(Command::Kind::kAddDocument, st.path_input));
    st.path_input.clear();
  }
  if (s.documents.empty()) ImGui::TextDisabled("no documents yet");
  if (ImGui::BeginTable("##docs", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("use", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("document");
    ImGui::TableSetupColumn("tokens", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed);
    for (size_t i = 0; i < s.documents.size(); ++i) {
      const DocumentEntry& d = s.documents[i];
      ImGui::PushID(int(i));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      bool attached = d.attached;
      if (ImGui::Checkbox("##att", &attached))
        out.commands.push_back(MakeCommand(Command::Kind::kSetAttached, {}, int(i), attached));
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("attach as the conversation's context");
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(d.name.c_str());
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s\n%s\nKV: %s", d.path.c_str(), FormatBytes(d.bytes).c_str(), d.residency.c_str());
      ImGui::TextDisabled("%s", d.residency.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", d.n_tokens);
      ImGui::TableNextColumn();
      if (ImGui::SmallButton("x")) out.commands.push_back(MakeCommand(Command::Kind::kRemoveDocument, {}, int(i)));
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  ImGui::Text("context: %d document tokens attached (model context %d)", s.context_tokens, s.n_ctx);
  if (!s.store_dir.empty()) {
    if (ImGui::SmallButton("Drop cached KV")) out.commands.push_back(MakeCommand(Command::Kind::kDropCache));
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("evict every cached prefix in %s", s.store_dir.c_str());
  }
}

}  // namespace impress::gui
