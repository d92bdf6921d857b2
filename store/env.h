// Env: every file access of the store goes through this interface (LevelDB's Env), so tests can
// inject faults (ENOSPC, failed fsync, short reads) without touching the code under test.
//
// Env::Default() is the POSIX implementation. Its OpenFile never follows a symlink and accepts
// only regular files owned by the calling user (anything else: kInvalidArgument naming the path);
// files it creates are 0600 and directories 0700 (a stricter umask still applies). It is stateless and safe from any
// thread. A File is safe for concurrent ReadAt/WriteAt at disjoint ranges (pread/pwrite semantics); Sync and Truncate
// may run concurrently with them. EnvWrapper forwards everything to a target Env, so a test overrides only what it
// wants to break.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress::store {

class File {
 public:
  virtual ~File() = default;
  // Reads up to n bytes at off; *n_read < n only at end of file. EINTR is retried.
  virtual Status ReadAt(uint64_t off, void* buf, size_t n, size_t* n_read) = 0;
  // Writes all n bytes at off or fails (ENOSPC -> kResourceExhausted with the path).
  virtual Status WriteAt(uint64_t off, const void* buf, size_t n) = 0;
  virtual Status Sync() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() = 0;
  // The OS descriptor for io_uring, or -1 when the file is not backed by one.
  virtual int fd() const = 0;
  // True when opened with O_DIRECT: offsets, lengths and buffers must be 4 KiB-aligned.
  virtual bool direct() const = 0;
  virtual const std::string& path() const = 0;
};

struct OpenOptions {
  bool create = true;
  bool direct = true;      // try O_DIRECT; silently buffered when the filesystem refuses (see direct())
  bool read_only = false;  // open for reading only (never creates): a store that cannot write
};

class Env {
 public:
  virtual ~Env() = default;
  static Env* Default();

  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& opt) = 0;
  virtual Status CreateDir(const std::string& path) = 0;  // ok if it exists
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;  // names only
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;                 // kNotFound if absent
  // Bytes an unprivileged writer may still use on the filesystem of `dir` (statvfs f_bavail).
  virtual Result<uint64_t> FreeSpace(const std::string& dir) = 0;
  // fsync of a directory: makes the files created in it survive a crash.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Whether the calling user may create and remove files in `dir`: false (with the reason in
  // *why) on a read-only filesystem or a directory without write permission for the user.
  virtual Result<bool> CanWrite(const std::string& dir, std::string* why) = 0;
};

class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, const OpenOptions& o) override {
    return target_->OpenFile(p, o);
  }
  Status CreateDir(const std::string& p) override { return target_->CreateDir(p); }
  Status RemoveFile(const std::string& p) override { return target_->RemoveFile(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return target_->ListDir(p); }
  Result<uint64_t> FileSize(const std::string& p) override { return target_->FileSize(p); }
  Result<uint64_t> FreeSpace(const std::string& d) override { return target_->FreeSpace(d); }
  Status SyncDir(const std::string& d) override { return target_->SyncDir(d); }
  Result<bool> CanWrite(const std::string& d, std::string* why) override { return target_->CanWrite(d, why); }
  Env* target() const { return target_; }

 private:
  Env* target_;
};

// A File that forwards to another; override the calls to break.
class FileWrapper : public File {
 public:
  explicit FileWrapper(std::unique_ptr<File> f) : f_(std::move(f)) {}
  Status ReadAt(uint64_t off, void* buf, size_t n, size_t* n_read) override { return f_->ReadAt(off, buf, n, n_read); }
  Status WriteAt(uint64_t off, const void* buf, size_t n) override { return f_->WriteAt(off, buf, n); }
  Status Sync() override { return f_->Sync(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Result<uint64_t> Size() override { return f_->Size(); }
  int fd() const override { return f_->fd(); }
  bool direct() const override { return f_->direct(); }
  const std::string& path() const override { return f_->path(); }

 protected:
  std::unique_ptr<File> f_;
};

// Aligned heap buffer for O_DIRECT I/O (4 KiB alignment; 2 MiB and advised for huge pages from
// kHugePageMin bytes on), zero-filled unless asked not to be.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n, bool zero = true);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

constexpr size_t kIoAlign = 4096;
inline uint64_t AlignUp(uint64_t x, uint64_t a = kIoAlign) { return (x + a - 1) / a * a; }

}  // namespace impress::store
