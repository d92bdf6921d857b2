// The CUDA backend as a module loaded at run time: libimpress-cuda.so (built from
// engine/compute/cuda with cudart and cuBLAS) exports one C entry point that hands out this
// table; cuda-loader.cpp, linked into the programs, implements cuda-backend.h and
// cuda-tier-memory.h by loading the module on first use. A CPU-only run therefore never maps
// the CUDA runtime or cuBLAS.
//
// The module is found at $IMPRESS_CUDA_MODULE when set, else next to the executable. It resolves
// the engine symbols it uses (the Backend base class, the attention argument checks) from the
// executable, which exports them (CMAKE_ENABLE_EXPORTS); its own symbols are hidden, so its
// functions never bind to the loader's functions of the same names.
//
// Thread contract: the table is constant once returned; its functions are those of
// cuda-backend.h and cuda-tier-memory.h, with their contracts.
#pragma once

#include <memory>
#include <string>

#include "base/memory-space.h"
#include "base/status.h"
#include "engine/compute/backend.h"
#include "engine/compute/cuda/cuda-backend.h"

namespace impress {

inline constexpr int kCudaModuleApiVersion = 1;
inline constexpr const char kCudaModuleEntry[] = "impress_cuda_module_api";
inline constexpr const char kCudaModuleFile[] = "libimpress-cuda.so";

struct CudaModuleApi {
  int version = kCudaModuleApiVersion;
  Result<int> (*device_count)();
  Result<std::string> (*device_description)(int device);
  Result<std::unique_ptr<Backend>> (*make_backend)(const CudaBackendOptions& options);
  Status (*backend_status)(const Backend& backend);
  Result<double> (*measure_cublas_tflops)(int device, CudaGemmPrecision precision, int size);
  Result<std::shared_ptr<MemorySpace>> (*make_device_tier)(int device);
  Result<std::shared_ptr<MemorySpace>> (*make_pinned_host_tier)(int device);
};

// The module's entry point (extern "C", named kCudaModuleEntry).
using CudaModuleEntryFn = const CudaModuleApi* (*)();

}  // namespace impress
