// Importance panel: the matched prefix's tokens (x) by layers (y), coloured by importance
// (each layer normalised to its maximum); the tokens the last request used are marked, chunk
// boundaries drawn; hovering shows the token text and its score. Pick an earlier request (for
// example one before a reorder) to compare.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {

std::string Printable(const std::string& piece) {
  std::string out;
  for (char c : piece) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

}  // namespace

void DrawImportancePanel(const AppSnapshot& s, ImportancePanelState& st) {
  draw::RequestPicker("request##imp", s, &st.request);
  ImGui::SameLine();
  ImGui::Checkbox("mark selected", &st.outline_selected);
  ImGui::SameLine();
  ImGui::Checkbox("chunks", &st.show_chunks);
  const RequestRecord* r = draw::PickRequest(s, st.request);
  if (!r) {
    ImGui::TextDisabled("no request yet: the heatmap shows the importance of the reused prefix's tokens");
    return;
  }
  const RequestReport& rep = r->report;
  const int n_layer = int(rep.layers.size());
  const int n_tok = rep.n_matched;
  if (n_tok <= 0 || rep.importance.empty()) {
    ImGui::TextWrapped("%s reused no cached prefix (%d tokens computed), so there is no importance to show. "
                       "Ask a second question over the same documents.",
                       r->label.c_str(), rep.n_new);
    return;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float label_w = 28;
  const float width = std::max(50.0f, avail.x - label_w);
  const float height = std::max(60.0f, avail.y - ImGui::GetTextLineHeightWithSpacing() * 1.5f);
  const Heatmap h = BuildHeatmap(rep.importance, rep.selected, n_layer, n_tok, int(width));
  if (h.n_rows == 0) {
    ImGui::TextDisabled("the report's importance matrix does not match its shape");
    return;
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 o(p0.x + label_w, p0.y);
  const float cw = width / float(h.n_cols), ch = height / float(h.n_rows);
  for (int l = 0; l < h.n_rows; ++l) {
    for (int c = 0; c < h.n_cols; ++c) {
      const ImVec2 a(o.x + c * cw, o.y + l * ch), b(o.x + (c + 1) * cw, o.y + (l + 1) * ch);
      // A gamma below 1 lifts the long tail (a few sink tokens hold most of a layer's attention).
      dl->AddRectFilled(a, b, draw::HeatColour(std::pow(h.value[size_t(l) * h.n_cols + c], 0.4f)));
      if (st.outline_selected && h.selected[size_t(l) * h.n_cols + c])
        dl->AddLine(ImVec2(a.x, a.y + 0.5f), ImVec2(b.x, a.y + 0.5f), IM_COL32(255, 255, 255, 200));
    }
    if (l % 5 == 0) dl->AddText(ImVec2(p0.x, o.y + l * ch), IM_COL32(180, 180, 180, 255), std::to_string(l).c_str());
  }
  if (st.show_chunks && r->chunk_tokens > 0) {
    for (int t = r->chunk_tokens; t < n_tok; t += r->chunk_tokens) {
      const float x = o.x + width * float(t) / float(n_tok);
      dl->AddLine(ImVec2(x, o.y), ImVec2(x, o.y + height), IM_COL32(255, 255, 255, 60));
    }
  }
  dl->AddRect(o, ImVec2(o.x + width, o.y + height), IM_COL32(200, 200, 200, 120));
  ImGui::InvisibleButton("##heat", ImVec2(label_w + width, height));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int c = std::clamp(int((m.x - o.x) / cw), 0, h.n_cols - 1);
    const int l = std::clamp(int((m.y - o.y) / ch), 0, h.n_rows - 1);
    int first = 0, last = 0;
    HeatmapColumnTokens(h, n_tok, c, &first, &last);
    std::string text;
    for (int t = first; t < last && t < int(r->prefix_pieces.size()); ++t) text += r->prefix_pieces[t];
    float best = 0;
    int n_sel = 0;
    for (int t = first; t < last; ++t) {
      best = std::max(best, rep.importance[size_t(l) * n_tok + t]);
      if (size_t(l) * n_tok + t < rep.selected.size()) n_sel += rep.selected[size_t(l) * n_tok + t];
    }
    ImGui::SetTooltip("layer %d, token%s %d%s: \"%s\"\nimportance %.4g (%.0f%% of the layer's max)\n%d of %d selected\nchunk %d",
                      l, last - first > 1 ? "s" : "", first, last - first > 1 ? fmt::format("-{}", last - 1).c_str() : "",
                      Printable(text.substr(0, 200)).c_str(), best, 100.0 * h.value[size_t(l) * h.n_cols + c], n_sel,
                      last - first, r->chunk_tokens > 0 ? first / r->chunk_tokens : 0);
  }
  ImGui::TextDisabled("%s: %d prefix tokens x %d layers (%d tokens per column); white ticks = selected", r->label.c_str(),
                      n_tok, n_layer, h.tokens_per_col);
}

}  // namespace impress::gui
