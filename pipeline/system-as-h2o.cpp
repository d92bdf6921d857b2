// AS+H2O: all keys of a layer read and every head scored (H2O importance), then the values of the
// chosen tokens; with LRU or LFU caching of the tiers. IMPRESS falls back to this selection when
// its probe heads disagree.
#include "pipeline/system-policy.h"

namespace impress {

namespace {

std::unique_ptr<SystemPolicy> MakeAsH2o(const char* name, const char* display, store::PolicyKind cache,
                                        const char* cache_name) {
  return std::make_unique<SystemPolicy>(SystemTraits{
      .name = name,
      .display = display,
      .description =
          std::string("all keys, every head scored (H2O), the chosen tokens' values; ") + cache_name + " caching",
      .selection = LayerSelection::kAllHeads,
      .cache = cache,
      .reorders = false});
}

}  // namespace

std::unique_ptr<SystemPolicy> MakeAsH2oLruSystem() {
  return MakeAsH2o("as-h2o-lru", "AS+H2O (LRU)", store::PolicyKind::kLru, "LRU");
}

std::unique_ptr<SystemPolicy> MakeAsH2oLfuSystem() {
  return MakeAsH2o("as-h2o-lfu", "AS+H2O (LFU)", store::PolicyKind::kLfu, "LFU");
}

}  // namespace impress
