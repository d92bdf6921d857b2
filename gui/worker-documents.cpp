// Worker: documents and modes. The rules (budget, dedup, retrieval) are ChatController's; here
// the worker shows the phase while they run and refreshes the documents' view after.
#include "gui/worker.h"

namespace impress::gui {

void Worker::AddDocument(const std::string& path) {
  draft_.phase = WorkerPhase::kIngesting;
  if (chat_->AddDocument(path).ok()) {
    RefreshCacheViews();
    RefreshConversationList();
  }
  Ready();
}

void Worker::RemoveDocument(int index) {
  if (index < 0 || !chat_->RemoveDocument(size_t(index)).ok()) return;
  RefreshCacheViews();
  RefreshConversationList();
}

void Worker::SetAttached(int index, bool attached) {
  if (index < 0 || !chat_->SetAttached(size_t(index), attached).ok()) return;
  RefreshCacheViews();
  RefreshConversationList();
}

void Worker::SetPrivate(int index, bool is_private) {
  if (index < 0 || !chat_->SetPrivate(size_t(index), is_private).ok()) return;
  RefreshCacheViews();
  RefreshConversationList();
}

void Worker::SetRetrieval(bool on) {
  if (!chat_->SetRetrieval(on).ok()) return;  // noticed
  RefreshCacheViews();
  RefreshConversationList();
}

}  // namespace impress::gui
