#include "pipeline/report.h"

namespace impress {

const char* SystemName(SystemKind s) {
  switch (s) {
    case SystemKind::kRecomp: return "recomp";
    case SystemKind::kAsLike: return "as";
    case SystemKind::kAsH2oLru: return "as-h2o-lru";
    case SystemKind::kAsH2oLfu: return "as-h2o-lfu";
    case SystemKind::kImpressItf: return "impress-itf";
    case SystemKind::kImpressItfRo: return "impress-itf-ro";
    case SystemKind::kImpress: return "impress";
  }
  return "?";
}

bool ParseSystem(const std::string& name, SystemKind* out) {
  for (SystemKind s : {SystemKind::kRecomp, SystemKind::kAsLike, SystemKind::kAsH2oLru, SystemKind::kAsH2oLfu,
                       SystemKind::kImpressItf, SystemKind::kImpressItfRo, SystemKind::kImpress}) {
    if (name == SystemName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

}  // namespace impress
