// ChatController: saved conversations (the ChatDb kept in step with the session's conversation).
#include <fmt/format.h>

#include "chat/chat-controller.h"

namespace impress {

Status ChatController::OpenDatabase(const std::string& path) {
  auto db = persist::ChatDb::Open(path);
  if (!db.ok()) {
    Notice("conversations are not saved this time: " + db.status().ToString());
    return db.status();
  }
  db_ = std::move(*db);
  std::string moved_to;
  auto idx = persist::PassageIndex::OpenOrStartOver(path + ".passages", {}, &moved_to);
  if (!idx.ok()) Notice("retrieval mode is unavailable: " + idx.status().ToString());
  else passages_ = std::move(*idx);
  if (passages_ && !moved_to.empty()) {
    Notice(fmt::format("the passage index {}.passages was damaged; kept as {} and rebuilt from the saved conversations",
                       path, moved_to));
    ReindexSavedDocuments();
  }
  auto list = ListConversations();
  if (list.ok() && !list->empty()) {
    if (auto opened = OpenConversation(list->front().id); opened.ok()) return Status::Ok();
  }
  NewConversation(/*keep_documents=*/false);
  return Status::Ok();
}

// The passage index is derived data: every saved conversation's documents are indexed again.
void ChatController::ReindexSavedDocuments() {
  auto list = db_->ListConversations();
  if (!list.ok()) return Notice("cannot list saved conversations: " + list.status().ToString());
  for (const persist::ConversationSummary& summary : *list) {
    auto c = db_->Load(summary.id);
    if (!c.ok()) {
      Notice("cannot read conversation \"" + summary.title + "\": " + c.status().ToString());
      continue;
    }
    for (const persist::SavedDocument& d : c->documents) IndexPassages(Document{d.path, d.name, d.text});
  }
}

Result<std::vector<persist::ConversationSummary>> ChatController::ListConversations() {
  if (!db_) return std::vector<persist::ConversationSummary>{};
  auto list = db_->ListConversations();
  if (!list.ok()) Notice("cannot list saved conversations: " + list.status().ToString());
  return list;
}

Result<persist::SavedConversation> ChatController::OpenConversation(int64_t id) {
  if (!db_) return Status::Unsupported("conversations are not saved this time");
  auto c = db_->Load(id);
  if (!c.ok()) {
    Notice("cannot open the conversation: " + c.status().ToString());
    return c.status();
  }
  Activity("opening " + c->summary.title);
  conv_id_ = id;
  title_ = c->summary.title;
  retrieval_ = c->summary.mode == persist::ConversationMode::kRetrieval;
  docs_.clear();
  Conversation& conv = session_.conversation();
  conv.ClearTurns();
  for (const persist::SavedDocument& d : c->documents) {
    ChatDocument e;
    e.doc = Document{.path = d.path, .name = d.name, .text = d.text, .is_private = d.is_private};
    e.attached = d.attached;
    // Counted again: the saved count may be another model's.
    Activity("tokenizing " + d.name);
    e.n_tokens = CountTokens(d.text);
    IndexPassages(e.doc);
    docs_.push_back(std::move(e));
  }
  for (const persist::SavedTurn& t : c->turns) conv.AddTurn(t.role, t.content);
  SyncConversationDocuments();
  if (events_.conversation_changed) events_.conversation_changed(*c, ConversationChange::kOpened);
  Notice(fmt::format("opened \"{}\": {} turns, {} documents", c->summary.title, c->turns.size(), c->documents.size()));
  return c;
}

void ChatController::NewConversation(bool keep_documents) {
  session_.conversation().ClearTurns();
  if (!keep_documents) docs_.clear();
  title_ = kUntitled;
  if (db_) {
    auto id = db_->CreateConversation(
        kUntitled, retrieval_ ? persist::ConversationMode::kRetrieval : persist::ConversationMode::kDocuments);
    if (!id.ok()) {
      Notice("the new conversation is not saved: " + id.status().ToString());
      conv_id_ = 0;
    } else {
      conv_id_ = *id;
    }
  }
  SyncConversationDocuments();
  SaveDocuments();
  if (events_.conversation_changed) {
    persist::SavedConversation fresh;
    fresh.summary.id = conv_id_;
    fresh.summary.title = title_;
    fresh.summary.mode = retrieval_ ? persist::ConversationMode::kRetrieval : persist::ConversationMode::kDocuments;
    events_.conversation_changed(fresh,
                                 keep_documents ? ConversationChange::kNewKeepingDocuments : ConversationChange::kNew);
  }
}

Status ChatController::DeleteConversation(int64_t id) {
  if (!db_) return Status::Unsupported("conversations are not saved this time");
  if (Status st = db_->DeleteConversation(id); !st.ok()) {
    Notice("cannot delete the conversation: " + st.ToString());
    return st;
  }
  Notice("deleted a saved conversation");
  if (id == conv_id_) {
    conv_id_ = 0;
    auto list = ListConversations();
    if (list.ok() && !list->empty()) {
      if (auto opened = OpenConversation(list->front().id); opened.ok()) return Status::Ok();
    }
    NewConversation(/*keep_documents=*/false);
  }
  return Status::Ok();
}

Status ChatController::RenameConversation(int64_t id, const std::string& title) {
  if (!db_) return Status::Unsupported("conversations are not saved this time");
  Status st = db_->RenameConversation(id, title);
  if (!st.ok()) Notice("cannot rename: " + st.ToString());
  if (id == conv_id_) title_ = title;  // the window shows the new title even when the save failed
  return st;
}

void ChatController::SaveDocuments() {
  if (!db_ || !conv_id_) return;
  std::vector<persist::SavedDocument> saved;
  for (const ChatDocument& d : docs_) {
    persist::SavedDocument s;
    s.name = d.doc.name;
    s.path = d.doc.path;
    s.text = d.doc.text;
    s.n_tokens = d.n_tokens;
    s.attached = d.attached;
    s.is_private = d.doc.is_private;
    saved.push_back(std::move(s));
  }
  if (Status st = db_->SetDocuments(conv_id_, saved); !st.ok()) Notice("documents not saved: " + st.ToString());
}

void ChatController::SaveExchange(const std::string& question, const std::string& meta) {
  if (!db_ || !conv_id_) return;
  const auto& turns = session_.conversation().turns();
  Status st = Status::Ok();
  if (auto r = db_->AppendTurn(conv_id_, "user", turns[turns.size() - 2].content); !r.ok()) st = r.status();
  else if (auto r2 = db_->AppendTurn(conv_id_, "assistant", turns.back().content, meta); !r2.ok()) st = r2.status();
  if (st.ok() && title_ == kUntitled) {
    title_ = TitleFromQuestion(question);
    st = db_->RenameConversation(conv_id_, title_);
  }
  if (!st.ok()) Notice("the conversation was not saved: " + st.ToString());
}

}  // namespace impress
