// Prints GEMV weight bandwidth (GB/s of weight bytes streamed, one thread) per weight type and
// kernel path on a 576 x 1536 matrix (a SmolLM2-135M FFN projection: fits in cache) and a
// 4096 x 4096 one (a Llama-8B-sized projection: streams from memory), with the CPU model.
// Usage: quant-kernels-bench [min_seconds_per_case]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/quant/gemv-bench.h"

namespace {

std::string CpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace impress::quant;
  const double min_seconds = argc > 1 ? std::atof(argv[1]) : 0.3;
  std::cout << "CPU: " << CpuModelName() << "; default path: " << KernelPathName(ActiveKernelPath())
            << "; one thread; GB/s of weight bytes per GEMV (activation quantization included)\n";
  const WeightType types[] = {WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
                              WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                              WeightType::kQ5_K, WeightType::kQ6_K};
  const KernelPath paths[] = {KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512};
  const int64_t shapes[][2] = {{576, 1536}, {4096, 4096}};
  for (const auto& shape : shapes) {
    std::printf("\n%lld x %lld\n%-6s", static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), "type");
    for (KernelPath p : paths) std::printf(" %10s", KernelPathName(p));
    std::printf("   (MB)\n");
    for (WeightType t : types) {
      std::printf("%-6s", WeightTypeName(t));
      int64_t bytes = 0;
      for (KernelPath p : paths) {
        if (MissingCpuFeature(p)) {
          std::printf(" %10s", "n/a");
          continue;
        }
        auto r = BenchGemv(t, p, shape[0], shape[1], min_seconds);
        if (!r.ok()) {
          std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
          return 1;
        }
        bytes = r->weight_bytes;
        std::printf(" %10.2f", r->weight_gbs);
      }
      std::printf("   (%.2f)\n", double(bytes) / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
