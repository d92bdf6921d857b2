// Importance panel: the matched prefix's tokens (x) by layers (y), coloured by importance
// (each layer normalised to its maximum); the tokens the last request used are marked, chunk
// boundaries drawn; hovering shows the token text and its score. "compare" draws a second
// request's heatmap below the first (for example one before and one after a reorder), each
// with how many chunks its selected tokens touch.
//
// The heatmap is one texture (gui/texture-cache.h), built and uploaded only when the request,
// the size or the options change; without a texture provider (tests: no renderer) it is drawn
// as one rectangle per cell.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>

#include "gui/frame-profile.h"
#include "gui/panels.h"
#include "gui/snapshot-math.h"
#include "gui/texture-cache.h"

namespace impress::gui {

namespace {

constexpr float kGamma = 0.4f;       // lifts the long tail: a few sink tokens hold most of a layer's attention
constexpr int kMaxRectCells = 3000;  // cells per map when drawn as rectangles (8 vertices each at most)

std::string Printable(const std::string& piece) {
  std::string out;
  for (char c : piece) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

bool HasImportance(const RequestRecord& r) {
  const RequestReport& rep = r.report;
  return rep.n_matched > 0 && !rep.layers.empty() && rep.importance.size() >= rep.layers.size() * size_t(rep.n_matched);
}

// The request drawn below the main one: requests[compare] when valid, else the newest request
// before `main` that has an importance map (null when there is none).
const RequestRecord* PickCompare(const AppSnapshot& s, int compare, const RequestRecord* main) {
  if (compare >= 0 && size_t(compare) < s.requests.size()) return s.requests[size_t(compare)].get();
  bool before = false;
  for (int i = int(s.requests.size()) - 1; i >= 0; --i) {
    const RequestRecord* r = s.requests[size_t(i)].get();
    if (r == main) {
      before = true;
      continue;
    }
    if (before && HasImportance(*r)) return r;
  }
  return nullptr;
}

void ComparePicker(const AppSnapshot& s, const RequestRecord* shown, int* index) {
  const std::string preview =
      *index < 0 ? std::string("previous") + (shown ? " (" + shown->label + ")" : std::string(" (none)"))
                 : (shown ? shown->label : std::string("none"));
  ImGui::SetNextItemWidth(260);
  if (ImGui::BeginCombo("compare with##imp", preview.c_str())) {
    if (ImGui::Selectable("previous with importance", *index < 0)) *index = -1;
    for (int i = int(s.requests.size()) - 1; i >= 0; --i) {
      ImGui::PushID(i);
      if (ImGui::Selectable(s.requests[size_t(i)]->label.c_str(), *index == i)) *index = i;
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
}

// One line under a heatmap: the request, its size and the chunks its selection touches.
void Caption(const RequestRecord& r, int tokens_per_col) {
  const RequestReport& rep = r.report;
  const int n_layer = int(rep.layers.size());
  const ChunkTouch t = CountSelectedChunks(rep.selected, n_layer, rep.n_matched, r.chunk_tokens);
  const uint32_t read = rep.chunks_device + rep.chunks_host + rep.chunks_ssd;
  if (t.per_layer.empty()) {
    ImGui::TextDisabled("%s: %d prefix tokens x %d layers (%d tokens per column)", r.label.c_str(), rep.n_matched,
                        n_layer, tokens_per_col);
    return;
  }
  ImGui::TextDisabled(
      "%s: %d tokens x %d layers (%d/column); selection touches %d chunks (%.1f of %d per layer), read %u",
      r.label.c_str(), rep.n_matched, n_layer, tokens_per_col, t.total, double(t.total) / double(std::max(1, n_layer)),
      t.chunks_per_layer, read);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Chunks touched: for each layer, the number of distinct %d-token chunks of the prefix, in token order\n"
        "(chunk i = tokens [%d i, %d (i+1))), that hold a token this request selected; summed over the %d layers.\n"
        "%d selected (layer, token) pairs lie in %d of %d layer-chunks.\n"
        "This is what the selection touches in a store laid out in token order: the report does not carry the\n"
        "store's layout after a reorder, so a reorder does not change this count.\n"
        "Read: the chunks the request's reads were served from (device %u / host %u / SSD %u), as the store laid\n"
        "them out at the time, including the probe-key reads; a reorder that groups important tokens lowers it.",
        r.chunk_tokens, r.chunk_tokens, r.chunk_tokens, n_layer, t.selected_tokens, t.total,
        t.chunks_per_layer * n_layer, rep.chunks_device, rep.chunks_host, rep.chunks_ssd);
}

// Draws r's heatmap in a width x height box at the cursor (plus a caption line below).
void DrawHeatmap(const RequestRecord& r, const ImportancePanelState& st, float width, float height, const char* id) {
  const RequestReport& rep = r.report;
  const int n_layer = int(rep.layers.size());
  const int n_tok = rep.n_matched;
  const float label_w = 28;
  const float map_w = std::max(50.0f, width - label_w);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 o(p0.x + label_w, p0.y);

  HeatmapImageOptions io;
  io.gamma = kGamma;
  io.mark_selected = st.outline_selected;
  int max_cols = int(map_w);  // a texel column per pixel column at most
  void* tex = nullptr;
  if (TextureProvider* tp = CurrentTextures()) {
    // A request record never changes once published, so its id, the shape and the options name the picture.
    const std::string key = fmt::format("importance:{}:{}:{}x{}:{}:{}", r.id, static_cast<const void*>(&r), max_cols,
                                        n_layer, n_tok, int(io.mark_selected));
    tex = tp->Texture(key, [&] {
      return RenderHeatmapImage(BuildHeatmap(rep.importance, rep.selected, n_layer, n_tok, max_cols), io);
    });
  }
  // Without a texture every cell is a rectangle (and maybe a line): fewer columns keep the
  // window's vertices within ImGui's 16-bit indices, two maps included.
  if (!tex) max_cols = std::clamp(kMaxRectCells / std::max(1, n_layer), 1, max_cols);
  const HeatmapShape shape = ShapeHeatmap(n_tok, max_cols);
  const float cw = map_w / float(shape.n_cols), ch = height / float(n_layer);
  if (tex) {
    dl->AddImage(tex, o, ImVec2(o.x + map_w, o.y + height));
  } else {  // no renderer (tests) or the upload failed: one rectangle per cell
    const Heatmap h = BuildHeatmap(rep.importance, rep.selected, n_layer, n_tok, max_cols);
    for (int l = 0; l < h.n_rows; ++l) {
      for (int c = 0; c < h.n_cols; ++c) {
        const ImVec2 a(o.x + c * cw, o.y + l * ch), b(o.x + (c + 1) * cw, o.y + (l + 1) * ch);
        dl->AddRectFilled(a, b, draw::HeatColour(std::pow(h.value[size_t(l) * h.n_cols + c], kGamma)));
        if (st.outline_selected && h.selected[size_t(l) * h.n_cols + c])
          dl->AddLine(ImVec2(a.x, a.y + 0.5f), ImVec2(b.x, a.y + 0.5f), IM_COL32(255, 255, 255, 200));
      }
    }
  }
  for (int l = 0; l < n_layer; l += 5)
    dl->AddText(ImVec2(p0.x, o.y + l * ch), IM_COL32(180, 180, 180, 255), std::to_string(l).c_str());
  if (st.show_chunks && r.chunk_tokens > 0) {
    for (int t = r.chunk_tokens; t < n_tok; t += r.chunk_tokens) {
      const float x = o.x + map_w * float(t) / float(n_tok);
      dl->AddLine(ImVec2(x, o.y), ImVec2(x, o.y + height), IM_COL32(255, 255, 255, 60));
    }
  }
  dl->AddRect(o, ImVec2(o.x + map_w, o.y + height), IM_COL32(200, 200, 200, 120));
  ImGui::InvisibleButton(id, ImVec2(label_w + map_w, height));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const int c = std::clamp(int((m.x - o.x) / cw), 0, shape.n_cols - 1);
    const int l = std::clamp(int((m.y - o.y) / ch), 0, n_layer - 1);
    const int first = std::clamp(c * shape.tokens_per_col, 0, n_tok);
    const int last = std::clamp((c + 1) * shape.tokens_per_col, 0, n_tok);
    std::string text;
    for (int t = first; t < last && t < int(r.prefix_pieces.size()); ++t) text += r.prefix_pieces[size_t(t)];
    const float* row = &rep.importance[size_t(l) * n_tok];
    float best = 0, row_max = 0;
    for (int t = 0; t < n_tok; ++t)
      if (std::isfinite(row[t])) row_max = std::max(row_max, row[t]);
    int n_sel = 0;
    for (int t = first; t < last; ++t) {
      if (std::isfinite(row[t])) best = std::max(best, row[t]);
      if (size_t(l) * n_tok + t < rep.selected.size()) n_sel += rep.selected[size_t(l) * n_tok + t];
    }
    ImGui::SetTooltip(
        "%s\nlayer %d, token%s %d%s: \"%s\"\nimportance %.4g (%.0f%% of the layer's max)\n%d of %d selected\nchunk %d",
        r.label.c_str(), l, last - first > 1 ? "s" : "", first,
        last - first > 1 ? fmt::format("-{}", last - 1).c_str() : "", Printable(text.substr(0, 200)).c_str(), best,
        row_max > 0 ? 100.0 * best / row_max : 0.0, n_sel, last - first,
        r.chunk_tokens > 0 ? first / r.chunk_tokens : 0);
  }
  Caption(r, shape.tokens_per_col);
}

}  // namespace

void DrawImportancePanel(const AppSnapshot& s, ImportancePanelState& st) {
  const ScopedSection timed(FrameStage::kImportance);
  draw::RequestPicker("request##imp", s, &st.request);
  ImGui::SameLine();
  ImGui::Checkbox("mark selected", &st.outline_selected);
  ImGui::SameLine();
  ImGui::Checkbox("chunks", &st.show_chunks);
  ImGui::SameLine();
  ImGui::Checkbox("compare", &st.compare);
  const RequestRecord* r = draw::PickRequest(s, st.request);
  const RequestRecord* other = st.compare && r ? PickCompare(s, st.compare_request, r) : nullptr;
  if (st.compare) ComparePicker(s, other, &st.compare_request);
  if (!r) {
    ImGui::TextDisabled("no request yet: the heatmap shows the importance of the reused prefix's tokens");
    return;
  }
  const RequestReport& rep = r->report;
  if (rep.n_matched <= 0 || rep.importance.empty()) {
    ImGui::TextWrapped(
        "%s reused no cached prefix (%d tokens computed), so there is no importance to show. "
        "Ask a second question over the same documents.",
        r->label.c_str(), rep.n_new);
    return;
  }
  if (!HasImportance(*r)) {
    ImGui::TextDisabled("the report's importance matrix does not match its shape");
    return;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float caption_h = ImGui::GetTextLineHeightWithSpacing() * 1.5f;
  if (!st.compare) {
    DrawHeatmap(*r, st, avail.x, std::max(60.0f, avail.y - caption_h), "##heat");
    return;
  }
  const float each = std::max(40.0f, (avail.y - 2 * caption_h) / 2);
  DrawHeatmap(*r, st, avail.x, each, "##heat");
  if (!other) {
    ImGui::TextDisabled("no earlier request with an importance map to compare with");
  } else if (!HasImportance(*other)) {
    ImGui::TextDisabled("%s has no importance map (it reused no cached prefix)", other->label.c_str());
  } else {
    DrawHeatmap(*other, st, avail.x, each, "##heat2");
  }
}

}  // namespace impress::gui
