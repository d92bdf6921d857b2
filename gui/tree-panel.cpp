// Radix tree / catalog panel: the store's totals, and the cached prefixes this session's
// requests matched and stored, as a tree (documents -> turns), with sizes and tier residency.
// (PrefixStore exposes counts, not its nodes; a node walk needs a store accessor.)
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

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
  ImGui::Separator();
  ImGui::SetNextItemOpen(true, ImGuiCond_Once);
  if (ImGui::TreeNode("root", "prefixes of this session (%zu requests)", s.requests.size())) {
    int docs_tokens = 0;
    for (const DocumentEntry& d : s.documents)
      if (d.attached) docs_tokens += d.n_tokens;
    ImGui::SetNextItemOpen(true, ImGuiCond_Once);
    if (ImGui::TreeNode("docs", "system + documents (~%d tokens)", docs_tokens)) {
      for (const DocumentEntry& d : s.documents)
        ImGui::BulletText("%s: %d tokens, %s%s", d.name.c_str(), d.n_tokens, d.residency.c_str(),
                          d.attached ? "" : " (detached)");
      for (const auto& r : s.requests) {
        const RequestReport& rep = r->report;
        ImGui::BulletText("%s: prefix %d tokens, matched %d, stored %d tokens after; chunks device %u / host %u / SSD %u",
                          r->label.c_str(), rep.n_prefix, rep.n_matched, rep.n_prompt + rep.n_generated,
                          rep.chunks_device, rep.chunks_host, rep.chunks_ssd);
      }
      ImGui::TreePop();
    }
    ImGui::TreePop();
  }
}

}  // namespace impress::gui
