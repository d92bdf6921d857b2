// MemorySpace (base/memory-space.h) on a CUDA machine, for PrefixStoreOptions::device_memory and
// host_memory:
//  - the device tier: GPU memory from cudaMalloc, kept in a size-class pool (chunks are a few
//    sizes, and cudaMalloc/cudaFree synchronize the device); CopyIn/CopyOut run on the tier's
//    own stream and wait for their copy, so they never wait on compute work.
//  - the host tier: pinned (page-locked) memory from cudaHostAlloc, pooled the same way, so
//    host -> device copies from it run at full PCIe speed and may be asynchronous.
// Memory is returned to CUDA when the MemorySpace is destroyed. A copy that fails is logged (the
// interface cannot return it) and marks the tier failed: Alloc then returns nullptr, so the store
// keeps the chunk on the SSD only.
//
// Thread contract: internally synchronized; every method may be called from any thread.
#pragma once

#include <memory>

#include "base/memory-space.h"
#include "base/status.h"

namespace impress {

// Both fail with the status of CudaDeviceCount() (cuda-backend.h) where there is no GPU, and
// are Unsupported in a build without CUDA.
Result<std::shared_ptr<MemorySpace>> MakeCudaDeviceTierMemory(int device = 0);
Result<std::shared_ptr<MemorySpace>> MakeCudaPinnedHostTierMemory(int device = 0);

}  // namespace impress
