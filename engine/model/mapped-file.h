// MappedFile: a whole file mapped read-only (mmap), unmapped on destruction. Internal to
// engine/model (the GGUF and safetensors readers). Immutable; movable, not copyable.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace impress {

class MappedFile {
 public:
  // Maps the regular file at `path`. NotFound when it does not exist; Corruption when it is
  // empty; IOError when the system refuses. `what` ("GGUF model") goes in the messages.
  static Result<MappedFile> Open(const std::string& path, const char* what);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept { *this = static_cast<MappedFile&&>(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = o.data_;
      size_ = o.size_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { Reset(); }

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Gives up ownership: the caller must Unmap(data, size) later.
  void Release() { data_ = nullptr; size_ = 0; }
  static void Unmap(const uint8_t* data, uint64_t size);
  // madvise(DONTNEED) on the whole pages inside [p, p + n) of a mapping.
  static void DiscardPages(const uint8_t* p, uint64_t n);

 private:
  void Reset() { Unmap(data_, size_); data_ = nullptr; size_ = 0; }
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace impress
