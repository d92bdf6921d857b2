// Chat panel: the conversation with streamed answers; under each answer its TTFT, decode speed
// and where the reused prefix came from; input, stop, regenerate, ask again, new conversation.
#include <imgui.h>
#include <imgui_stdlib.h>
#include <spdlog/fmt/fmt.h>

#include <ctime>

#include "gui/cache-view.h"
#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {

// The saved conversations: pick one to reopen (its cached prefix is reused), start or delete one.
void DrawConversationBar(const AppSnapshot& s, ChatPanelState& st, UiActions& out) {
  const bool ready = s.phase == WorkerPhase::kIdle;
  if (s.db_path.empty()) {
    ImGui::TextDisabled("conversations are not saved");
    return;
  }
  ImGui::BeginDisabled(!ready);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float buttons = ImGui::CalcTextSize("NewRenameDelete").x + 6 * style.FramePadding.x + 3 * style.ItemSpacing.x;
  ImGui::SetNextItemWidth(std::max(120.0f, ImGui::GetContentRegionAvail().x - buttons));
  const std::string current = s.conversation_title.empty() ? "(none)" : s.conversation_title;
  if (ImGui::BeginCombo("##conversation", current.c_str())) {
    const int64_t now = int64_t(std::time(nullptr));
    for (const ConversationEntry& c : s.conversations) {
      ImGui::PushID(int(c.id));
      const std::string label = fmt::format("{}  ({} turns, {} docs{}, {})", c.title, c.n_turns, c.n_documents,
                                            c.retrieval ? ", retrieval" : "", FormatAge(c.updated, now));
      if (ImGui::Selectable(label.c_str(), c.id == s.conversation_id) && c.id != s.conversation_id)
        out.commands.push_back(ConversationCommand(Command::Kind::kOpenConversation, c.id));
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("saved conversations (%s)", s.db_path.c_str());
  ImGui::SameLine();
  if (ImGui::Button("New")) out.commands.push_back(MakeCommand(Command::Kind::kNewConversation));
  ImGui::SameLine();
  if (ImGui::Button("Rename")) {
    st.rename = s.conversation_title;
    ImGui::OpenPopup("rename");
  }
  ImGui::SameLine();
  if (ImGui::Button("Delete")) ImGui::OpenPopup("delete?");
  ImGui::EndDisabled();
  if (ImGui::BeginPopup("rename")) {
    ImGui::SetNextItemWidth(300);
    if (ImGui::InputText("##title", &st.rename, ImGuiInputTextFlags_EnterReturnsTrue) && !st.rename.empty()) {
      out.commands.push_back(ConversationCommand(Command::Kind::kRenameConversation, s.conversation_id, st.rename));
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
  if (ImGui::BeginPopup("delete?")) {
    ImGui::Text("Delete \"%s\" and its turns?", current.c_str());
    if (ImGui::Button("Delete")) {
      out.commands.push_back(ConversationCommand(Command::Kind::kDeleteConversation, s.conversation_id));
      ImGui::CloseCurrentPopup();
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
}

bool Busy(const AppSnapshot& s) {
  return s.phase == WorkerPhase::kPrefill || s.phase == WorkerPhase::kDecoding || s.phase == WorkerPhase::kFidelity ||
         s.phase == WorkerPhase::kStoring;
}

void DrawAnswerStats(const ChatEntry& e) {
  if (!e.request) return;
  const RequestRecord& r = *e.request;
  const RequestReport& rep = r.report;
  ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(150, 160, 175, 255));
  ImGui::TextWrapped("%s", fmt::format("{} | TTFT {:.0f} ms | {:.1f} tok/s | {} | probe passed {}/{} layers{}", r.label,
                                       rep.ttft_ms, r.tokens_per_s, ReuseSummary(rep), CountPassed(rep.layers),
                                       rep.layers.size(), StopNote(r.stop_reason))
                               .c_str());
  if (r.has_fidelity) {
    const FidelityReport& f = r.fidelity;
    ImGui::TextWrapped("%s", fmt::format("fidelity vs full KV: first token {}, KL {:.4f}, {}/{} greedy tokens equal",
                                         f.first_token_match ? "matches" : "differs", f.kl_divergence,
                                         f.n_continuation_match, f.n_continuation)
                                 .c_str());
  }
  ImGui::PopStyleColor();
}

}  // namespace

void DrawChatPanel(const AppSnapshot& s, ChatPanelState& st, UiActions& out) {
  DrawConversationBar(s, st, out);
  const float footer = ImGui::GetFrameHeightWithSpacing() * 2 + ImGui::GetStyle().ItemSpacing.y;
  ImGui::BeginChild("##transcript", ImVec2(0, -footer), true);
  if (s.chat.empty()) ImGui::TextDisabled("Attach a document (left), then ask a question below. Answers stream here.");
  for (size_t i = 0; i < s.chat.size(); ++i) {
    const ChatEntry& e = s.chat[i];
    ImGui::PushID(int(i));
    if (e.role == "user") {
      ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(120, 190, 255, 255));
      ImGui::TextWrapped("You: %s", e.text.c_str());
      ImGui::PopStyleColor();
    } else if (e.role == "assistant") {
      ImGui::TextWrapped("%s%s", e.text.c_str(), e.streaming ? " ..." : (e.stopped ? " [stopped]" : ""));
      DrawAnswerStats(e);
      ImGui::Separator();
    } else if (e.role == "error") {
      ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 110, 100, 255));
      ImGui::TextWrapped("Error: %s", e.text.c_str());
      ImGui::PopStyleColor();
    } else {
      ImGui::TextDisabled("%s", e.text.c_str());
    }
    ImGui::PopID();
  }
  // Follow the stream while the user is at the bottom.
  const size_t text_size = s.chat.empty() ? 0 : s.chat.back().text.size();
  if ((s.chat.size() != st.last_chat_size || text_size != st.last_text_size) &&
      ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 40)
    ImGui::SetScrollHereY(1.0f);
  st.last_chat_size = s.chat.size();
  st.last_text_size = text_size;
  ImGui::EndChild();

  const bool busy = Busy(s);
  const bool ready = s.phase == WorkerPhase::kIdle;
  if (st.focus_input) {
    ImGui::SetKeyboardFocusHere();
    st.focus_input = false;
  }
  ImGui::SetNextItemWidth(-80);
  const bool enter = ImGui::InputText("##question", &st.input, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  ImGui::BeginDisabled(!ready || st.input.empty());
  const bool send = ImGui::Button("Send", ImVec2(-1, 0));
  ImGui::EndDisabled();
  if ((enter || send) && ready && !st.input.empty()) {
    out.commands.push_back(MakeCommand(Command::Kind::kAsk, st.input));
    st.input.clear();
    st.focus_input = true;
  }
  ImGui::BeginDisabled(!busy);
  if (ImGui::Button("Stop")) out.stop = true;
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(!ready);
  if (ImGui::Button("Regenerate")) out.commands.push_back(MakeCommand(Command::Kind::kRegenerate));
  ImGui::SameLine();
  if (ImGui::Button("Ask again with current settings")) out.commands.push_back(MakeCommand(Command::Kind::kAskAgain));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Reruns the last question with the knobs as set now, plus a fidelity check against the full KV");
  ImGui::SameLine();
  if (ImGui::Button("New conversation")) out.commands.push_back(MakeCommand(Command::Kind::kNewConversation));
  ImGui::EndDisabled();
}

}  // namespace impress::gui
