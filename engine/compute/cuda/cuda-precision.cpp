// CudaGemmPrecision names (cuda-backend.h); built with and without CUDA.
#include <fmt/format.h>

#include "engine/compute/cuda/cuda-backend.h"

namespace impress {

const char* CudaGemmPrecisionName(CudaGemmPrecision p) {
  switch (p) {
    case CudaGemmPrecision::kFp32: return "fp32";
    case CudaGemmPrecision::kTf32: return "tf32";
    case CudaGemmPrecision::kF16: return "f16";
    case CudaGemmPrecision::kBf16: return "bf16";
  }
  return "?";
}

Result<CudaGemmPrecision> ParseCudaGemmPrecision(std::string_view name) {
  if (name == "fp32") return CudaGemmPrecision::kFp32;
  if (name == "tf32") return CudaGemmPrecision::kTf32;
  if (name == "f16" || name == "fp16") return CudaGemmPrecision::kF16;
  if (name == "bf16") return CudaGemmPrecision::kBf16;
  return Status::InvalidArgument(fmt::format("unknown CUDA GEMM precision '{}' (fp32|tf32|f16|bf16)", name));
}

}  // namespace impress
