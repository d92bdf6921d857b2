#include "base/host-alloc.h"

#include <algorithm>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace impress {

void* AllocHostBuffer(size_t bytes, size_t align) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes < kHugePageMin) return std::aligned_alloc(align, (std::max<size_t>(bytes, 1) + align - 1) / align * align);
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
#if defined(MADV_HUGEPAGE)
  // Advice only: where the kernel has no huge pages to give, the buffer works with small ones.
  if (p) (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace impress
