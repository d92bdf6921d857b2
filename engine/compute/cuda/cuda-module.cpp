// The CUDA module's entry point: the table of cuda-module.h over the functions of
// cuda-backend.cpp and cuda-tier-memory.cpp (hidden in the module, see cuda.cmake).
#include "engine/compute/cuda/cuda-module.h"

#include "engine/compute/cuda/cuda-tier-memory.h"

extern "C" __attribute__((visibility("default"))) const impress::CudaModuleApi* impress_cuda_module_api() {
  static const impress::CudaModuleApi api{
      .version = impress::kCudaModuleApiVersion,
      .device_count = impress::CudaDeviceCount,
      .device_description = impress::CudaDeviceDescription,
      .make_backend = impress::MakeCudaBackend,
      .backend_status = impress::CudaBackendStatus,
      .measure_cublas_tflops = impress::MeasureCublasTflops,
      .make_device_tier = impress::MakeCudaDeviceTierMemory,
      .make_pinned_host_tier = impress::MakeCudaPinnedHostTierMemory,
  };
  return &api;
}
