// ChatController: documents, modes and questions. Saved conversations are in
// chat-controller-saved.cpp, the store's view of the documents in chat-controller-cache.cpp.
#include "chat/chat-controller.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"

namespace impress {

std::string PassageKey(const Document& d) {
  return fmt::format("{}#{:016x}", d.path, XXH3_64bits(d.text.data(), d.text.size()));
}

std::string TitleFromQuestion(const std::string& question) {
  std::string t = OneLine(question, 60);
  return t.empty() ? std::string(ChatController::kUntitled) : t;
}

std::string AnswerMeta(const std::string& label, const RequestReport& report) {
  const nlohmann::json meta = {{"label", label}, {"ttft_ms", report.ttft_ms}, {"n_matched", report.n_matched}};
  return meta.dump();
}

ChatController::ChatController(ChatSession& session, ChatEvents events) :
    session_(session), events_(std::move(events)) {}

ChatController::~ChatController() = default;

void ChatController::Notice(const std::string& text) const {
  if (events_.notice) events_.notice(text);
}

void ChatController::Activity(const std::string& text) const {
  if (events_.activity) events_.activity(text);
}

int ChatController::CountTokens(const std::string& text) const {
  const ProgressFn progress = [this](uint64_t done, uint64_t total, std::string_view what) {
    if (events_.progress) (void)events_.progress(done, total, what);
    return true;  // tokenizing is not cancelled: the count is needed
  };
  return int(session_.context().tokenizer().EncodeLiteral(text, false, progress).size());
}

ContextBudget ChatController::budget() const {
  return ContextBudget{session_.context().config().n_ctx_train, max_tokens_};
}

void ChatController::IndexPassages(const Document& doc) {
  if (!passages_) return;
  const std::string key = PassageKey(doc);
  if (auto have = passages_->Contains(key); have.ok() && *have) return;
  Activity("indexing " + doc.name + " for retrieval");
  if (Status st = passages_->Add(key, doc.name, doc.text); !st.ok()) Notice("retrieval index: " + st.ToString());
}

void ChatController::SyncConversationDocuments() {
  Conversation& conv = session_.conversation();
  conv.ClearDocuments();
  n_context_tokens_ = 0;
  for (const ChatDocument& d : docs_) {
    if (!d.attached || retrieval_) continue;
    conv.AddDocument(d.doc);
    n_context_tokens_ += d.n_tokens;
  }
  // Where each attached document sits in the prompt (for residency, pin and drop).
  context_prefix_.clear();
  spans_.clear();
  if (conv.documents().empty()) return;
  spans_ = conv.DocumentSpans(session_.context().tokenizer(), session_.context().chat_template(), /*raw=*/false,
                              &context_prefix_);
  if (spans_.size() != conv.documents().size()) spans_.clear();
}

Result<size_t> ChatController::AddDocument(const std::string& path) {
  Activity("reading " + path);
  auto doc = LoadDocument(path);
  if (!doc.ok()) {
    Notice("cannot add document: " + doc.status().ToString());
    return doc.status();
  }
  return AddDocument(std::move(*doc));
}

Result<size_t> ChatController::AddDocument(Document doc) {
  for (const ChatDocument& d : docs_) {
    if (d.doc.path == doc.path && d.doc.text == doc.text) {
      const std::string why = fmt::format("{} is already in this conversation", doc.name);
      Notice(why);
      return Status::InvalidArgument(why);
    }
  }
  Activity("tokenizing " + doc.name);
  ChatDocument e;
  e.n_tokens = CountTokens(doc.text);
  IndexPassages(doc);
  int attached_tokens = 0;
  for (const ChatDocument& d : docs_)
    if (d.attached) attached_tokens += d.n_tokens;
  const ContextBudget b = budget();
  const AttachFit fit = CheckAttach(b, attached_tokens, e.n_tokens);
  if (retrieval_) {
    Notice(fmt::format("added {} ({} tokens) to the collection; questions retrieve its best passages", doc.name,
                       e.n_tokens));
  } else if (fit == AttachFit::kLongerThanContext) {
    e.attached = false;
    Notice(
        fmt::format("{} has {} tokens: longer than the model's context ({} tokens, {} kept for the answer); "
                    "it is listed but not attached{}",
                    doc.name, e.n_tokens, b.n_ctx, b.max_tokens, passages_ ? " (retrieval mode can use it)" : ""));
  } else if (fit == AttachFit::kOverflows) {
    e.attached = false;
    Notice(
        fmt::format("{} ({} tokens) would overflow the context with the {} tokens already attached; "
                    "detach another document to use it",
                    doc.name, e.n_tokens, attached_tokens));
  } else {
    Notice(fmt::format("added {} ({} tokens)", doc.name, e.n_tokens));
  }
  e.doc = std::move(doc);
  docs_.push_back(std::move(e));
  SyncConversationDocuments();
  SaveDocuments();
  return docs_.size() - 1;
}

Status ChatController::RemoveDocument(size_t index) {
  if (index >= docs_.size())
    return Status::OutOfRange(fmt::format("no document {} (there are {})", index, docs_.size()));
  Notice("removed " + docs_[index].doc.name);
  if (passages_) (void)passages_->Remove(PassageKey(docs_[index].doc));
  docs_.erase(docs_.begin() + ptrdiff_t(index));
  SyncConversationDocuments();
  SaveDocuments();
  return Status::Ok();
}

Status ChatController::SetAttached(size_t index, bool attached) {
  if (index >= docs_.size())
    return Status::OutOfRange(fmt::format("no document {} (there are {})", index, docs_.size()));
  ChatDocument& d = docs_[index];
  if (attached && !retrieval_) {
    int attached_tokens = 0;
    for (const ChatDocument& o : docs_)
      if (o.attached && &o != &d) attached_tokens += o.n_tokens;
    const ContextBudget b = budget();
    if (CheckAttach(b, attached_tokens, d.n_tokens) != AttachFit::kFits) {
      const std::string why = fmt::format(
          "{} ({} tokens) would overflow the context ({} tokens, {} attached, {} kept for the "
          "answer); detach another document{}",
          d.doc.name, d.n_tokens, b.n_ctx, attached_tokens, b.max_tokens, passages_ ? " or use retrieval mode" : "");
      Notice(why);
      return Status::ResourceExhausted(why);
    }
  }
  d.attached = attached;
  SyncConversationDocuments();
  SaveDocuments();
  return Status::Ok();
}

Status ChatController::SetPrivate(size_t index, bool is_private) {
  if (index >= docs_.size())
    return Status::OutOfRange(fmt::format("no document {} (there are {})", index, docs_.size()));
  docs_[index].doc.is_private = is_private;
  SyncConversationDocuments();
  SaveDocuments();
  Notice(fmt::format("{} is {}", docs_[index].doc.name,
                     is_private ? "private: questions about it never use the team KV tier"
                                : "shared: its KV may be published to the team KV tier"));
  return Status::Ok();
}

Status ChatController::SetRetrieval(bool on) {
  if (on && !passages_) {
    Notice("retrieval mode is unavailable (no passage index)");
    return Status::Unsupported("retrieval mode needs the passage index, which is unavailable");
  }
  if (on == retrieval_) return Status::Ok();
  retrieval_ = on;
  if (db_ && conv_id_)
    (void)db_->SetMode(conv_id_, on ? persist::ConversationMode::kRetrieval : persist::ConversationMode::kDocuments);
  if (!on) {
    // Whole documents again: attach what fits, in order.
    std::vector<int> n_tokens;
    std::vector<bool> attached;
    for (const ChatDocument& d : docs_) {
      n_tokens.push_back(d.n_tokens);
      attached.push_back(d.attached);
    }
    const std::vector<bool> keep = FitInOrder(budget(), n_tokens, attached);
    for (size_t i = 0; i < docs_.size(); ++i) {
      if (docs_[i].attached && !keep[i])
        Notice(fmt::format("{} ({} tokens) does not fit the context with the others: detached", docs_[i].doc.name,
                           docs_[i].n_tokens));
      docs_[i].attached = keep[i];
    }
    SaveDocuments();
  }
  Notice(on ? "retrieval mode: each question carries the best passages (FTS5 bm25) of the documents"
            : "documents mode: attached documents are the context");
  SyncConversationDocuments();
  return Status::Ok();
}

Result<std::vector<std::string>> ChatController::PrepareQuestion(const std::string& question) {
  std::vector<std::string> names;
  if (!retrieval_) return names;
  if (!passages_) return Status::Unsupported("retrieval mode needs the passage index, which is unavailable");
  std::vector<std::string> keys, private_keys;
  for (const ChatDocument& d : docs_) {
    if (d.attached) keys.push_back(PassageKey(d.doc));
    if (d.attached && d.doc.is_private) private_keys.push_back(PassageKey(d.doc));
  }
  const Tokenizer& tok = session_.context().tokenizer();
  auto picked = passages_->SelectForBudget(question, budget().RetrievalTokens(),
                                           [&](std::string_view text) { return int(tok.EncodeLiteral(text).size()); });
  if (!picked.ok()) return picked.status().WithContext("passage retrieval");
  Conversation& conv = session_.conversation();
  conv.ClearDocuments();
  for (const persist::Passage& p : picked->passages) {
    if (std::find(keys.begin(), keys.end(), p.doc_key) == keys.end()) continue;  // a detached document
    std::string name = fmt::format("{} (passage {})", p.name, p.index + 1);
    // A private document's passages are private too: the request then never reaches the team tier.
    const bool is_private = std::find(private_keys.begin(), private_keys.end(), p.doc_key) != private_keys.end();
    conv.AddDocument({.path = p.doc_key, .name = name, .text = p.text, .is_private = is_private});
    names.push_back(std::move(name));
  }
  return names;
}

Result<ChatAnswer> ChatController::Answer(const std::string& question, const AskOptions& options,
                                          const std::string& label) {
  const size_t n_turns_before = session_.conversation().turns().size();
  auto answer = session_.Ask(question, options);
  if (retrieval_) SyncConversationDocuments();  // the passages were this question's only
  if (!answer.ok()) {
    (void)session_.pipeline().ReleaseMatch();
    return answer.status();
  }
  // Saved only when the session remembered the exchange (AskOptions::remember).
  if (session_.conversation().turns().size() == n_turns_before + 2)
    SaveExchange(question, AnswerMeta(label, answer->report));
  return answer;
}

Result<ChatAnswer> ChatController::Ask(const std::string& question, const AskOptions& options, const std::string& label,
                                       std::vector<std::string>* passages) {
  IMPRESS_ASSIGN_OR_RETURN(std::vector<std::string> names, PrepareQuestion(question));
  if (passages) *passages = std::move(names);
  return Answer(question, options, label);
}

Result<std::string> ChatController::PopLastExchange() {
  Conversation& conv = session_.conversation();
  const auto& turns = conv.turns();
  if (turns.size() < 2 || turns[turns.size() - 2].role != "user" || turns.back().role != "assistant") {
    Notice("nothing to ask again yet: ask a question first");
    return Status::OutOfRange("the conversation does not end with a question and its answer");
  }
  std::string question = turns[turns.size() - 2].content;
  conv.PopTurns(2);
  if (db_ && conv_id_)
    if (Status st = db_->PopTurns(conv_id_, 2); !st.ok())
      Notice("the saved conversation was not updated: " + st.ToString());
  return question;
}

}  // namespace impress
