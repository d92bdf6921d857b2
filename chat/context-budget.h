// ContextBudget: how many prompt tokens the model's context leaves for attached documents and
// for retrieved passages, once the answer (max_tokens) and the question with the chat template
// are set aside; and the rules that decide whether a document may be attached. Every front end
// (GUI, terminal chat, server) applies the same rules through ChatController.
//
// Pure values and functions: safe from any thread.
#pragma once

#include <vector>

namespace impress {

struct ContextBudget {
  int n_ctx = 0;       // the model's context (tokens)
  int max_tokens = 0;  // kept for the answer

  static constexpr int kQuestionReserve = 64;       // the question and the template's tokens
  static constexpr int kRetrievalReserve = 256;     // a retrieval prompt also carries passage headers
  static constexpr int kMaxRetrievalTokens = 2048;  // most passage tokens one question carries

  // Tokens the attached documents may use together (negative when the answer alone fills the context).
  int DocumentRoom() const { return n_ctx - max_tokens - kQuestionReserve; }
  // Passage tokens a retrieval-mode question may carry: [0, kMaxRetrievalTokens].
  int RetrievalTokens() const;
};

enum class AttachFit {
  kFits,               // attached_tokens + n_tokens <= DocumentRoom()
  kLongerThanContext,  // the document alone is longer than DocumentRoom()
  kOverflows,          // it fits alone, not with the documents already attached
};

// Whether a document of `n_tokens` fits beside `attached_tokens` already attached.
AttachFit CheckAttach(const ContextBudget& budget, int attached_tokens, int n_tokens);

// Leaving retrieval mode: the attached flags after keeping, in order, each attached document
// that still fits beside those kept before it (a later, shorter one may fit after a longer one
// was detached). `n_tokens` and `attached` are parallel.
std::vector<bool> FitInOrder(const ContextBudget& budget, const std::vector<int>& n_tokens,
                             const std::vector<bool>& attached);

}  // namespace impress
