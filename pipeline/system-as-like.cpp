// AttentionStore-like: the full prefix KV of every layer from the tiers, the next layer's read
// while one computes; LRU caching.
#include "pipeline/system-policy.h"

namespace impress {

std::unique_ptr<SystemPolicy> MakeAsLikeSystem() {
  return std::make_unique<SystemPolicy>(
      SystemTraits{.name = "as",
                   .display = "AS-like",
                   .description = "AttentionStore-like: every prefix token's K/V, next layer prefetched; LRU caching",
                   .selection = LayerSelection::kWholeLayer,
                   .cache = store::PolicyKind::kLru,
                   .reorders = false});
}

}  // namespace impress
