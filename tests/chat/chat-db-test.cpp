// ChatDb: saved conversations round-trip, keep their order, share document texts, survive
// reopening, refuse foreign or newer files without touching them, and keep the previous state
// when a write fails or the writing process is killed.
#include "chat/chat-db.h"

#include "chat/passage-index.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace impress::persist {
namespace {

namespace fs = std::filesystem;

class ChatDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("impress-chat-db-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "chats.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ChatDb> OpenOrDie(ChatDbOptions o = {}) {
    auto r = ChatDb::Open(path_, std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  fs::path dir_;
  std::string path_;
};

// Counts rows with a separate raw SQLite connection (independent of ChatDb's own queries).
int64_t RawCount(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

std::string RawText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::string out = "(error)";
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string m = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << m;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

SavedDocument Doc(std::string name, std::string text, int64_t n_tokens = -1, bool attached = true) {
  SavedDocument d;
  d.name = name;
  d.path = "/home/user/" + name;
  d.text = std::move(text);
  d.n_tokens = n_tokens;
  d.attached = attached;
  return d;
}

TEST_F(ChatDbTest, RoundTripsEverythingAcrossReopen) {
  // Texts with UTF-8, CRLF-free newlines, an embedded NUL and a large body: stored exactly.
  const std::string big(300000, 'x');
  const std::string nul_text = std::string("before\0after", 12);
  const std::vector<SavedDocument> docs = {Doc("notes.md", "# Notes\n\nçà et là — 中文 🙂\n", 17),
                                           Doc("big.txt", big, 300000, false), Doc("nul.txt", nul_text)};
  const std::vector<std::tuple<std::string, std::string, std::string>> turns = {
      {"system", "You are helpful.", ""},
      {"user", "What is in notes.md?", R"({"label":"q1"})"},
      {"assistant", "Notes: çà et là.", R"({"ttft_ms":123.5,"reused":"device"})"},
  };
  const std::string settings = R"({"alpha":0.7,"keep_ratio":0.25,"system":"impress"})";
  int64_t id = 0;
  {
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    auto r = db->CreateConversation("Long doc chat", ConversationMode::kRetrieval);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    id = *r;
    ASSERT_TRUE(db->SetDocuments(id, docs).ok());
    for (size_t i = 0; i < turns.size(); ++i) {
      auto [role, content, meta] = turns[i];
      auto pos = db->AppendTurn(id, role, content, meta);
      ASSERT_TRUE(pos.ok()) << pos.status().ToString();
      EXPECT_EQ(*pos, int(i));
    }
    ASSERT_TRUE(db->SetSettings(id, settings).ok());
  }
  for (int pass = 0; pass < 2; ++pass) {  // once after reopening, once more after a rename
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    if (pass == 1) {
      ASSERT_TRUE(db->RenameConversation(id, "Renamed ✓").ok());
    }
    auto r = db->Load(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const SavedConversation& c = *r;
    EXPECT_EQ(c.summary.id, id);
    EXPECT_EQ(c.summary.title, pass == 0 ? "Long doc chat" : "Renamed ✓");
    EXPECT_EQ(c.summary.mode, ConversationMode::kRetrieval);
    EXPECT_EQ(c.settings, settings);
    ASSERT_EQ(c.documents.size(), docs.size());
    for (size_t i = 0; i < docs.size(); ++i) {
      EXPECT_EQ(c.documents[i].name, docs[i].name);
      EXPECT_EQ(c.documents[i].path, docs[i].path);
      EXPECT_EQ(c.documents[i].text, docs[i].text) << docs[i].name;
      EXPECT_EQ(c.documents[i].n_bytes, docs[i].text.size());
      EXPECT_EQ(c.documents[i].n_tokens, docs[i].n_tokens);
      EXPECT_EQ(c.documents[i].attached, docs[i].attached);
      EXPECT_FALSE(c.documents[i].text_key.empty());
    }
    ASSERT_EQ(c.turns.size(), turns.size());
    for (size_t i = 0; i < turns.size(); ++i) {
      EXPECT_EQ(c.turns[i].role, std::get<0>(turns[i]));
      EXPECT_EQ(c.turns[i].content, std::get<1>(turns[i]));
      EXPECT_EQ(c.turns[i].meta, std::get<2>(turns[i]));
    }
    // The prompt-side conversation takes the attached documents only, and every turn.
    Conversation conv = ToConversation(c);
    ASSERT_EQ(conv.documents().size(), 2u);
    EXPECT_EQ(conv.documents()[0].text, docs[0].text);
    EXPECT_EQ(conv.documents()[1].name, "nul.txt");
    ASSERT_EQ(conv.turns().size(), turns.size());
    EXPECT_EQ(conv.turns()[2].content, std::get<1>(turns[2]));
  }
  // Unknown ids are NotFound, for reads and writes alike.
  auto db = OpenOrDie();
  EXPECT_EQ(db->Load(id + 100).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(db->AppendTurn(id + 100, "user", "hi").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(db->SetSettings(id + 100, "{}").code(), Status::Code::kNotFound);
  EXPECT_EQ(db->AppendTurn(id, "robot", "hi").status().code(), Status::Code::kInvalidArgument);
}

TEST_F(ChatDbTest, ListsMostRecentlyUpdatedFirstWithCounts) {
  int64_t clock = 1000;
  ChatDbOptions o;
  o.now = [&clock] { return clock; };
  auto db = OpenOrDie(o);
  ASSERT_TRUE(db);
  auto a = db->CreateConversation("a");
  clock = 2000;
  auto b = db->CreateConversation("b");
  clock = 3000;
  auto c = db->CreateConversation("c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  clock = 4000;
  ASSERT_TRUE(db->AppendTurn(*a, "user", "hello").ok());
  ASSERT_TRUE(db->AppendTurn(*a, "assistant", "hi").ok());
  ASSERT_TRUE(db->SetDocuments(*a, {Doc("x", "xx")}).ok());
  clock = 3000;  // same time as c: ties go to the newer id
  ASSERT_TRUE(db->RenameConversation(*b, "b2").ok());
  auto list = db->ListConversations();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].id, *a);
  EXPECT_EQ((*list)[1].id, *c);
  EXPECT_EQ((*list)[2].id, *b);
  EXPECT_EQ((*list)[0].n_turns, 2);
  EXPECT_EQ((*list)[0].n_documents, 1);
  EXPECT_EQ((*list)[0].created, 1000);
  EXPECT_EQ((*list)[0].updated, 4000);
  EXPECT_EQ((*list)[2].title, "b2");
  EXPECT_EQ((*list)[2].n_turns, 0);
  EXPECT_EQ((*list)[1].mode, ConversationMode::kDocuments);
}

TEST_F(ChatDbTest, PopTurnsRemovesFromTheEndOnly) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  auto id = db->CreateConversation("t");
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(db->AppendTurn(*id, i % 2 ? "assistant" : "user", "turn " + std::to_string(i)).ok());
  ASSERT_TRUE(db->PopTurns(*id, 2).ok());
  auto check = [&](int n) {
    auto c = db->Load(*id);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(int(c->turns.size()), n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(c->turns[i].content, "turn " + std::to_string(i));
  };
  check(3);
  Status st = db->PopTurns(*id, 4);
  EXPECT_EQ(st.code(), Status::Code::kOutOfRange) << st.ToString();
  check(3);  // nothing removed
  EXPECT_TRUE(db->PopTurns(*id, 0).ok());
  check(3);
  // Regenerate: pop the answer, append a new one at the same position.
  ASSERT_TRUE(db->PopTurns(*id, 1).ok());
  auto pos = db->AppendTurn(*id, "user", "turn 2");
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(*pos, 2);
  check(3);
  ASSERT_TRUE(db->PopTurns(*id, 3).ok());
  check(0);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM turns"), 0);
}

TEST_F(ChatDbTest, StoresEachDistinctTextOnceAndDropsOrphans) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  auto a = db->CreateConversation("a");
  auto b = db->CreateConversation("b");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string shared(50000, 's'), only_a = "only in a", only_b = "only in b";
  ASSERT_TRUE(db->SetDocuments(*a, {Doc("shared.txt", shared), Doc("a.txt", only_a)}).ok());
  ASSERT_TRUE(db->SetDocuments(*b, {Doc("same-file-other-name.txt", shared), Doc("b.txt", only_b)}).ok());
  // The same text attached twice within one conversation is stored once too.
  ASSERT_TRUE(db->SetDocuments(*b, {Doc("s1", shared), Doc("s2", shared), Doc("b.txt", only_b)}).ok());
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM texts"), 3);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM documents"), 5);
  EXPECT_EQ(*db->CountStoredTexts(), 3);
  // Dropping a.txt from a removes its text; the shared one stays.
  ASSERT_TRUE(db->SetDocuments(*a, {Doc("shared.txt", shared)}).ok());
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM texts"), 2);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM texts WHERE text = 'only in a'"), 0);
  auto la = db->Load(*a);
  auto lb = db->Load(*b);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(la->documents[0].text_key, lb->documents[0].text_key);
  EXPECT_EQ(lb->documents[1].text, shared);
  EXPECT_EQ(lb->documents[2].text, only_b);
}

TEST_F(ChatDbTest, DeleteRemovesTurnsDocumentsAndOrphanedTexts) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  auto a = db->CreateConversation("a");
  auto b = db->CreateConversation("b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(db->SetDocuments(*a, {Doc("shared", "shared text"), Doc("mine", "a's own text")}).ok());
  ASSERT_TRUE(db->SetDocuments(*b, {Doc("shared", "shared text")}).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(db->AppendTurn(*a, "user", "q" + std::to_string(i)).ok());
  ASSERT_TRUE(db->AppendTurn(*b, "user", "qb").ok());
  ASSERT_TRUE(db->DeleteConversation(*a).ok());
  EXPECT_EQ(db->Load(*a).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(db->DeleteConversation(*a).code(), Status::Code::kNotFound);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM conversations"), 1);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM turns"), 1);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM documents"), 1);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM texts"), 1);  // "shared text" is still used by b
  ASSERT_TRUE(db->DeleteConversation(*b).ok());
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM texts"), 0);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM turns"), 0);
  auto list = db->ListConversations();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(ChatDbTest, RejectsANewerSchemaVersionAndLeavesTheFile) {
  {
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->CreateConversation("keep me").ok());
  }
  RawExec(path_,
          "UPDATE meta SET value = '" + std::to_string(ChatDb::kSchemaVersion + 1) + "' WHERE key = 'schema_version'");
  const std::string before = ReadBytes(path_);
  auto r = ChatDb::Open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("newer"), std::string::npos) << r.status().message();
  EXPECT_EQ(ReadBytes(path_), before);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM conversations WHERE title = 'keep me'"), 1);
}

// Schema 2 added documents.private: a version-1 file (as an older build wrote it) is migrated on
// open, its documents kept and shared as before; the flag then round-trips.
TEST_F(ChatDbTest, MigratesVersionOneFilesAndKeepsThePrivateFlag) {
  int64_t id = 0;
  {
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    auto c = db->CreateConversation("contracts");
    ASSERT_TRUE(c.ok());
    id = *c;
    ASSERT_TRUE(db->SetDocuments(id, {Doc("a.txt", "alpha text", 3), Doc("b.txt", "beta text", 3)}).ok());
  }
  // What a version-1 build left: no private column, version 1.
  RawExec(path_, "ALTER TABLE documents DROP COLUMN private; UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  ASSERT_EQ(RawCount(path_, "SELECT count(*) FROM pragma_table_info('documents') WHERE name = 'private'"), 0);
  {
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    EXPECT_EQ(RawText(path_, "SELECT value FROM meta WHERE key = 'schema_version'"),
              std::to_string(ChatDb::kSchemaVersion));
    auto c = db->Load(id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->documents.size(), 2u);
    EXPECT_EQ(c->documents[0].text, "alpha text");
    EXPECT_FALSE(c->documents[0].is_private);
    EXPECT_FALSE(c->documents[1].is_private);
    std::vector<SavedDocument> docs = c->documents;
    docs[1].is_private = true;
    ASSERT_TRUE(db->SetDocuments(id, docs).ok());
  }
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  auto c = db->Load(id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->documents.size(), 2u);
  EXPECT_FALSE(c->documents[0].is_private);
  EXPECT_TRUE(c->documents[1].is_private);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM documents WHERE private = 1 AND name = 'b.txt'"), 1);
  // The conversation built from it carries the flag to the request.
  const Conversation conv = ToConversation(*c);
  ASSERT_EQ(conv.documents().size(), 2u);
  EXPECT_TRUE(conv.documents()[1].is_private);
}

// The saved conversations hold the user's documents and answers: owner-only file, folder, WAL
// and SHM, whatever the umask allows (a stricter one still applies).
TEST_F(ChatDbTest, DatabaseFolderAndWalArePrivate) {
  auto mode = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  };
  for (mode_t mask : {mode_t(022), mode_t(077), mode_t(027)}) {
    SCOPED_TRACE(mask);
    const mode_t old = ::umask(mask);
    const fs::path sub = dir_ / ("data-" + std::to_string(mask)) / "impress";
    {
      auto db = ChatDb::Open((sub / "conversations.db").string());
      ::umask(old);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      ASSERT_TRUE((*db)->CreateConversation("private").ok());
      EXPECT_EQ(mode(sub / "conversations.db"), 0600u);
      EXPECT_EQ(mode(sub), 0700u);
      EXPECT_EQ(mode(sub.parent_path()), 0700u) << "every folder it created";
      ASSERT_TRUE(fs::exists(sub / "conversations.db-wal"));
      EXPECT_EQ(mode(sub / "conversations.db-wal"), 0600u);
      if (fs::exists(sub / "conversations.db-shm")) {
        EXPECT_EQ(mode(sub / "conversations.db-shm"), 0600u);
      }
    }
  }
  // A database made world-readable by an older build is made private when opened.
  const fs::path old_db = dir_ / "old.db";
  ASSERT_TRUE(ChatDb::Open(old_db.string()).ok());
  fs::permissions(old_db, fs::perms(0644));
  ASSERT_TRUE(ChatDb::Open(old_db.string()).ok());
  EXPECT_EQ(mode(old_db), 0600u);
}

TEST_F(ChatDbTest, RefusesFilesThatAreNotAChatDatabaseWithoutChangingThem) {
  // A text file that happens to carry the name.
  std::string garbage;
  for (int i = 0; i < 200; ++i) garbage += "my precious notes, line " + std::to_string(i) + "\n";
  { std::ofstream(path_, std::ios::binary) << garbage; }
  auto r = ChatDb::Open(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("not an SQLite database"), std::string::npos) << r.status().message();
  EXPECT_EQ(ReadBytes(path_), garbage);
  EXPECT_FALSE(fs::exists(path_ + "-wal"));

  // Another application's SQLite database.
  const std::string other = (dir_ / "other.db").string();
  RawExec(other, "CREATE TABLE notes(body TEXT); INSERT INTO notes VALUES('keep');");
  const std::string other_before = ReadBytes(other);
  auto r2 = ChatDb::Open(other);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), Status::Code::kInvalidArgument) << r2.status().ToString();
  EXPECT_NE(r2.status().message().find("not an IMPRESS chat database"), std::string::npos);
  EXPECT_NE(r2.status().message().find(other), std::string::npos);
  EXPECT_EQ(ReadBytes(other), other_before);

  // IMPRESS's own passage index is not a chat database either.
  const std::string index_path = (dir_ / "passages.db").string();
  {
    auto idx = PassageIndex::Open(index_path);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  }
  auto r4 = ChatDb::Open(index_path);
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("not an IMPRESS chat database"), std::string::npos) << r4.status().message();

  // A damaged chat database: its header survives but the pages behind it are overwritten.
  const std::string damaged = (dir_ / "damaged.db").string();
  {
    auto db = ChatDb::Open(damaged);
    ASSERT_TRUE(db.ok());
    auto id = (*db)->CreateConversation("c");
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*db)->AppendTurn(*id, "user", std::string(20000, 'q')).ok());
  }
  std::string bytes = ReadBytes(damaged);
  ASSERT_GT(bytes.size(), 8192u);
  for (size_t i = 4096; i < bytes.size(); ++i) bytes[i] = char(0xA5 ^ (i * 131));
  { std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes; }
  auto r3 = ChatDb::Open(damaged);
  if (r3.ok()) {
    // SQLite reads pages lazily: the damage shows on the first read of them, as a Status.
    auto list = (*r3)->ListConversations();
    ASSERT_FALSE(list.ok());
    EXPECT_EQ(list.status().code(), Status::Code::kCorruption) << list.status().ToString();
    EXPECT_NE(list.status().message().find(damaged), std::string::npos);
  } else {
    EXPECT_EQ(r3.status().code(), Status::Code::kCorruption) << r3.status().ToString();
    EXPECT_NE(r3.status().message().find(damaged), std::string::npos);
  }
}

TEST_F(ChatDbTest, AFailedWriteLeavesThePreviousStateReadable) {
  ChatDbOptions o;
  o.max_file_bytes = 256 << 10;  // writes that would grow the file past this fail like a full disk
  auto db = OpenOrDie(o);
  ASSERT_TRUE(db);
  auto id = db->CreateConversation("small");
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(db->AppendTurn(*id, "user", "first question").ok());
  ASSERT_TRUE(db->SetDocuments(*id, {Doc("small.txt", "small document")}).ok());
  auto before = db->Load(*id);
  ASSERT_TRUE(before.ok());

  // Too big for the limit: the document list, the text and the updated time all stay as they were.
  Status st = db->SetDocuments(*id, {Doc("small.txt", "small document"), Doc("huge.txt", std::string(1 << 20, 'h'))});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("disk full"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path_), std::string::npos) << st.message();
  auto r = db->AppendTurn(*id, "assistant", std::string(1 << 20, 'a'));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIOError);

  auto after = db->Load(*id);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->documents.size(), 1u);
  EXPECT_EQ(after->documents[0].text, "small document");
  ASSERT_EQ(after->turns.size(), 1u);
  EXPECT_EQ(after->turns[0].content, "first question");
  EXPECT_EQ(after->summary.updated, before->summary.updated);
  EXPECT_EQ(*db->CountStoredTexts(), 1);
  // The connection stays usable for writes that fit.
  ASSERT_TRUE(db->AppendTurn(*id, "assistant", "short answer").ok());
  db.reset();
  auto again = OpenOrDie();
  ASSERT_TRUE(again);
  auto c = again->Load(*id);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->turns.size(), 2u);
  EXPECT_EQ(c->turns[1].content, "short answer");
  EXPECT_EQ(RawText(path_, "PRAGMA integrity_check"), "ok");
}

// The writer of CrashMidWriteLeavesAConsistentState: three transactions per step k, forever.
// After each step it writes one byte to `progress_fd`, so the parent can wait for progress
// however slow a loaded machine is.
[[noreturn]] void CrashWriter(const std::string& path, int64_t id, int progress_fd) {
  auto r = ChatDb::Open(path);
  if (!r.ok()) _exit(2);
  ChatDb& db = **r;
  auto c = db.Load(id);
  if (!c.ok()) _exit(3);
  for (int64_t k = int64_t(c->turns.size());; ++k) {
    if (!db.AppendTurn(id, "user", "turn " + std::to_string(k)).ok()) _exit(4);
    if (!db.SetSettings(id, "{\"k\":" + std::to_string(k) + "}").ok()) _exit(5);
    std::vector<SavedDocument> docs = {Doc("d" + std::to_string(k % 4), std::string(20000 + k % 4, char('a' + k % 4))),
                                       Doc("shared", std::string(30000, 'z'))};
    if (!db.SetDocuments(id, docs).ok()) _exit(6);
    const char byte = 1;
    if (write(progress_fd, &byte, 1) != 1) _exit(7);
  }
}

TEST_F(ChatDbTest, CrashMidWriteLeavesAConsistentState) {
  int64_t id = 0;
  {
    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    auto r = db->CreateConversation("crash");
    ASSERT_TRUE(r.ok());
    id = *r;
  }
  std::mt19937 rng(7);
  int64_t last_n = 0;
  for (int round = 0; round < 10; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      CrashWriter(path_, id, fds[1]);
    }
    close(fds[1]);
    // Wait for 1-3 completed steps, then kill at a random moment of the following ones.
    const int n_wait = 1 + int(rng() % 3);
    char buf[4];
    for (int got = 0; got < n_wait;) {
      ssize_t r = read(fds[0], buf, size_t(n_wait - got));
      if (r <= 0) break;  // the writer died: waitpid below reports how
      got += int(r);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 15000));
    kill(pid, SIGKILL);
    close(fds[0]);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer exited early with " << WEXITSTATUS(wstatus);

    auto db = OpenOrDie();
    ASSERT_TRUE(db);
    auto c = db->Load(id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const int64_t n = int64_t(c->turns.size());
    EXPECT_GT(n, last_n);  // the writer finished at least one more step this round
    last_n = n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c->turns[i].content, "turn " + std::to_string(i));
    if (n == 0) continue;
    // Step n-1 appended its turn; its settings and documents may or may not have followed.
    const int64_t k = c->settings.empty() ? -1 : std::stoll(c->settings.substr(5));
    EXPECT_TRUE(k == n - 1 || k == n - 2) << "settings " << c->settings << " with " << n << " turns";
    std::printf("round %d: killed after %lld steps (settings k=%lld)\n", round, (long long)n, (long long)k);
    if (!c->documents.empty()) {
      ASSERT_EQ(c->documents.size(), 2u);
      const int64_t kd = std::stoll(c->documents[0].name.substr(1));
      EXPECT_EQ(c->documents[0].text, std::string(20000 + kd, char('a' + kd)));
      EXPECT_EQ(c->documents[1].text, std::string(30000, 'z'));
    }
    EXPECT_EQ(*db->CountStoredTexts(), int64_t(c->documents.size()));
    db.reset();
    ASSERT_EQ(RawText(path_, "PRAGMA integrity_check"), "ok");
  }
  EXPECT_GT(last_n, 0) << "the writer never committed anything";
}

}  // namespace
}  // namespace impress::persist
