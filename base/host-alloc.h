// Host buffers for the compute backend and the store's reads: aligned as asked, and a large one
// (at least kHugePageMin bytes) aligned to 2 MiB and offered to the kernel for transparent huge
// pages (madvise MADV_HUGEPAGE; where the kernel's setting is "madvise", the default on Debian).
// A request's KV buffers are filled by copies into memory the process has not touched before, and
// the disk's reads pin theirs: with 4 KiB pages each page faults in separately (a 32K-token
// question touched ~300 MB of each kind), with huge pages one fault serves 512 of them. Free with
// std::free.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

namespace impress {

inline constexpr size_t kHugePageMin = size_t(2) << 20;

// `align` (a power of two, at most 2 MiB) is the alignment below kHugePageMin bytes; nullptr
// when out of memory; bytes == 0 allocates a minimal buffer.
void* AllocHostBuffer(size_t bytes, size_t align = 64);

// Scratch values that their user writes before reading them, kept between calls. Grow(n) keeps
// the buffer while it is large enough and never writes it: std::vector::resize zeroes every
// element it adds, so a vector that moves between two sizes call after call (one shared by the
// attention and the probe, the last block of keys shorter than the others) zeroes the difference
// each time; for the probe's scores over 32K keys that had cost more than their products. Large
// buffers take huge pages (AllocHostBuffer). Throws std::bad_alloc as a vector would.
template <typename T>
class ScratchArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);

 public:
  // Room for n elements, at least 64-byte aligned; what they hold is whatever was left there.
  T* Grow(size_t n) {
    if (n > cap_) {
      const size_t cap = std::max(n, cap_ + cap_ / 2);  // a context growing by a token a call
      void* p = AllocHostBuffer(cap * sizeof(T), std::max<size_t>(64, alignof(T)));
      if (!p) throw std::bad_alloc();
      data_.reset(static_cast<T*>(p));
      cap_ = cap;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }
  T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t cap_ = 0;
};

}  // namespace impress
