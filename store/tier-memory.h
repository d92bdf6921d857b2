// TierMemory: where a memory tier keeps chunk bytes. The device tier is today host memory
// standing in for the CPU backend's compute-ready arena; the CUDA backend will implement this with
// cudaMalloc / cudaMemcpy. The host tier is plain host memory (pinned later).
// Implementations must be safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace impress::store {

class TierMemory {
 public:
  virtual ~TierMemory() = default;
  virtual void* Alloc(size_t bytes) = 0;        // nullptr when out of memory
  virtual void Free(void* p) = 0;
  virtual void CopyIn(void* dst, const void* host_src, size_t bytes) = 0;   // host -> tier
  virtual void CopyOut(void* host_dst, const void* src, size_t bytes) = 0;  // tier -> host
  virtual const char* name() const = 0;
};

class HostTierMemory final : public TierMemory {
 public:
  explicit HostTierMemory(const char* name) : name_(name) {}
  void* Alloc(size_t bytes) override { return std::malloc(bytes ? bytes : 1); }
  void Free(void* p) override { std::free(p); }
  void CopyIn(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyOut(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  const char* name() const override { return name_; }

 private:
  const char* name_;
};

}  // namespace impress::store
