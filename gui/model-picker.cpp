// The model picker: the loaded model's row (name, RAM, "Open model...") and a modal dialog with
// the known models (download with progress, or select), a file browser of its own (a folder's listing with a name
// filter: subfolders, Hugging Face model folders, .gguf files), the recently loaded models, and for the selection the
// RAM it will need against what is available; Load is offered only when it fits (the worker checks again before
// unloading anything).
#include <imgui.h>
#include <imgui_stdlib.h>
#include <spdlog/fmt/fmt.h>

#include <filesystem>

#include "gui/model-info.h"
#include "gui/panels.h"
#include "gui/snapshot-math.h"
#include "gui/text-format.h"

namespace impress::gui {

namespace {

constexpr double kMemRefreshSeconds = 2;

void Select(ModelPickerState& st, const std::string& path) {
  st.selected = path;
  st.estimated_at = -1;  // estimate again
}

// The selection's estimate and fit, computed again when the selection changes or every 2 s
// (available memory moves).
void RefreshEstimate(const AppSnapshot& s, ModelPickerState& st) {
  const double now = ImGui::GetTime();
  if (st.selected.empty()) return;
  if (st.estimate_for == st.selected && st.estimated_at >= 0 && now - st.estimated_at < kMemRefreshSeconds) return;
  st.estimate_for = st.selected;
  st.estimated_at = now;
  st.estimate_text.clear();
  st.estimate_error.clear();
  st.fits = false;
  auto e = EstimateModel(st.selected);
  if (!e.ok()) {
    st.estimate_error = e.status().ToString();
    return;
  }
  auto available = MemAvailableBytes();
  if (!available.ok()) {
    st.estimate_text =
        fmt::format("needs {} (weights {} + KV {} for {} tokens); free memory unknown", FormatBytes(e->total_bytes()),
                    FormatBytes(e->weight_bytes), FormatBytes(e->kv_bytes()), e->n_ctx);
    st.fits = true;
    return;
  }
  const FitCheck fit = CheckFit(*e, *available, s.model_bytes);
  st.fits = fit.fits;
  st.estimate_text = fmt::format("{}: {} layers, {} KV heads x {}, context {}\n{}", e->name, e->n_layer, e->n_head_kv,
                                 e->head_dim, e->n_ctx, fit.summary);
  if (!fit.fits) st.estimate_error = "will not fit in memory: " + fit.summary;
}

void Browser(ModelPickerState& st) {
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##dir", "folder", &st.dir);
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##filter", "filter names", &st.filter);
  auto entries = ListModelDirectory(st.dir, st.filter);
  if (ImGui::BeginChild("##listing", ImVec2(0, 240), true)) {
    if (!entries.ok()) ImGui::TextDisabled("%s", entries.status().ToString().c_str());
    else if (entries->empty()) ImGui::TextDisabled("no folders or .gguf files here");
    if (entries.ok()) {
      std::string go_to;
      for (const BrowserEntry& b : *entries) {
        using K = BrowserEntry::Kind;
        std::string label;  // fmt, not operator+: GCC 12 warns falsely (-Wrestrict) on the concatenations
        switch (b.kind) {
          case K::kParent: label = "[..]"; break;
          case K::kDirectory: label = fmt::format("[dir] {}", b.name); break;
          case K::kHfFolder: label = fmt::format("[HF model] {}", b.name); break;
          case K::kGguf: label = fmt::format("{}  ({})", b.name, FormatBytes(b.bytes)); break;
        }
        const bool model = b.kind == K::kGguf || b.kind == K::kHfFolder;
        if (ImGui::Selectable(label.c_str(), model && st.selected == b.path, ImGuiSelectableFlags_AllowDoubleClick)) {
          if (model) Select(st, b.path);
          if (b.kind == K::kParent || b.kind == K::kDirectory ||
              (b.kind == K::kHfFolder && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)))
            go_to = b.path;
        }
        if (ImGui::IsItemHovered() && b.kind != K::kParent) ImGui::SetTooltip("%s", b.path.c_str());
      }
      if (!go_to.empty()) st.dir = go_to;
    }
  }
  ImGui::EndChild();
}

// The known models: each with its size and the RAM it needs at 4K tokens; Select for one that
// is present, Download (with progress and Cancel) for one that is not.
void KnownModels(ModelPickerState& st, UiActions& out) {
  if (!st.catalog_error.empty()) {
    ImGui::TextDisabled("%s", st.catalog_error.c_str());
    return;
  }
  if (st.catalog.models.empty()) return;
  ImGui::TextDisabled("known models (in %s)", st.models_dir.c_str());
  const DownloadStatus& d = st.download;
  if (ImGui::BeginTable("##known", 4, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg)) {
    ImGui::TableSetupColumn("model", ImGuiTableColumnFlags_WidthStretch);
    for (const KnownModel& m : st.catalog.models) {
      ImGui::PushID(m.name.c_str());
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(m.display.c_str());
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("%s: %d layers, %d KV heads x %d, context %d, %s\nKV %s per token; RAM at 16K %s, 32K %s",
                          m.name.c_str(), m.n_layer, m.n_head_kv, m.head_dim, m.n_ctx, m.license.c_str(),
                          FormatBytes(m.KvBytesPerToken()).c_str(), FormatBytes(m.RamBytes(16384)).c_str(),
                          FormatBytes(m.RamBytes(32768)).c_str());
      }
      ImGui::TableNextColumn();
      ImGui::Text("%s", FormatBytes(m.bytes).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("RAM at 4K %s", FormatBytes(m.RamBytes(4096)).c_str());
      ImGui::TableNextColumn();
      const bool present = IsModelPresent(m, st.models_dir);
      if (d.active && d.name == m.name) {
        const float frac = d.total ? float(double(d.done) / double(d.total)) : 0.0f;
        ImGui::ProgressBar(frac, ImVec2(120, 0), fmt::format("{:.0f}%", 100.0 * frac).c_str());
        ImGui::SameLine();
        if (ImGui::SmallButton("Cancel")) out.cancel_pull = true;
      } else if (present) {
        if (ImGui::SmallButton("Select")) Select(st, ModelFilePath(m, st.models_dir));
      } else {
        ImGui::BeginDisabled(d.active);
        if (ImGui::SmallButton("Download")) out.pull_model = m.name;
        ImGui::EndDisabled();
      }
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  if (!d.active && !d.name.empty()) {
    if (d.ok) ImGui::TextDisabled("%s downloaded and verified", d.name.c_str());
    else ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1), "%s: %s", d.name.c_str(), d.message.c_str());
  }
  ImGui::Separator();
}

void Dialog(const AppSnapshot& s, ModelPickerState& st, UiActions& out) {
  KnownModels(st, out);
  if (st.dir.empty()) {
    // A file's folder, or the folder holding an HF model folder. (assign, not operator=: GCC 12
    // warns falsely with -Wrestrict on the inlined copy.)
    const std::string parent = std::filesystem::path(s.model_path).parent_path().string();
    st.dir.assign(parent.empty() ? std::string(".") : parent);
  }
  if (!s.recent_models.empty()) {
    ImGui::TextDisabled("recent");
    for (const std::string& r : s.recent_models) {
      ImGui::PushID(r.c_str());
      if (ImGui::Selectable("##recent", st.selected == r, 0, ImVec2(0, ImGui::GetTextLineHeight()))) Select(st, r);
      ImGui::SameLine();
      draw::TextElided(r);
      ImGui::PopID();
    }
    ImGui::Separator();
  }
  Browser(st);
  RefreshEstimate(s, st);
  if (st.selected.empty()) ImGui::TextDisabled("select a .gguf file or a Hugging Face model folder");
  else {
    draw::TextElided(st.selected);
    if (!st.estimate_text.empty()) ImGui::TextWrapped("%s", st.estimate_text.c_str());
    if (!st.estimate_error.empty()) ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1), "%s", st.estimate_error.c_str());
  }
  const bool busy = s.phase != WorkerPhase::kIdle && s.phase != WorkerPhase::kFailed;
  ImGui::BeginDisabled(st.selected.empty() || !st.fits || busy);
  if (ImGui::Button("Load")) {
    out.commands.push_back(MakeCommand(Command::Kind::kLoadModel, st.selected));
    ImGui::CloseCurrentPopup();
  }
  ImGui::EndDisabled();
  if (busy && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("the model is busy: load when it is ready");
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
}

}  // namespace

void DrawModelPicker(const AppSnapshot& s, ModelPickerState& st, UiActions& out) {
  const float button_w = ImGui::CalcTextSize("Open model...").x + ImGui::GetStyle().FramePadding.x * 2;
  const std::string name = s.model_name.empty() ? "(no model)" : s.model_name;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Model:");
  ImGui::SameLine();
  draw::TextElided(
      name, ImGui::GetContentRegionAvail().x - button_w - ImGui::GetStyle().ItemSpacing.x,
      fmt::format("{}\n{}\nabout {} with KV for its whole context", name, s.model_path, FormatBytes(s.model_bytes)));
  ImGui::SameLine();
  if (ImGui::Button("Open model...") || st.open_requested) {
    ImGui::OpenPopup("Open model");
    st.open_requested = false;
  }
  ImGui::SetNextWindowSize(ImVec2(860, 0), ImGuiCond_Appearing);
  if (ImGui::BeginPopupModal("Open model", nullptr)) {
    Dialog(s, st, out);
    ImGui::EndPopup();
  }
  ImGui::Separator();
}

}  // namespace impress::gui
