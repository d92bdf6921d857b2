// The CUDA backend's entry points in a build without CUDA (IMPRESS_CUDA=OFF): each says so.
// cuda-backend.cpp and cuda-tier-memory.cpp replace this file when CUDA is built.
#include <fmt/format.h>

#include "engine/compute/cuda/cuda-backend.h"
#include "engine/compute/cuda/cuda-tier-memory.h"

namespace impress {

namespace {
Status NotBuilt() {
  return Status::Unsupported(
      "this build has no CUDA backend (it was configured without nvcc or with IMPRESS_CUDA=OFF; use --backend cpu)");
}
}  // namespace

bool CudaBuildEnabled() { return false; }
Result<int> CudaDeviceCount() { return NotBuilt(); }
Result<std::string> CudaDeviceDescription(int) { return NotBuilt(); }
Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions&) { return NotBuilt(); }
Status CudaBackendStatus(const Backend&) { return Status::Ok(); }
Result<double> MeasureCublasTflops(int, CudaGemmPrecision, int) { return NotBuilt(); }
Result<std::shared_ptr<MemorySpace>> MakeCudaDeviceTierMemory(int) { return NotBuilt(); }
Result<std::shared_ptr<MemorySpace>> MakeCudaPinnedHostTierMemory(int) { return NotBuilt(); }

}  // namespace impress
