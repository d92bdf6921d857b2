// CUDA tier memory: see cuda-tier-memory.h.
#include "engine/compute/cuda/cuda-tier-memory.h"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "engine/compute/cuda/cuda-backend.h"
#include "engine/compute/cuda/cuda-util.h"

namespace impress {

namespace {

class CudaTierMemory final : public MemorySpace {
 public:
  CudaTierMemory(int device, bool pinned_host) : device_(device), pinned_(pinned_host) {}
  ~CudaTierMemory() override {
    cudaSetDevice(device_);
    MutexLock lock(&mu_);
    for (auto& [p, n] : live_) Release(p);
    for (auto& [n, blocks] : cached_)
      for (void* p : blocks) Release(p);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init() {
    IMPRESS_RETURN_IF_ERROR(cuda::CudaError(cudaSetDevice(device_), "cudaSetDevice"));
    if (!pinned_)
      IMPRESS_RETURN_IF_ERROR(
          cuda::CudaError(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    return Status::Ok();
  }

  void* Alloc(size_t bytes) override {
    const size_t size = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
    MutexLock lock(&mu_);
    if (failed_) return nullptr;
    auto it = cached_.find(size);
    if (it != cached_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      live_[p] = size;
      return p;
    }
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t e = pinned_ ? cudaHostAlloc(&p, size, cudaHostAllocPortable) : cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {  // drop the cache and retry once
      cudaGetLastError();
      for (auto& [n, blocks] : cached_)
        for (void* b : blocks) Release(b);
      cached_.clear();
      e = pinned_ ? cudaHostAlloc(&p, size, cudaHostAllocPortable) : cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      spdlog::warn("{} tier: {}", name(), cuda::CudaError(e, pinned_ ? "cudaHostAlloc" : "cudaMalloc").ToString());
      return nullptr;
    }
    live_[p] = size;
    return p;
  }

  void Free(void* p) override {
    if (!p) return;
    MutexLock lock(&mu_);
    auto it = live_.find(p);
    if (it == live_.end()) {
      spdlog::error("{} tier: Free of an address it did not allocate", name());
      return;
    }
    cached_[it->second].push_back(p);
    live_.erase(it);
  }

  void CopyIn(void* dst, const void* host_src, size_t bytes) override { Copy(dst, host_src, bytes, true); }
  void CopyOut(void* host_dst, const void* src, size_t bytes) override { Copy(host_dst, src, bytes, false); }
  const void* HostView(const void* p) const override { return pinned_ ? p : nullptr; }
  const char* name() const override { return pinned_ ? "host (pinned)" : "device (cuda)"; }

 private:
  void Copy(void* dst, const void* src, size_t bytes, bool in) {
    if (bytes == 0) return;
    if (pinned_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    cudaSetDevice(device_);
    MutexLock lock(&copy_mu_);  // one stream: copies from several threads are serialized
    Status st =
        cuda::CudaError(cudaMemcpyAsync(dst, src, bytes, in ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream_),
                        "cudaMemcpyAsync");
    if (st.ok()) st = cuda::CudaError(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!st.ok()) {
      spdlog::error("{} tier: copy {} of {} bytes failed: {}", name(), in ? "in" : "out", bytes, st.ToString());
      MutexLock l2(&mu_);
      failed_ = true;
    }
  }
  void Release(void* p) {
    if (pinned_) {
      cudaFreeHost(p);
    } else {
      cudaFree(p);
    }
  }

  const int device_;
  const bool pinned_;
  cudaStream_t stream_ = nullptr;  // made by Init, before the memory is shared; used under copy_mu_
  Mutex mu_;                       // the pool and failed_
  std::unordered_map<void*, size_t> live_ GUARDED_BY(mu_);
  std::unordered_map<size_t, std::vector<void*>> cached_ GUARDED_BY(mu_);
  bool failed_ GUARDED_BY(mu_) = false;
  Mutex copy_mu_ ACQUIRED_BEFORE(mu_);  // one stream: copies are serialized
};

Result<std::shared_ptr<MemorySpace>> Make(int device, bool pinned) {
  IMPRESS_ASSIGN_OR_RETURN(int n, CudaDeviceCount());
  if (device < 0 || device >= n)
    return Status::InvalidArgument("CUDA device " + std::to_string(device) + " does not exist");
  auto m = std::make_shared<CudaTierMemory>(device, pinned);
  IMPRESS_RETURN_IF_ERROR(m->Init());
  return std::shared_ptr<MemorySpace>(std::move(m));
}

}  // namespace

Result<std::shared_ptr<MemorySpace>> MakeCudaDeviceTierMemory(int device) { return Make(device, false); }
Result<std::shared_ptr<MemorySpace>> MakeCudaPinnedHostTierMemory(int device) { return Make(device, true); }

}  // namespace impress
