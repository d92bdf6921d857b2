#include "base/cpu-info.h"

#include <fstream>

namespace impress {

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) break;
    return line.substr(colon + 2);
  }
  return "unknown CPU";
}

}  // namespace impress
