// Documents panel: add text/Markdown files by path (drag-and-drop arrives through the frame
// loop as the same command), choose how they are used (whole documents as the context, or the
// best passages per question), see each one's size in tokens and where its KV lives (a bar:
// device / host / SSD / not cached), pin or drop its cache, attach, detach or remove it.
#include <imgui.h>
#include <imgui_stdlib.h>
#include <spdlog/fmt/fmt.h>

#include "gui/cache-view.h"
#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {

// A thin stacked bar of a document's residency.
void ResidencyBar(const DocumentEntry& d) {
  const ResidencyShares r = DocumentResidency(d);
  const float w = std::max(40.0f, ImGui::GetContentRegionAvail().x), h = 6;
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (r.known) {
    float x = p.x;
    const struct {
      double share;
      ImU32 colour;
    } parts[] = {{r.device, IM_COL32(90, 200, 120, 255)},
                 {r.host, IM_COL32(90, 150, 230, 255)},
                 {r.ssd, IM_COL32(200, 160, 80, 255)},
                 {r.uncached, IM_COL32(70, 70, 80, 255)}};
    for (const auto& part : parts) {
      const float pw = float(part.share) * w;
      if (pw > 0) dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x + pw, p.y + h), part.colour);
      x += pw;
    }
  } else {
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), IM_COL32(50, 50, 56, 255));
  }
  ImGui::Dummy(ImVec2(w, h));
  if (ImGui::IsItemHovered() && r.known)
    ImGui::SetTooltip("device %.0f%%, host %.0f%%, SSD only %.0f%%, not cached %.0f%% of tokens %d-%d", 100 * r.device,
                      100 * r.host, 100 * r.ssd, 100 * r.uncached, d.span_begin, d.span_end);
}

}  // namespace

void DrawDocumentsPanel(const AppSnapshot& s, DocumentsPanelState& st, UiActions& out) {
  ImGui::TextDisabled("Drop files on the window, or type a path:");
  ImGui::SetNextItemWidth(-50);
  const bool enter = ImGui::InputText("##path", &st.path_input, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if ((ImGui::Button("Add", ImVec2(-1, 0)) || enter) && !st.path_input.empty()) {
    out.commands.push_back(MakeCommand(Command::Kind::kAddDocument, st.path_input));
    st.path_input.clear();
  }
  int mode = s.retrieval ? 1 : 0;
  if (ImGui::RadioButton("whole documents", &mode, 0) && s.retrieval)
    out.commands.push_back(MakeCommand(Command::Kind::kSetRetrieval, {}, -1, false));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("attached documents are the context of every question (long-document chat)");
  ImGui::SameLine();
  if (ImGui::RadioButton("retrieve passages", &mode, 1) && !s.retrieval)
    out.commands.push_back(MakeCommand(Command::Kind::kSetRetrieval, {}, -1, true));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "each question carries the best passages of the checked documents (SQLite FTS5, bm25): "
        "for collections larger than the context");
  if (s.documents.empty()) ImGui::TextDisabled("no documents yet");
  if (ImGui::BeginTable("##docs", 3,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("use", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("document");
    ImGui::TableSetupColumn("tokens", ImGuiTableColumnFlags_WidthFixed);
    for (size_t i = 0; i < s.documents.size(); ++i) {
      const DocumentEntry& d = s.documents[i];
      ImGui::PushID(int(i));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      bool attached = d.attached;
      if (ImGui::Checkbox("##att", &attached))
        out.commands.push_back(MakeCommand(Command::Kind::kSetAttached, {}, int(i), attached));
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(s.retrieval ? "search this document's passages" : "attach as the conversation's context");
      ImGui::TableNextColumn();
      const float pin_w = d.pinned ? ImGui::CalcTextSize("[pinned]").x + ImGui::GetStyle().ItemSpacing.x : 0;
      draw::TextElided(d.name, ImGui::GetContentRegionAvail().x - pin_w,
                       fmt::format("{}\n{}\nKV: {}", d.path, FormatBytes(d.bytes), d.residency));
      if (d.pinned) {
        ImGui::SameLine();
        ImGui::TextColored(ImVec4(0.5f, 0.9f, 0.6f, 1), "[pinned]");
      }
      ResidencyBar(d);
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
      draw::TextElided(d.residency);
      ImGui::PopStyleColor();
      if (!s.store_dir.empty() && d.span_begin >= 0) {
        if (ImGui::SmallButton(d.pinned ? "unpin" : "pin"))
          out.commands.push_back(MakeCommand(Command::Kind::kPinDocument, {}, int(i), !d.pinned));
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip(d.pinned ? "let the cache evict this document's KV again"
                                     : "keep this document's cached KV: never evicted, preferred in the fast tiers");
        ImGui::SameLine();
        if (ImGui::SmallButton("drop cache"))
          out.commands.push_back(MakeCommand(Command::Kind::kDropDocumentCache, {}, int(i)));
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip(
              "drop this document's cached KV (and what follows it in the prompt); the next question recomputes it");
        ImGui::SameLine();
      }
      bool is_private = d.is_private;
      if (ImGui::Checkbox("private", &is_private))
        out.commands.push_back(MakeCommand(Command::Kind::kSetPrivate, {}, int(i), is_private));
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "never share this document through the team KV tier: questions about it neither read the team's KV "
            "nor publish theirs");
      ImGui::SameLine();
      if (ImGui::SmallButton("remove")) out.commands.push_back(MakeCommand(Command::Kind::kRemoveDocument, {}, int(i)));
      ImGui::TableNextColumn();
      ImGui::Text("%d", d.n_tokens);
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  if (s.retrieval)
    ImGui::Text("retrieval over %zu document(s); passages per question fit the context", s.documents.size());
  else ImGui::Text("context: %d document tokens attached (model context %d)", s.context_tokens, s.n_ctx);
  if (!s.retrieval && s.context_tokens > 0 && s.kv_bytes_per_token > 0) {
    // What the next question's prefill of these documents will hold, before it starts.
    const uint64_t kv = s.kv_bytes_per_token * uint64_t(s.context_tokens);
    ImGui::TextDisabled("their KV: %s in memory while a question is answered, kept in the store's tiers after",
                        FormatBytes(kv).c_str());
    if (s.n_ctx > 0 && s.context_tokens > s.n_ctx)
      ImGui::TextColored(ImVec4(1.0f, 0.6f, 0.3f, 1), "longer than the model's context: detach a document");
  }
  if (!s.store_dir.empty()) {
    if (ImGui::SmallButton("Drop all cached KV")) out.commands.push_back(MakeCommand(Command::Kind::kDropCache));
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("evict every cached prefix in %s (pinned ones stay)", s.store_dir.c_str());
  }
}

}  // namespace impress::gui
