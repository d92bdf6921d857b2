// Small RAII and error helpers over the CUDA runtime and cuBLAS, internal to engine/compute/cuda.
// Every CUDA / cuBLAS call's failure becomes a Status naming the call and CUDA's own message.
// Thread contract: plain values; each object is used by one thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>

#include "base/status.h"

namespace impress::cuda {

inline Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  const Status::Code code = e == cudaErrorMemoryAllocation ? Status::Code::kResourceExhausted : Status::Code::kInternal;
  return Status(code, fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

inline Status BlasError(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const Status::Code code =
      e == CUBLAS_STATUS_ALLOC_FAILED ? Status::Code::kResourceExhausted : Status::Code::kInternal;
  return Status(code, fmt::format("{}: {} ({})", what, cublasGetStatusName(e), cublasGetStatusString(e)));
}

// cudaMalloc'd bytes, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status Allocate(size_t bytes) {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    const cudaError_t e = cudaMalloc(&p_, bytes ? bytes : 1);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      return CudaError(e, "cudaMalloc");
    }
    return Status::Ok();
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class BlasHandle {
 public:
  BlasHandle() = default;
  ~BlasHandle() {
    if (h_) cublasDestroy(h_);
  }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  Status Create() { return BlasError(cublasCreate(&h_), "cublasCreate"); }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() = default;
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  Status Create() {
    IMPRESS_RETURN_IF_ERROR(CudaError(cudaEventCreate(&start), "cudaEventCreate"));
    return CudaError(cudaEventCreate(&stop), "cudaEventCreate");
  }
};

}  // namespace impress::cuda
