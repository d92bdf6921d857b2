// ChatSession on the default model with a store: a one-shot answer (AskOptions::feed_last off,
// what `impress generate` asks for) gives the same tokens as a chat turn and stores exactly one
// token fewer (the last answer token's KV, which no later turn will read). Skips without the model.
#include "chat/chat-session.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "chat/document.h"
#include "tests/support/default-model.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

using ::impress::test_support::DefaultModel;

struct OneAnswer {
  std::vector<int32_t> tokens;
  std::string stop_reason;
  uint64_t stored = 0;        // tokens the pipeline wrote to the store
  uint64_t store_tokens = 0;  // tokens the store holds afterwards
};

OneAnswer Answer(const fs::path& store_dir, bool feed_last) {
  OneAnswer out;
  ChatSessionOptions o;
  o.model_path = DefaultModel();
  o.model.n_threads = 2;
  o.store_dir = store_dir.string();
  auto s = ChatSession::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return out;
  ChatSession& session = **s;
  Document note;
  note.name = note.path = "note.txt";
  note.text =
      "The ferry to Gull Rock leaves the harbour at seven every morning.\n"
      "Tickets cost three pounds and are sold on the quay by Mrs Hale.\n";
  session.conversation().AddDocument(std::move(note));
  AskOptions ask;
  ask.max_tokens = 5;
  ask.sampling.temperature = 0;
  ask.feed_last = feed_last;
  auto a = session.Ask("When does the ferry leave?", ask);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  if (!a.ok()) return out;
  out.tokens = a->tokens;
  out.stop_reason = a->stop_reason;
  auto stored = session.pipeline().WaitForStore();
  EXPECT_TRUE(stored.ok()) << stored.status().ToString();
  out.stored = stored.ok() ? *stored : 0;
  out.store_tokens = session.store()->Stats().n_tokens;
  return out;
}

TEST(ChatSession, OneShotAnswerIsTheSameAndStoresOneTokenFewer) {
  if (!fs::exists(DefaultModel())) GTEST_SKIP() << "no default model at " << DefaultModel();
  const fs::path dir = fs::temp_directory_path() / ("impress-chat-session-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const OneAnswer turn = Answer(dir / "turn", true);
  const OneAnswer once = Answer(dir / "once", false);
  fs::remove_all(dir);
  ASSERT_FALSE(turn.tokens.empty());
  EXPECT_EQ(once.tokens, turn.tokens);
  EXPECT_EQ(once.stop_reason, turn.stop_reason);
  EXPECT_GT(turn.stored, 0u);
  EXPECT_EQ(once.stored + 1, turn.stored);
  EXPECT_EQ(once.store_tokens + 1, turn.store_tokens);
}

}  // namespace
}  // namespace impress
