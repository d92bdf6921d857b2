// OpenBLAS on host memory: its thread count and the benchmarks' reference sgemm (cpu-backend.h).
#include <cblas.h>

#include <algorithm>

#include "engine/compute/cpu-backend.h"

namespace impress {

void SetBlasThreads(int n_threads) { openblas_set_num_threads(std::max(1, n_threads)); }

void HostSgemmNT(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}

}  // namespace impress
