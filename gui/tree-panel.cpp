// Radix tree / catalog panel: the store's cached prefixes as the radix tree itself (one row per
// node: its first tokens, where it starts, its size, hits, the policy's score and importance,
// the tiers its chunks are in, pinned/locked), with the store's totals above.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include "gui/cache-view.h"
#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {

void Row(const TreeView& t, const std::vector<std::vector<int>>& children, int i) {
  const TreeRow& r = t.rows[i];
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::PushID(i);
  const bool leaf = children[size_t(i)].empty();
  ImGuiTreeNodeFlags f = ImGuiTreeNodeFlags_SpanFullWidth | ImGuiTreeNodeFlags_DefaultOpen;
  if (leaf) f |= ImGuiTreeNodeFlags_Leaf | ImGuiTreeNodeFlags_NoTreePushOnOpen;
  const bool open = ImGui::TreeNodeEx("##node", f, "%s", r.label.empty() ? "(tokens)" : r.label.c_str());
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("tokens %llu-%llu\n\"%s\"", (unsigned long long)r.start,
                      (unsigned long long)(r.start + r.n_tokens), r.label.c_str());
  ImGui::TableNextColumn();
  ImGui::Text("%llu", (unsigned long long)r.n_tokens);
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(FormatBytes(r.kv_bytes).c_str());
  ImGui::TableNextColumn();
  ImGui::Text("%llu", (unsigned long long)r.hits);
  ImGui::TableNextColumn();
  if (r.importance >= 0) ImGui::Text("%.3g / %.3g", r.score, r.importance);
  else ImGui::Text("%.3g / -", r.score);
  ImGui::TableNextColumn();
  ImGui::Text("%u/%u/%u", r.chunks_device, r.chunks_host, r.chunks_ssd);
  ImGui::TableNextColumn();
  if (r.pinned) ImGui::TextColored(ImVec4(0.5f, 0.9f, 0.6f, 1), "pin");
  if (r.locked) {
    if (r.pinned) ImGui::SameLine();
    ImGui::TextColored(ImVec4(1, 0.8f, 0.4f, 1), "in use");
  }
  if (open && !leaf) {
    for (int c : children[size_t(i)]) Row(t, children, c);
    ImGui::TreePop();
  }
  ImGui::PopID();
}

}  // namespace

void DrawTreePanel(const AppSnapshot& s, TreePanelState&) {
  if (s.store_dir.empty()) {
    ImGui::TextDisabled("no KV store");
    return;
  }
  const store::StoreStats& st = s.store;
  ImGui::Text("store %s", s.store_dir.c_str());
  ImGui::Text("%llu nodes, %llu tokens in %llu segments; data %s, catalog %s; %llu inserts (%llu failed)",
              (unsigned long long)st.n_nodes, (unsigned long long)st.n_tokens, (unsigned long long)st.n_segments,
              FormatBytes(st.ssd_disk_bytes).c_str(), FormatBytes(st.catalog_bytes).c_str(),
              (unsigned long long)st.inserts, (unsigned long long)st.insert_failures);
  if (st.chunks_dropped_corrupt)
    ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "%llu chunks dropped (missing or failed checksum)",
                       (unsigned long long)st.chunks_dropped_corrupt);
  if (!s.tree || s.tree->rows.empty()) {
    ImGui::TextDisabled("nothing cached for this model yet: ask a question over a document");
    return;
  }
  const TreeView& t = *s.tree;
  const TreeTotals tot = SumTree(t);
  ImGui::Text("%zu nodes shown%s: %llu tokens, %s, %llu hits, %llu tokens pinned", t.rows.size(),
              t.truncated ? " (truncated)" : "", (unsigned long long)tot.n_tokens, FormatBytes(tot.kv_bytes).c_str(),
              (unsigned long long)tot.hits, (unsigned long long)tot.pinned_tokens);
  const auto children = TreeChildren(t);
  const ImGuiTableFlags flags = ImGuiTableFlags_BordersV | ImGuiTableFlags_BordersOuterH | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY;
  if (ImGui::BeginTable("##tree", 7, flags, ImVec2(0, ImGui::GetContentRegionAvail().y))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("prefix (first tokens)", ImGuiTableColumnFlags_NoHide);
    ImGui::TableSetupColumn("tokens", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("KV", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("hits", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("score / imp.", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("dev/host/SSD chunks", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableHeadersRow();
    for (int root : children.back()) Row(t, children, root);
    ImGui::EndTable();
  }
}

}  // namespace impress::gui
