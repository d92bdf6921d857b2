// RunCudaEngineBenchmark: the forward pass on the CUDA backend -- prefill and decode speed, and
// how close its GEMMs come to the card's measured matrix rate.
//
// Prefill tokens/s at n_prefill_short and n_prefill_long tokens (ubatches of `ubatch`, logits of
// the last row), decode tokens/s (one token at a time after the short prefill), as TimeForward
// measures them (forward-timing.h), the achieved
// prefill TFLOP/s (the backend's counted operations, attention included, over the short
// prefill's time), the model's own layer GEMM shapes (M = ubatch) through the backend in
// TFLOP/s, and the card's matrix rate measured with cuBLAS on 8192^3 GEMMs in the same
// precision (and in fp32). Random token ids; results do not depend on them.
//
// Thread contract: runs on the calling thread; uses the GPU exclusively while it runs.
#pragma once

#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "bench/forward-timing.h"
#include "engine/compute/cuda/cuda-backend.h"
#include "engine/model/model.h"

namespace impress {

struct CudaBenchOptions {
  int device = 0;
  CudaGemmPrecision gemm = CudaGemmPrecision::kF16;  // IMPRESS_CUDA_GEMM overrides, as for the backend
  // Warm-up: a whole short prefill (kernel and GEMM selection happen there).
  ForwardTimingOptions forward{.n_decode = 128, .repeats = 3, .n_warmup = 0};
  ProgressFn progress;
};

struct CudaBenchResult {
  std::string device;   // CudaDeviceDescription
  std::string backend;  // Backend::Name()
  ForwardSpeed speed;
  double prefill_tflops = 0;     // achieved at the short prefill
  double model_gemm_tflops = 0;  // the model's layer GEMMs through the backend (M = ubatch)
  double peak_gemm_tflops = 0;   // cuBLAS 8192^3 in the backend's GEMM precision
  double peak_sgemm_tflops = 0;  // cuBLAS 8192^3 fp32 (no TF32)
  double gemm_efficiency = 0;    // model_gemm_tflops / peak_gemm_tflops
  double prefill_vs_peak = 0;    // prefill_tflops / peak_gemm_tflops
  double weights_mb = 0;         // fp32 weights on the device
  double kv_cache_mb = 0;
};

Result<CudaBenchResult> RunCudaEngineBenchmark(const Model& model, const CudaBenchOptions& options = {});

// A table for people; one line per number.
std::string FormatCudaBench(const CudaBenchResult& r);

}  // namespace impress
