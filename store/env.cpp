#include "store/env.h"

#include "base/host-alloc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace impress::store {

namespace {

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(m + " (disk full)");
  if (err == ENOENT) return Status::NotFound(m);
  return Status::IOError(m);
}

// ELOOP from O_NOFOLLOW means the last path component is a symlink.
Status OpenError(const std::string& path, int err) {
  if (err == ELOOP) return Status::InvalidArgument("store file " + path + " is a symbolic link; refusing to follow it");
  return ErrnoStatus("open", path, err);
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path, bool direct) : fd_(fd), path_(std::move(path)), direct_(direct) {}
  ~PosixFile() override { ::close(fd_); }

  Status ReadAt(uint64_t off, void* buf, size_t n, size_t* n_read) override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, static_cast<uint8_t*>(buf) + done, n - done, off_t(off + done));
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return ErrnoStatus("read", path_, errno);
      }
      if (r == 0) break;
      done += size_t(r);
    }
    *n_read = done;
    return Status::Ok();
  }
  Status WriteAt(uint64_t off, const void* buf, size_t n) override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pwrite(fd_, static_cast<const uint8_t*>(buf) + done, n - done, off_t(off + done));
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return ErrnoStatus("write", path_, errno);
      }
      if (r == 0) return Status::IOError("write " + path_ + ": wrote nothing");
      done += size_t(r);
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fsync", path_, errno);
    return Status::Ok();
  }
  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, off_t(size)) != 0) return ErrnoStatus("truncate", path_, errno);
    return Status::Ok();
  }
  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("stat", path_, errno);
    return uint64_t(st.st_size);
  }
  int fd() const override { return fd_; }
  bool direct() const override { return direct_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  std::string path_;
  bool direct_;
};

class PosixEnv final : public Env {
 public:
  // O_NOFOLLOW and the fstat check: a data file swapped for a symlink (or a device, a FIFO, a file
  // of another user) is refused before the store reads, writes or truncates through it. New files
  // are 0600: the KV decodes to the user's documents and prompts.
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& opt) override {
    const int flags =
        (opt.read_only ? O_RDONLY : O_RDWR | (opt.create ? O_CREAT : 0)) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    bool direct = false;
    int fd = -1;
    if (opt.direct) {
      fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
      if (fd >= 0) direct = true;
      else if (errno != EINVAL) return OpenError(path, errno);  // EINVAL: no O_DIRECT here
    }
    if (fd < 0) fd = ::open(path.c_str(), flags, 0600);
    if (fd < 0) return OpenError(path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("stat", path, err);
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      ::close(fd);
      return Status::InvalidArgument("store file " + path +
                                     (S_ISREG(st.st_mode) ? " belongs to another user" : " is not a regular file") +
                                     "; refusing to use it");
    }
    // O_NONBLOCK only kept a FIFO from blocking the open; regular files ignore it, but clear it anyway.
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return std::unique_ptr<File>(new PosixFile(fd, path, direct));
  }
  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", path, errno);
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", path, errno);
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return ErrnoStatus("opendir", path, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    return names;
  }
  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    return uint64_t(st.st_size);
  }
  Result<uint64_t> FreeSpace(const std::string& dir) override {
    struct statvfs vfs;
    if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoStatus("statvfs", dir, errno);
    return uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);  // what an unprivileged writer may use
  }
  Result<bool> CanWrite(const std::string& dir, std::string* why) override {
    if (::access(dir.c_str(), W_OK) == 0) return true;
    const int err = errno;
    if (err != EACCES && err != EROFS && err != EPERM) return ErrnoStatus("access", dir, err);
    if (why) *why = std::strerror(err);
    return false;
  }
  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", dir, errno);
    const int r = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (r != 0) return ErrnoStatus("fsync", dir, err);
    return Status::Ok();
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv env;
  return &env;
}

AlignedBuffer::AlignedBuffer(size_t n, bool zero) : n_(n) {
  if (n == 0) return;
  // A large buffer in huge pages: pinning it for the disk faults its pages in on the ring's
  // thread, once per 2 MiB instead of per 4 KiB (base/host-alloc.h).
  p_ = static_cast<uint8_t*>(AllocHostBuffer(AlignUp(n), kIoAlign));
  if (!p_) n_ = 0;
  else if (zero) std::memset(p_, 0, AlignUp(n));
}
AlignedBuffer::~AlignedBuffer() { std::free(p_); }
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

}  // namespace impress::store
