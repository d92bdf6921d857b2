#include "chat/context-budget.h"

#include <algorithm>

namespace impress {

int ContextBudget::RetrievalTokens() const {
  return std::max(0, std::min(kMaxRetrievalTokens, n_ctx - max_tokens - kRetrievalReserve));
}

AttachFit CheckAttach(const ContextBudget& budget, int attached_tokens, int n_tokens) {
  const int room = budget.DocumentRoom();
  if (n_tokens > room) return AttachFit::kLongerThanContext;
  if (attached_tokens + n_tokens > room) return AttachFit::kOverflows;
  return AttachFit::kFits;
}

std::vector<bool> FitInOrder(const ContextBudget& budget, const std::vector<int>& n_tokens,
                             const std::vector<bool>& attached) {
  std::vector<bool> out(attached.size(), false);
  int used = 0;
  for (size_t i = 0; i < attached.size() && i < n_tokens.size(); ++i) {
    if (!attached[i] || used + n_tokens[i] > budget.DocumentRoom()) continue;
    out[i] = true;
    used += n_tokens[i];
  }
  return out;
}

}  // namespace impress
