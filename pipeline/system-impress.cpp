// IMPRESS and its ablations: the probe heads' importance and the Jaccard test (ITF) choose the
// tokens; reorder packs important tokens together on disk; score-based caching keeps the chunks
// of important tokens in the fast tiers. The ablations add these parts one at a time: ITF alone
// (LFU caching), ITF + reorder (LFU caching), all three.
#include "pipeline/system-policy.h"

namespace impress {

namespace {

std::unique_ptr<SystemPolicy> MakeProbing(const char* name, const char* display, const char* description,
                                          store::PolicyKind cache, bool reorders) {
  return std::make_unique<SystemPolicy>(SystemTraits{.name = name,
                                                     .display = display,
                                                     .description = description,
                                                     .selection = LayerSelection::kProbe,
                                                     .cache = cache,
                                                     .reorders = reorders});
}

}  // namespace

std::unique_ptr<SystemPolicy> MakeImpressItfSystem() {
  return MakeProbing("impress-itf", "IMPRESS: ITF only",
                     "ablation: probe heads' importance and the Jaccard test choose tokens; LFU caching, no reorder",
                     store::PolicyKind::kLfu, false);
}

std::unique_ptr<SystemPolicy> MakeImpressItfRoSystem() {
  return MakeProbing("impress-itf-ro", "IMPRESS: ITF + reorder",
                     "ablation: probe-head token choice and reorder; LFU caching", store::PolicyKind::kLfu, true);
}

std::unique_ptr<SystemPolicy> MakeImpressSystem() {
  return MakeProbing("impress", "IMPRESS",
                     "probe-head token choice, reorder and importance-score caching (the full system)",
                     store::PolicyKind::kImpress, true);
}

}  // namespace impress
