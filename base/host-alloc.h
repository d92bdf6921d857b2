// Host buffers for the compute backend and the store's reads: aligned as asked, and a large one
// (at least kHugePageMin bytes) aligned to 2 MiB and offered to the kernel for transparent huge
// pages (madvise MADV_HUGEPAGE; where the kernel's setting is "madvise", the default on Debian).
// A request's KV buffers are filled by copies into memory the process has not touched before, and
// the disk's reads pin theirs: with 4 KiB pages each page faults in separately (a 32K-token
// question touched ~300 MB of each kind), with huge pages one fault serves 512 of them. Free with
// std::free.
#pragma once

#include <cstddef>

namespace impress {

inline constexpr size_t kHugePageMin = size_t(2) << 20;

// `align` (a power of two, at most 2 MiB) is the alignment below kHugePageMin bytes; nullptr
// when out of memory; bytes == 0 allocates a minimal buffer.
void* AllocHostBuffer(size_t bytes, size_t align = 64);

}  // namespace impress
