// ReComp: no reuse; every token of the prompt is computed (the baseline of full attention).
#include "pipeline/system-policy.h"

namespace impress {

std::unique_ptr<SystemPolicy> MakeRecompSystem() {
  return std::make_unique<SystemPolicy>(SystemTraits{.name = "recomp",
                                                     .display = "ReComp",
                                                     .description = "no reuse: the whole prompt is computed",
                                                     .selection = LayerSelection::kNone,
                                                     .cache = store::PolicyKind::kLru,
                                                     .reorders = false});
}

}  // namespace impress
