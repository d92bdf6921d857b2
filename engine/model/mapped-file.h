// MappedFile: the bytes of a model file, either a whole file mapped read-only (mmap, unmapped on
// destruction) or a borrowed in-memory image (tests, fuzzers; never freed here). Internal to
// engine/model: the GGUF and safetensors readers hold one as their image, so their own moves
// are the defaults. Immutable; movable (a moved-from MappedFile is empty), not copyable.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace impress {

// Opens `path` read-only without blocking (O_NONBLOCK: a FIFO or device cannot hang the open;
// regular files read as usual) and checks that it is a regular file. Returns the descriptor
// (the caller closes it) and its size in `*size`. NotFound when missing; InvalidArgument for a
// folder, FIFO, socket or device; IOError for a symlink loop, permission or other refusal.
Result<int> OpenRegularFile(const std::string& path, uint64_t* size);

class MappedFile {
 public:
  // Maps the regular file at `path` (opened by OpenRegularFile, with its errors); Corruption
  // when it is empty. `what` ("GGUF model") goes in the messages.
  static Result<MappedFile> Open(const std::string& path, const char* what);
  // Views `size` bytes at `data`, which must outlive the MappedFile and every copy of its data().
  static MappedFile Borrow(const void* data, uint64_t size);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { Reset(); }

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool mapped() const { return mapped_; }  // from Open (not Borrow)

  // Hint that [p, p + n) will not be read again: a mapping drops the whole pages inside it from
  // memory (they are re-read from the file if touched). No-op for a borrowed image or a range
  // that is not inside this one.
  void DiscardPages(const uint8_t* p, uint64_t n) const;

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // data_ is our mmap (munmap on destruction)
};

}  // namespace impress
