// Settings panel: the IMPRESS knobs (alpha, keep ratio, probe heads, sinks, recent window),
// cache budgets and policy, the system (IMPRESS or a baseline), generation length. A change is
// sent when a widget is released and takes effect on the next question; the worker saves it.
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include "gui/panels.h"
#include "gui/text-format.h"
#include "pipeline/system-policy.h"

namespace impress::gui {

namespace {

const store::PolicyKind kPolicies[] = {store::PolicyKind::kImpress, store::PolicyKind::kLru, store::PolicyKind::kLfu};

// A budget in MiB: whole MiB in the field ("2048 MiB"), the size as read ("2 GiB") on hover.
template <typename Done>
void BudgetDrag(const char* label, double* mib, float speed, Done&& done) {
  ImGui::DragScalar(label, ImGuiDataType_Double, mib, speed, nullptr, nullptr, "%.0f MiB");
  done();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s (drag, or double-click to type)", FormatMib(*mib).c_str());
}

// Answer sampling. Until the user moves a knob it shows (and follows) what the worker chose for
// the loaded model; "model default" goes back to that.
void DrawSampling(const TuningSettings::Sampling& current, TuningSettings::Sampling* e, bool* changed) {
  if (!e->user_set) *e = current;
  bool edited = false;
  auto mark = [&] { edited |= ImGui::IsItemDeactivatedAfterEdit(); };
  ImGui::SliderFloat("temperature", &e->temperature, 0.0f, 2.0f, "%.2f");
  mark();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("0 = greedy (always the most likely token)");
  ImGui::SliderInt("top-k", &e->top_k, 0, 200);
  mark();
  ImGui::SliderFloat("top-p", &e->top_p, 0.0f, 1.0f, "%.2f");
  mark();
  ImGui::SliderFloat("min-p", &e->min_p, 0.0f, 0.5f, "%.2f");
  mark();
  if (edited) e->user_set = true;
  if (e->user_set) {
    if (ImGui::SmallButton("model default")) {
      e->user_set = false;
      edited = true;
    }
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("use the model's recommended sampling again");
  } else {
    ImGui::TextDisabled("sampling: the model's recommendation");
  }
  *changed |= edited;
}

}  // namespace

void DrawSettingsPanel(const AppSnapshot& s, SettingsPanelState& st, UiActions& out) {
  if (st.synced_version == 0) {
    st.edit = s.settings;
    st.synced_version = s.version ? s.version : 1;
  }
  TuningSettings& e = st.edit;
  PipelineSettings& p = e.pipeline;
  bool changed = false;
  auto done = [&] { changed |= ImGui::IsItemDeactivatedAfterEdit(); };
  ImGui::PushItemWidth(-140);

  if (ImGui::BeginCombo("system", SystemName(p.system))) {
    // The registry's systems, the last registered (the full IMPRESS, then its ablations and the
    // baselines) first.
    const std::vector<SystemKind> systems = AllSystems();
    for (auto k = systems.rbegin(); k != systems.rend(); ++k) {
      if (ImGui::Selectable(SystemName(*k), *k == p.system)) {
        p.system = *k;
        changed = true;
      }
      if (ImGui::IsItemHovered()) {
        const SystemTraits& t = System(*k).traits();
        ImGui::SetTooltip("%s: %s", t.display.c_str(), t.description.c_str());
      }
    }
    ImGui::EndCombo();
  }
  ImGui::SliderFloat("alpha", &p.alpha, 0.0f, 2.0f, "%.2f");
  done();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("threshold t = (p/(2-p))^alpha; a larger alpha lowers t (more layers pass)");
  ImGui::SliderFloat("keep ratio", &p.keep, 0.05f, 1.0f, "%.2f");
  done();
  bool keep_tokens = p.select_budget == GroupBudget::kTokens;
  if (ImGui::Checkbox("read just the keep ratio", &keep_tokens)) {
    p.select_budget = keep_tokens ? GroupBudget::kTokens : GroupBudget::kMass;
    changed = true;
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "keep whole 4 KiB read groups until they hold the keep ratio's tokens; off: until they hold the importance "
        "that token-by-token selection keeps (more tokens, more bytes)");
  ImGui::SliderInt("score pooling", &p.pool, 0, 15, p.pool > 1 ? "%d tokens" : "off");
  done();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("rank each prefix token by the largest score of the tokens around it, so whole spans are kept");
  ImGui::SliderInt("keep after a match", &p.pool_follow, 0, 32, p.pool > 1 ? "%d tokens" : "(pooling off)");
  done();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("the tokens after an important one rank with it: what follows the words a question matches");
  changed |= ImGui::Checkbox("largest head score", &p.head_max);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("a token's score is the largest share any scored head gives it (else the heads' sum)");
  ImGui::SliderInt("probe heads", &p.probe_heads, 1, 9);
  done();
  changed |= ImGui::Checkbox("predicted reads", &p.predict_next);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "run each layer's probe early on the layer before's input and read the rows it picks while that layer "
        "computes; the layer's own probe still decides, so answers do not change");
  changed |= ImGui::Checkbox("predicted selection", &p.predict_select);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "a layer keeps the rows its early probe picked (when its heads agree) and does not probe again: the reads "
        "hide under the layer before; answers may differ a little from the layer's own probe");
  ImGui::SliderInt("sinks", &p.sinks, 0, 64);
  done();
  ImGui::SliderInt("recent window", &p.recent, 0, 512);
  done();
  ImGui::Separator();
  if (ImGui::BeginCombo("cache policy", std::string(store::PolicyKindName(e.policy)).c_str())) {
    for (store::PolicyKind k : kPolicies)
      if (ImGui::Selectable(std::string(store::PolicyKindName(k)).c_str(), k == e.policy)) {
        e.policy = k;
        changed = true;
      }
    ImGui::EndCombo();
  }
  BudgetDrag("device budget", &e.device_budget_mb, 1.0f, done);
  BudgetDrag("host budget", &e.host_budget_mb, 4.0f, done);
  BudgetDrag("SSD budget", &e.ssd_budget_mb, 16.0f, done);
  ImGui::SliderInt("reorder every (min)", &e.reorder_interval_min, 0, 120);
  done();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("takes effect at the next start; use 'Reorder now' in Tiers meanwhile");
  ImGui::Separator();
  ImGui::SliderInt("max tokens", &e.max_tokens, 1, 1024);
  done();
  DrawSampling(s.settings.sampling, &e.sampling, &changed);
  ImGui::SliderInt("fidelity tokens", &e.fidelity_tokens, 0, 64);
  done();
  ImGui::PopItemWidth();
  if (e.device_budget_mb < 0) e.device_budget_mb = 0;
  if (e.host_budget_mb < 0) e.host_budget_mb = 0;
  if (e.ssd_budget_mb < 1) e.ssd_budget_mb = 1;
  if (changed) out.commands.push_back(SettingsCommand(e));
  if (ImGui::Button("Reset to defaults")) {
    e = TuningSettings{};
    out.commands.push_back(SettingsCommand(e));
  }
}

}  // namespace impress::gui
