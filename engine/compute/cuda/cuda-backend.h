// The CUDA backend: engine/compute/backend.h on an NVIDIA GPU (cuBLAS GEMMs, CUDA kernels for
// norms, RoPE, activations and attention with H2O importance), and the helpers that tell
// whether a GPU is there. No CUDA header is included here; every function exists in every build
// and, in a build without CUDA (IMPRESS_CUDA=OFF), returns a clear Unsupported status.
//
// Semantics are those of the CPU backend (cpu-backend.cpp), with these differences:
//  - Ops are asynchronous on one CUDA stream. CopyToHost and Synchronize wait.
//  - GEMM precision (CudaGemmPrecision): with kF16 (the default) or kBf16, a GEMM whose one
//    operand is a mapped constant (a weight) runs on tensor cores with a half-precision copy of
//    the weight (made on first use, kept until ReleaseConstant) and the other operand rounded to
//    the same type, accumulating in fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F). Expected error: the
//    inputs' rounding, about 2^-11 relative per value for fp16 (2^-8 for bf16), which averages
//    over a dot product to ~1e-3 (fp16) / ~5e-3 (bf16) of a GEMM output's scale; logits of a
//    30-layer model then agree with the CPU to ~1e-2 relative (fp16). kFp32 is plain SGEMM
//    (no TF32), within ~1e-5 of the CPU backend; kTf32 lets cuBLAS use TF32 tensor cores.
//    fp16 overflows above 65504 (inf); bf16 does not overflow.
//  - Attention and ScoreKeys support head_dim <= 256 (Unsupported beyond). Importance is exact
//    softmax weights recomputed in a second pass from the first pass's row max and sum, summed
//    per column in a fixed order: deterministic, no float atomics.
//  - Errors: every CUDA and cuBLAS call is checked. Ops that return void record the first
//    failure (with the call's name and CUDA's message) and log it; from then on the backend is
//    failed: later ops do nothing and Alloc, Attention and ScoreKeys return that status.
//    CudaBackendStatus() reads it. Alloc out of memory (after dropping its cache) returns
//    ResourceExhausted and does not fail the backend.
//
// Thread contract: a backend requires external synchronization (as Backend); it may be used
// from any one thread at a time (it sets its device on that thread). The free functions are
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/compute/backend.h"

namespace impress {

enum class CudaGemmPrecision { kFp32, kTf32, kF16, kBf16 };

// "fp32", "tf32", "f16", "bf16" <-> the enum. Parse also accepts "fp16".
const char* CudaGemmPrecisionName(CudaGemmPrecision p);
Result<CudaGemmPrecision> ParseCudaGemmPrecision(std::string_view name);

struct CudaBackendOptions {
  int device = 0;
  // Overridden by the environment variable IMPRESS_CUDA_GEMM (fp32|tf32|f16|bf16) when set.
  CudaGemmPrecision gemm = CudaGemmPrecision::kF16;
};

// True when this build has the CUDA backend compiled in.
bool CudaBuildEnabled();

// The number of CUDA devices. NotFound "no CUDA device found (cudaGetDeviceCount: ...)" when
// the driver is missing or there is no device; Unsupported in a build without CUDA.
Result<int> CudaDeviceCount();

// "NVIDIA H200 (sm_90, 132 SMs, 140.4 GiB)" or the error.
Result<std::string> CudaDeviceDescription(int device = 0);

// A backend on `device`; fails with the status of CudaDeviceCount, or with the first CUDA or
// cuBLAS error of its setup.
Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options = {});

// The sticky error of a CUDA backend (OK when none, or when `backend` is not a CUDA backend).
Status CudaBackendStatus(const Backend& backend);

// cuBLAS matrix rate on `device`: the best of a few (size, size, size) GEMMs in the given
// precision (fp16/bf16 inputs accumulate in fp32), in TFLOP/s. For benchmarks.
Result<double> MeasureCublasTflops(int device, CudaGemmPrecision precision, int size = 8192);

}  // namespace impress
