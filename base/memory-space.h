// MemorySpace: where a cache tier keeps chunk bytes. The store's host tier is plain host memory
// (HostMemorySpace); its device tier is host memory too on a CPU-only machine, and GPU memory
// (cudaMalloc, with pinned host buffers for the host tier) when the CUDA backend provides one
// (engine/compute/cuda/cuda-tier-memory.h). The store only ever sees this interface, so it
// depends on no compute backend.
//
// Implementations must be safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace impress {

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual void* Alloc(size_t bytes) = 0;  // nullptr when out of memory
  virtual void Free(void* p) = 0;
  virtual void CopyIn(void* dst, const void* host_src, size_t bytes) = 0;   // host -> space
  virtual void CopyOut(void* host_dst, const void* src, size_t bytes) = 0;  // space -> host
  // The host's view of p (memory of this space the CPU can read in place), or nullptr when it
  // must be copied out first.
  virtual const void* HostView(const void* p) const {
    (void)p;
    return nullptr;
  }
  virtual const char* name() const = 0;
  // True when p is ordinary host memory that Free may release whatever tier files the block under:
  // a block moves between two such spaces without a copy.
  virtual bool PlainHost() const { return false; }
};

class HostMemorySpace final : public MemorySpace {
 public:
  explicit HostMemorySpace(const char* name) : name_(name) {}
  void* Alloc(size_t bytes) override { return std::malloc(bytes ? bytes : 1); }
  void Free(void* p) override { std::free(p); }
  void CopyIn(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyOut(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  const void* HostView(const void* p) const override { return p; }
  const char* name() const override { return name_; }
  bool PlainHost() const override { return true; }

 private:
  const char* name_;
};

}  // namespace impress
