// Worker: saved conversations and the transcript they show. Opening, creating and deleting
// them (and keeping the database in step) is ChatController's.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gui/worker.h"

namespace impress::gui {

namespace {
// The note under a reopened answer: its request label and TTFT from the saved meta.
std::string EarlierAnswerNote(const std::string& meta_text) {
  const auto meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object() || !meta.contains("label") || !meta["label"].is_string()) return {};
  std::string note = "earlier answer: " + meta["label"].get<std::string>();
  if (meta.contains("ttft_ms") && meta["ttft_ms"].is_number())
    note += fmt::format(", TTFT {:.0f} ms", meta["ttft_ms"].get<double>());
  return note;
}
}  // namespace

void Worker::ShowConversation(const persist::SavedConversation& saved, ConversationChange change) {
  CutChat(0);
  if (change != ConversationChange::kOpened) {
    draft_.chat.push_back({"info",
                           change == ConversationChange::kNewKeepingDocuments
                               ? "new conversation (documents stay attached)"
                               : "new conversation",
                           nullptr});
    return;
  }
  for (const persist::SavedTurn& t : saved.turns) {
    ChatEntry e{t.role, t.content, nullptr};
    e.saved = true;
    draft_.chat.push_back(std::move(e));
    if (t.role == "assistant" && !t.meta.empty())
      if (std::string note = EarlierAnswerNote(t.meta); !note.empty())
        draft_.chat.push_back({"info", std::move(note), nullptr});
  }
}

void Worker::OpenConversation(int64_t id) {
  if (id == chat_->conversation_id()) return;
  draft_.phase = WorkerPhase::kIngesting;
  draft_.status = "opening a saved conversation";
  Publish();
  (void)chat_->OpenConversation(id);  // a failure is noticed; the open one stays
  RefreshCacheViews();
  RefreshConversationList();
  Ready();
}

void Worker::RefreshConversationList() {
  if (!chat_ || !chat_->saving()) return;
  auto list = chat_->ListConversations();
  if (!list.ok()) return;  // noticed
  draft_.conversations.clear();
  for (const persist::ConversationSummary& c : *list)
    draft_.conversations.push_back(
        {c.id, c.title, c.updated, c.n_turns, c.n_documents, c.mode == persist::ConversationMode::kRetrieval});
}

}  // namespace impress::gui
