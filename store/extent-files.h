// ExtentFiles: the store's data files and their free space.
//
// Chunks live in data files `data-NNNNNN.dat` (each at most file_bytes) as 4 KiB-aligned
// extents. Space is first-fit from coalesced free lists, else appended; the sum of the data
// files' sizes never exceeds the cap (Allocate fails with kResourceExhausted instead, and the
// caller evicts). Freed space at a file's tail is truncated away. After a crash nothing on disk is
// trusted: Open() learns the files, the owner marks every extent its catalog names (MarkUsed),
// and FinishRecovery() frees everything else (writes that never committed) and trims the files.
// Extents are only freed after the catalog commit that stopped naming them and after the last
// reader released them, so a write never lands on space a committed catalog still names.
// A data file the Env refuses to open (a symlink, not a regular file, another user's) is left
// untouched: its chunks are missing to recovery, and its number is never reused.
// Disk full: a write that fails for want of space (kResourceExhausted from the Env) is remembered,
// also across runs (an empty marker file `disk-full` in the directory, which needs no data
// block); until the filesystem shows room again (Env::FreeSpace), Allocate refuses to grow the
// files with a "disk full" kIOError instead of repeating the failing write. Holes inside the files
// are still reused meanwhile. A new data file is followed by an fsync of the directory.
// Internally synchronized; File pointers stay valid for the object's lifetime.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "store/env.h"

namespace impress::store {

struct Extent {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class ExtentFiles {
 public:
  // read_only: the files are opened for reading only, none is created, and FinishRecovery
  // neither trims nor removes any (a store in a directory it cannot write).
  static Result<std::unique_ptr<ExtentFiles>> Open(Env* env, const std::string& dir, uint64_t file_bytes,
                                                   uint64_t cap_bytes, bool read_only = false);

  Status MarkUsed(const Extent& e);  // recovery only; kCorruption when out of bounds or overlapping
  void ForgetUsed(const Extent& e);  // recovery only: undo a MarkUsed (the chunk was dropped)
  Status FinishRecovery();

  Result<Extent> Allocate(uint64_t length);
  void Free(const Extent& e);
  Status Write(const Extent& e, const void* buf);  // e.length bytes from an aligned buffer
  Status Sync(uint32_t file_id);
  bool disk_full() const;  // a write failed for want of space and no room showed since

  File* file(uint32_t file_id);  // nullptr when unknown
  bool all_direct() const;
  uint64_t disk_bytes() const;         // sum of data file sizes
  uint64_t free_bytes_inside() const;  // holes inside the files
  uint64_t cap() const;
  void SetCap(uint64_t cap);

 private:
  struct DataFile {
    std::unique_ptr<File> file;
    uint64_t end = 0;                   // file size we maintain
    std::map<uint64_t, uint64_t> free;  // offset -> length, coalesced, all below end
    std::map<uint64_t, uint64_t> used;  // recovery only
  };
  ExtentFiles(Env* env, std::string dir, uint64_t file_bytes, uint64_t cap, bool read_only) :
      env_(env), dir_(std::move(dir)), file_bytes_(file_bytes), read_only_(read_only), cap_(cap) {}
  std::string PathOf(uint32_t id) const;
  Result<DataFile*> GetOrCreateLocked(uint32_t id) REQUIRES(mu_);
  void FreeLocked(const Extent& e) REQUIRES(mu_);
  uint64_t TotalLocked() const REQUIRES(mu_);
  Status CheckRoomLocked(uint64_t length) REQUIRES(mu_);
  void NoteWriteFailure(const Status& s) EXCLUDES(mu_);

  // Constant after construction.
  Env* const env_;
  const std::string dir_;
  const uint64_t file_bytes_;
  const bool read_only_;

  mutable Mutex mu_;
  uint64_t cap_ GUARDED_BY(mu_);
  std::map<uint32_t, std::unique_ptr<DataFile>> files_ GUARDED_BY(mu_);  // a DataFile's fields too
  uint32_t max_refused_id_ GUARDED_BY(mu_) = 0;  // highest data file number the Env refused (0: none)
  bool disk_full_ GUARDED_BY(mu_) = false;       // see the disk-full note above
};

}  // namespace impress::store
