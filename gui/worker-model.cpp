// Worker: switching the model in a running app. The new model is measured from its header and
// refused while the old one still runs when it will not fit in RAM (weights + KV for its whole
// context against MemAvailable plus what the old model frees). Otherwise the session is closed
// (its store writes finish), the new one opens on the same store (each model's KV is kept apart
// by its fingerprint) and the conversation continues: reopened from the saved conversations, or
// its turns and documents carried over when conversations are not saved. A model that fails to
// load gives way to the previous one again.
#include <fmt/format.h>

#include <algorithm>

#include "gui/model-info.h"
#include "gui/worker.h"

namespace impress::gui {

void Worker::LoadModel(const std::string& path) {
  auto estimate = EstimateModel(path);
  if (!estimate.ok()) {
    Message("cannot load " + path + ": " + estimate.status().ToString());
    return;
  }
  if (auto available = MemAvailableBytes(); available.ok()) {
    const FitCheck fit = CheckFit(*estimate, *available, session_ ? draft_.model_bytes : 0);
    if (!fit.fits) {
      Message(fmt::format("{} will not fit in memory, not loaded: {}", estimate->name, fit.summary));
      return;
    }
  } else {
    Message("free memory unknown (" + available.status().ToString() + "); loading anyway");
  }

  // What the conversation carries over.
  const int64_t conversation = draft_.conversation_id;
  std::vector<std::string> documents;
  std::vector<ChatMessage> turns;
  for (const DocumentEntry& d : draft_.documents) documents.push_back(d.path);
  if (session_) turns = session_->conversation().turns();
  const std::string previous = model_path_;

  draft_.status = "closing " + draft_.model_name;
  Publish();
  chat_.reset();
  session_.reset();  // waits for the store write in flight
  draft_.documents.clear();
  model_path_ = path;
  OpenSession({});
  if (!session_) {
    const std::string why = draft_.status;
    if (previous.empty() || previous == path) return;  // nothing to go back to
    model_path_ = previous;
    OpenSession({});
    Message(fmt::format("{}; back to {}", why, draft_.model_name));
    if (!session_) return;
  } else if (!options_.recent_models_path.empty()) {
    if (Status st = RememberModel(options_.recent_models_path, model_path_); !st.ok())
      Message("the recent models list was not saved: " + st.ToString());
    draft_.recent_models = LoadRecentModels(options_.recent_models_path);
  }

  // The same conversation again: the saved one, else its turns and documents.
  if (chat_->saving() && conversation != 0 && chat_->conversation_id() != conversation)
    (void)chat_->OpenConversation(conversation);  // noticed on failure
  if (!chat_->saving() && session_->conversation().turns().empty())
    for (const ChatMessage& t : turns) session_->conversation().AddTurn(t.role, t.content);
  for (const std::string& d : documents) {
    const bool present = std::any_of(draft_.documents.begin(), draft_.documents.end(),
                                     [&](const DocumentEntry& e) { return e.path == d; });
    if (!present) AddDocument(d);
  }
  SyncChatState();
  RefreshConversationList();
  RefreshCacheViews();
  Ready();
  draft_.status = "ready: " + draft_.model_name;
  draft_.chat.push_back({"info", fmt::format("model: {} ({})", draft_.model_name, model_path_), nullptr});
  Message("loaded " + draft_.model_name);
}

}  // namespace impress::gui
