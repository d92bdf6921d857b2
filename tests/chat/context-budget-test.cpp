// ContextBudget: the room documents and passages get in the model's context, and the attach
// rules at their edges (exactly full, one token over, an answer that fills the context).
#include "chat/context-budget.h"

#include <gtest/gtest.h>

namespace impress {
namespace {

TEST(ContextBudget, RoomIsTheContextLessTheAnswerAndTheQuestionReserve) {
  const ContextBudget b{8192, 256};
  EXPECT_EQ(b.DocumentRoom(), 8192 - 256 - ContextBudget::kQuestionReserve);
  EXPECT_EQ(b.RetrievalTokens(), ContextBudget::kMaxRetrievalTokens);  // capped
  const ContextBudget small{1024, 600};
  EXPECT_EQ(small.RetrievalTokens(), 1024 - 600 - ContextBudget::kRetrievalReserve);
}

TEST(ContextBudget, AnAnswerThatFillsTheContextLeavesNoRoom) {
  const ContextBudget b{512, 512};
  EXPECT_LT(b.DocumentRoom(), 0);
  EXPECT_EQ(b.RetrievalTokens(), 0);  // never negative
  EXPECT_EQ(CheckAttach(b, 0, 1), AttachFit::kLongerThanContext);
  EXPECT_EQ(CheckAttach(b, 0, 0), AttachFit::kLongerThanContext);  // not even an empty document
}

TEST(ContextBudget, ExactlyFullFitsAndOneTokenMoreDoesNot) {
  const ContextBudget b{1000, 100};
  const int room = b.DocumentRoom();
  EXPECT_EQ(CheckAttach(b, 0, room), AttachFit::kFits);
  EXPECT_EQ(CheckAttach(b, 0, room + 1), AttachFit::kLongerThanContext);
  EXPECT_EQ(CheckAttach(b, 300, room - 300), AttachFit::kFits);
  EXPECT_EQ(CheckAttach(b, 300, room - 299), AttachFit::kOverflows);  // fits alone, not with the others
}

TEST(ContextBudget, FitInOrderKeepsEarlierDocumentsAndLaterShortOnes) {
  const ContextBudget b{1000, 100};  // room 836
  // 500 fits; 400 would overflow (900); 300 fits after it (800); the detached one stays detached.
  const std::vector<bool> keep = FitInOrder(b, {500, 400, 300, 10}, {true, true, true, false});
  EXPECT_EQ(keep, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(FitInOrder(b, {}, {}), std::vector<bool>{});
  EXPECT_EQ(FitInOrder(ContextBudget{100, 100}, {1}, {true}), std::vector<bool>{false});
}

}  // namespace
}  // namespace impress
