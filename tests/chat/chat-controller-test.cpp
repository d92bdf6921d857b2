// ChatController without a window: the context budget when documents are added and attached,
// popping the last exchange keeps the saved copy and the in-memory conversation in step,
// reopening a saved conversation, retrieval mode's passages, and a document's cache (pin, drop)
// in a real store. Runs the default model (skips without it); answers are two greedy tokens.
#include "chat/chat-controller.h"
#include "chat/passage-index.h"
#include "tests/support/default-model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace impress {
namespace {

namespace fs = std::filesystem;

using ::impress::test_support::DefaultModel;

bool Contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const std::string& s : v)
    if (s.find(needle) != std::string::npos) return true;
  return false;
}

class ChatControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(DefaultModel())) GTEST_SKIP() << "no default model at " << DefaultModel();
    dir_ = fs::temp_directory_path() / ("impress-chat-controller-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    lighthouse_ = Write("lighthouse.md",
                        "The lighthouse on Gull Rock was built in 1871 by Edith Marrow.\n"
                        "Its keeper, Tom Hale, carried the stones up from the quay.\n");
    ferry_ = Write("ferry.txt",
                   "The ferry to Gull Rock leaves the harbour at seven every morning.\n\n"
                   "Tickets cost three pounds and are sold on the quay by Mrs Hale.\n");
  }
  void TearDown() override {
    controller_.reset();
    session_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  // A session (with a store in the test's folder when asked) and a controller recording its events.
  void Start(bool with_store = false) {
    controller_.reset();
    if (!session_) {
      ChatSessionOptions o;
      o.model_path = DefaultModel();
      o.model.n_threads = 2;
      if (with_store) o.store_dir = (dir_ / "store").string();
      auto s = ChatSession::Open(o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      session_ = std::move(*s);
    }
    ChatEvents e;
    e.notice = [this](const std::string& m) { notices_.push_back(m); };
    e.conversation_changed = [this](const persist::SavedConversation& c, ConversationChange change) {
      changes_.push_back(change);
      last_opened_ = c;
    };
    controller_ = std::make_unique<ChatController>(*session_, std::move(e));
  }
  std::string DbPath() const { return (dir_ / "conversations.db").string(); }

  int Tokens(const std::string& path) {
    auto doc = LoadDocument(path);
    EXPECT_TRUE(doc.ok());
    return int(session_->context().tokenizer().Encode(doc->text, false, false).size());
  }

  Result<ChatAnswer> Ask(const std::string& q) {
    AskOptions o;
    o.max_tokens = 2;
    return controller_->Ask(q, o, "test");
  }

  // The saved turns of the open conversation.
  std::vector<persist::SavedTurn> SavedTurns() {
    auto db = persist::ChatDb::Open(DbPath());
    EXPECT_TRUE(db.ok());
    auto c = (*db)->Load(controller_->conversation_id());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->turns : std::vector<persist::SavedTurn>{};
  }

  void ExpectSavedMatchesMemory() {
    const std::vector<persist::SavedTurn> saved = SavedTurns();
    const auto& turns = session_->conversation().turns();
    ASSERT_EQ(saved.size(), turns.size());
    for (size_t i = 0; i < turns.size(); ++i) {
      EXPECT_EQ(saved[i].role, turns[i].role) << i;
      EXPECT_EQ(saved[i].content, turns[i].content) << i;
    }
  }

  fs::path dir_;
  std::string lighthouse_, ferry_;
  std::unique_ptr<ChatSession> session_;
  std::unique_ptr<ChatController> controller_;
  std::vector<std::string> notices_;
  std::vector<ConversationChange> changes_;
  persist::SavedConversation last_opened_;
};

TEST_F(ChatControllerTest, DocumentsAreAttachedOnlyWhileTheyFitTheContext) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  const int n1 = Tokens(lighthouse_), n2 = Tokens(ferry_);
  const int n_ctx = session_->context().config().n_ctx_train;
  // Room for both documents but one token.
  controller_->set_max_tokens(n_ctx - ContextBudget::kQuestionReserve - (n1 + n2 - 1));
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  ASSERT_EQ(controller_->documents().size(), 2u);
  EXPECT_TRUE(controller_->documents()[0].attached);
  EXPECT_FALSE(controller_->documents()[1].attached);
  EXPECT_TRUE(Contains(notices_, "would overflow the context")) << notices_.back();
  EXPECT_EQ(controller_->context_tokens(), n1);
  EXPECT_EQ(session_->conversation().documents().size(), 1u);
  // Attaching it is refused; detaching the first makes room.
  EXPECT_EQ(controller_->SetAttached(1, true).code(), Status::Code::kResourceExhausted);
  EXPECT_FALSE(controller_->documents()[1].attached);
  ASSERT_TRUE(controller_->SetAttached(0, false).ok());
  ASSERT_TRUE(controller_->SetAttached(1, true).ok());
  EXPECT_EQ(controller_->context_tokens(), n2);
  ASSERT_EQ(session_->conversation().documents().size(), 1u);
  EXPECT_EQ(session_->conversation().documents()[0].name, "ferry.txt");
  // The same file twice is refused; a document longer than the room is listed, not attached.
  EXPECT_FALSE(controller_->AddDocument(ferry_).ok());
  EXPECT_TRUE(Contains(notices_, "is already in this conversation"));
  controller_->set_max_tokens(n_ctx - ContextBudget::kQuestionReserve - (n1 - 1));
  const std::string copy = Write("copy.md", LoadDocument(lighthouse_)->text);
  auto added = controller_->AddDocument(copy);
  ASSERT_TRUE(added.ok());
  EXPECT_FALSE(controller_->documents()[*added].attached);
  EXPECT_TRUE(Contains(notices_, "longer than the model's context"));
  EXPECT_TRUE(Contains(notices_, "(retrieval mode can use it)"));  // the database brought a passage index
  // The saved copy has the same documents and flags.
  auto db = persist::ChatDb::Open(DbPath());
  ASSERT_TRUE(db.ok());
  auto saved = (*db)->Load(controller_->conversation_id());
  ASSERT_TRUE(saved.ok());
  ASSERT_EQ(saved->documents.size(), 3u);
  EXPECT_FALSE(saved->documents[0].attached);
  EXPECT_TRUE(saved->documents[1].attached);
  EXPECT_FALSE(saved->documents[2].attached);
  EXPECT_EQ(saved->documents[1].n_tokens, n2);
}

TEST_F(ChatControllerTest, PoppingTheLastExchangeKeepsTheSavedCopyInStep) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(Ask("Who built the lighthouse?").ok());
  ASSERT_TRUE(Ask("Who carried the stones?").ok());
  EXPECT_EQ(controller_->title(), "Who built the lighthouse?");
  ASSERT_EQ(session_->conversation().turns().size(), 4u);
  ExpectSavedMatchesMemory();

  auto q = controller_->PopLastExchange();
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, "Who carried the stones?");
  ASSERT_EQ(session_->conversation().turns().size(), 2u);
  ExpectSavedMatchesMemory();
  // Asking again appends the exchange once, in both.
  ASSERT_TRUE(Ask(*q).ok());
  ASSERT_EQ(session_->conversation().turns().size(), 4u);
  ExpectSavedMatchesMemory();

  ASSERT_TRUE(controller_->PopLastExchange().ok());
  ASSERT_TRUE(controller_->PopLastExchange().ok());
  EXPECT_TRUE(session_->conversation().turns().empty());
  ExpectSavedMatchesMemory();
  // Nothing left: refused, nothing changes, the user is told.
  notices_.clear();
  EXPECT_EQ(controller_->PopLastExchange().status().code(), Status::Code::kOutOfRange);
  EXPECT_TRUE(Contains(notices_, "nothing to ask again"));
  ExpectSavedMatchesMemory();
}

TEST_F(ChatControllerTest, PoppingNeedsAQuestionAndItsAnswerLast) {
  Start();  // no database: the conversation alone
  session_->conversation().AddTurn("user", "a question without an answer");
  EXPECT_FALSE(controller_->PopLastExchange().ok());
  EXPECT_EQ(session_->conversation().turns().size(), 1u);
  session_->conversation().AddTurn("assistant", "an answer");
  auto q = controller_->PopLastExchange();
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, "a question without an answer");
  EXPECT_TRUE(session_->conversation().turns().empty());
}

TEST_F(ChatControllerTest, ReopeningRestoresDocumentsTurnsAndTitle) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_EQ(changes_.size(), 1u);
  EXPECT_EQ(changes_[0], ConversationChange::kNew);  // an empty database starts a new one
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  ASSERT_TRUE(controller_->SetAttached(1, false).ok());
  ASSERT_TRUE(Ask("Who built the lighthouse?").ok());
  const std::vector<ChatMessage> turns = session_->conversation().turns();
  const int64_t id = controller_->conversation_id();

  Start();  // a new controller over the same session, as after a restart
  session_->conversation().ClearTurns();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_FALSE(changes_.empty());
  EXPECT_EQ(changes_.back(), ConversationChange::kOpened);
  EXPECT_EQ(controller_->conversation_id(), id);
  EXPECT_EQ(controller_->title(), "Who built the lighthouse?");
  ASSERT_EQ(last_opened_.turns.size(), 2u);
  ASSERT_EQ(session_->conversation().turns().size(), turns.size());
  for (size_t i = 0; i < turns.size(); ++i) EXPECT_EQ(session_->conversation().turns()[i].content, turns[i].content);
  ASSERT_EQ(controller_->documents().size(), 2u);
  EXPECT_TRUE(controller_->documents()[0].attached);
  EXPECT_FALSE(controller_->documents()[1].attached);
  ASSERT_EQ(session_->conversation().documents().size(), 1u);
  EXPECT_EQ(controller_->context_tokens(), Tokens(lighthouse_));

  // A new conversation keeps the documents; deleting it reopens the most recent other.
  controller_->NewConversation(/*keep_documents=*/true);
  EXPECT_EQ(changes_.back(), ConversationChange::kNewKeepingDocuments);
  EXPECT_NE(controller_->conversation_id(), id);
  EXPECT_EQ(controller_->documents().size(), 2u);
  EXPECT_TRUE(session_->conversation().turns().empty());
  ASSERT_TRUE(controller_->DeleteConversation(controller_->conversation_id()).ok());
  EXPECT_EQ(controller_->conversation_id(), id);
  EXPECT_EQ(session_->conversation().turns().size(), 2u);
}

TEST_F(ChatControllerTest, RetrievalCarriesPassagesOfAttachedDocumentsOnly) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_TRUE(controller_->has_passage_index());
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  ASSERT_TRUE(controller_->SetRetrieval(true).ok());
  EXPECT_EQ(controller_->context_tokens(), 0);
  EXPECT_TRUE(session_->conversation().documents().empty());

  auto names = controller_->PrepareQuestion("When does the ferry leave the harbour?");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_TRUE(Contains(*names, "ferry.txt (passage")) << (names->empty() ? "" : names->front());
  EXPECT_EQ(session_->conversation().documents().size(), names->size());
  AskOptions o;
  o.max_tokens = 2;
  ASSERT_TRUE(controller_->Answer("When does the ferry leave the harbour?", o, "test").ok());
  EXPECT_TRUE(session_->conversation().documents().empty()) << "the passages were that question's only";

  ASSERT_TRUE(controller_->SetAttached(1, false).ok());  // detached: not searched
  names = controller_->PrepareQuestion("When does the ferry leave the harbour?");
  ASSERT_TRUE(names.ok());
  EXPECT_FALSE(Contains(*names, "ferry.txt"));

  // Documents mode again: the attached one is the context.
  ASSERT_TRUE(controller_->SetRetrieval(false).ok());
  EXPECT_EQ(session_->conversation().documents().size(), 1u);
  EXPECT_EQ(controller_->context_tokens(), Tokens(lighthouse_));
}

// A document marked private: the request's conversation carries the flag (so the session keeps
// it from the team KV tier), in retrieval mode on its passages too, and it is saved with the
// conversation.
TEST_F(ChatControllerTest, PrivateDocumentsStayPrivateInBothModesAndAcrossRestarts) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  EXPECT_EQ(controller_->SetPrivate(2, true).code(), Status::Code::kOutOfRange);
  ASSERT_TRUE(controller_->SetPrivate(1, true).ok());
  ASSERT_EQ(session_->conversation().documents().size(), 2u);
  EXPECT_FALSE(session_->conversation().documents()[0].is_private);
  EXPECT_TRUE(session_->conversation().documents()[1].is_private);

  ASSERT_TRUE(controller_->SetRetrieval(true).ok());
  auto names = controller_->PrepareQuestion("When does the ferry leave the harbour? Who built the lighthouse?");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  size_t n_private = 0, n_ferry = 0;
  for (const Document& d : session_->conversation().documents()) {
    const bool ferry = d.name.starts_with("ferry.txt");
    n_ferry += ferry;
    n_private += d.is_private;
    EXPECT_EQ(d.is_private, ferry) << d.name;
  }
  EXPECT_GT(n_ferry, 0u);
  EXPECT_EQ(n_private, n_ferry);
  ASSERT_TRUE(controller_->SetRetrieval(false).ok());

  Start();  // after a restart
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_EQ(controller_->documents().size(), 2u);
  EXPECT_FALSE(controller_->documents()[0].doc.is_private);
  EXPECT_TRUE(controller_->documents()[1].doc.is_private);
  ASSERT_TRUE(controller_->SetPrivate(1, false).ok());
  ASSERT_EQ(session_->conversation().documents().size(), 2u);
  EXPECT_FALSE(session_->conversation().documents()[1].is_private);
}

// The passage index file overwritten with random bytes: the next start keeps it aside, says
// so, and indexes again the documents of every saved conversation (not only the one it opens).
TEST_F(ChatControllerTest, DamagedPassageIndexIsRebuiltFromSavedConversations) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  ASSERT_TRUE(Ask("When does the ferry leave?").ok());
  controller_->NewConversation(/*keep_documents=*/false);
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(Ask("Who built the lighthouse?").ok());
  controller_.reset();
  const std::string index = DbPath() + ".passages";
  fs::remove(index + "-wal");
  fs::remove(index + "-shm");
  std::string garbage(32 * 1024, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 2654435761u) >> 13);
  std::ofstream(index, std::ios::binary | std::ios::trunc) << garbage;

  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  EXPECT_TRUE(controller_->has_passage_index());
  EXPECT_TRUE(Contains(notices_, index + " was damaged")) << (notices_.empty() ? "" : notices_.back());
  controller_.reset();
  auto idx = persist::PassageIndex::Open(index);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  auto docs = (*idx)->Documents();
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  std::vector<std::string> names;
  for (const auto& d : *docs) names.push_back(d.name);
  EXPECT_TRUE(Contains(names, "ferry.txt")) << "the older conversation's document was not indexed again";
  EXPECT_TRUE(Contains(names, "lighthouse.md"));
  EXPECT_FALSE((*idx)->Search("ferry harbour", 3)->empty());
}

TEST_F(ChatControllerTest, LeavingRetrievalDetachesWhatNoLongerFits) {
  Start();
  ASSERT_TRUE(controller_->OpenDatabase(DbPath()).ok());
  ASSERT_TRUE(controller_->SetRetrieval(true).ok());
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  EXPECT_TRUE(controller_->documents()[1].attached);  // retrieval mode: everything is searched
  const int n1 = Tokens(lighthouse_);
  controller_->set_max_tokens(session_->context().config().n_ctx_train - ContextBudget::kQuestionReserve - n1);
  ASSERT_TRUE(controller_->SetRetrieval(false).ok());
  EXPECT_TRUE(controller_->documents()[0].attached);
  EXPECT_FALSE(controller_->documents()[1].attached);
  EXPECT_TRUE(Contains(notices_, "does not fit the context with the others: detached"));
  EXPECT_EQ(controller_->context_tokens(), n1);
}

TEST_F(ChatControllerTest, DocumentCacheIsPinnedAndDroppedByDocument) {
  Start(/*with_store=*/true);
  ASSERT_TRUE(controller_->AddDocument(lighthouse_).ok());
  ASSERT_TRUE(controller_->AddDocument(ferry_).ok());
  std::vector<DocumentCacheState> caches = controller_->DocumentCaches();
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_EQ(caches[0].tokens_cached, 0u);
  EXPECT_GE(caches[1].span_begin, caches[0].span_end - 1) << "the second document follows the first";
  ASSERT_TRUE(Ask("Who built the lighthouse?").ok());
  ASSERT_TRUE(controller_->QuiesceStore().ok());
  caches = controller_->DocumentCaches();
  for (const DocumentCacheState& c : caches)
    EXPECT_EQ(c.tokens_cached, uint64_t(c.span_end - c.span_begin)) << c.residency;

  ASSERT_TRUE(controller_->PinDocument(0, true).ok());
  EXPECT_TRUE(controller_->DocumentCaches()[0].pinned);
  // The pin covers the node the first document ends inside, which holds the second's start:
  // dropping the second is refused until the first is unpinned, and nothing goes.
  EXPECT_FALSE(controller_->DropDocumentCache(1).ok());
  EXPECT_TRUE(Contains(notices_, "cannot drop the cache of ferry.txt"));
  EXPECT_EQ(controller_->DocumentCaches()[1].tokens_cached, uint64_t(caches[1].span_end - caches[1].span_begin));
  ASSERT_TRUE(controller_->PinDocument(0, false).ok());
  EXPECT_FALSE(controller_->DocumentCaches()[0].pinned);
  auto dropped = controller_->DropDocumentCache(1);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_GE(*dropped, uint64_t(caches[1].span_end - caches[1].span_begin));
  caches = controller_->DocumentCaches();
  EXPECT_EQ(caches[1].tokens_cached, 0u);
  EXPECT_EQ(caches[0].tokens_cached, uint64_t(caches[0].span_end - caches[0].span_begin)) << "the first stays";

  // A detached document has no place in the prompt: refused, and the user is told.
  ASSERT_TRUE(controller_->SetAttached(1, false).ok());
  EXPECT_EQ(controller_->PinDocument(1, true).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(notices_, "only an attached document's cache can be pinned or dropped"));
}

}  // namespace
}  // namespace impress
