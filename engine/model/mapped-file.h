// MappedFile: the bytes of a model file, either a whole file mapped read-only (mmap, unmapped on
// destruction) or a borrowed in-memory image (tests, fuzzers; never freed here). Internal to
// engine/model: the GGUF and safetensors readers hold one as their image, so their own moves
// are the defaults. Immutable; movable (a moved-from MappedFile is empty), not copyable.
//
// A mapping reads the file as it is now, not as it was at Open: if another program truncates the
// file meanwhile, reading past its new end would raise SIGBUS (sigbus-guard.h turns those pages
// into zeros instead), and if it rewrites the file in place the mapping reads the new bytes. So a
// mapping keeps the file open and CheckUnchanged() tells, after the weights were used, whether any
// of that can have happened; the forward pass checks it after every step (CheckModelFiles in
// model.h) so no result computed from a changed file reaches anyone.
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

  // Ok while the file is as it was at Open. DataLoss ("<path>: the model file changed on disk
  // while in use (it is now N bytes, was M); load it again") once a read past a new end of the
  // file found zeros (poisoned()), or the file's size or modification time differ from Open's
  // (truncated, or rewritten in place: a replacement by rename leaves this mapping's file alone).
  // A relaxed atomic load and one fstat; safe from any thread. Always Ok for a borrowed image.
  Status CheckUnchanged() const;
  // Whether a read past the file's new end found zero pages in place of its bytes (sigbus-guard.h).
  bool poisoned() const;

  // Hint that [p, p + n) will not be read again: a mapping drops the whole pages inside it from
  // memory (they are re-read from the file if touched). No-op for a borrowed image or a range
  // that is not inside this one.
  void DiscardPages(const uint8_t* p, uint64_t n) const;
  // Maps every page of the file into the address space now, in one call (MADV_POPULATE_READ):
  // much cheaper than a page fault per page on first use. Best effort; no-op when borrowed.
  void Populate() const;
  int fd() const { return fd_; }  // -1 when borrowed

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // data_ is our mmap (munmap on destruction)
  // A mapping only: the file, kept open so fstat sees this file even after a rename replaced it
  // at `path_`; its modification time at Open; the sigbus_guard slot (-1: unguarded).
  int fd_ = -1;
  int guard_slot_ = -1;
  int64_t mtime_ns_ = 0;
  std::string path_;
};

}  // namespace impress
