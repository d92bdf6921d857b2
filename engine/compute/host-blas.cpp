// OpenBLAS on host memory: its thread count, its kernel set, and the benchmarks' reference sgemm
// (cpu-backend.h).
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "engine/compute/cpu-backend.h"

namespace impress {

void SetBlasThreads(int n_threads) { openblas_set_num_threads(std::max(1, n_threads)); }

void HostSgemmNT(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}

const char* PickBlasCore(std::string_view chosen, bool avx512, bool avx2_fma) {
  // OpenBLAS's names of x86 cores before AVX2 (its DYNAMIC_ARCH fallbacks among them).
  static constexpr std::array<std::string_view, 11> kBeforeAvx2 = {"Katmai",     "Coppermine", "Northwood",  "Prescott",
                                                                   "Banias",     "Atom",       "Core2",      "Penryn",
                                                                   "Dunnington", "Nehalem",    "Sandybridge"};
  if (std::find(kBeforeAvx2.begin(), kBeforeAvx2.end(), chosen) == kBeforeAvx2.end()) return nullptr;
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return nullptr;
}

const char* BlasCoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

const char* BlasThreadTimeoutToSet() {
  for (const char* name : {"OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT"})
    if (const char* set = std::getenv(name); set && *set) return nullptr;
  return kBlasThreadTimeout;
}

const char* BlasCoreOverride() {
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set && *set) return nullptr;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return PickBlasCore(BlasCoreName(), avx512, avx2_fma);
#else
  return nullptr;
#endif
}

}  // namespace impress
