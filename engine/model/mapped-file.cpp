// MappedFile: see mapped-file.h.
#include "engine/model/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/model/model.h"
#include "engine/model/sigbus-guard.h"

namespace impress {

namespace {

int64_t MtimeNs(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec; }

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

Result<int> OpenRegularFile(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file (" + FileTypeName(st.st_mode) + ")");
  }
  *size = uint64_t(st.st_size);
  return fd;
}

Result<MappedFile> MappedFile::Open(const std::string& path, const char* what) {
  uint64_t file_size = 0;
  IMPRESS_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &file_size));
  if (file_size == 0) {
    ::close(fd);
    return Status::Corruption(path + ": empty file, not a " + what);
  }
  void* p = ::mmap(nullptr, size_t(file_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  if (p == MAP_FAILED) {
    ::close(fd);
    return Status::IOError(path + ": mmap failed: " + std::strerror(map_err));
  }
  struct stat st;
  const bool stat_ok = ::fstat(fd, &st) == 0;
  MappedFile f;  // owns the mapping and the descriptor from here on
  f.data_ = static_cast<const uint8_t*>(p);
  f.size_ = file_size;
  f.mapped_ = true;
  f.fd_ = fd;
  f.path_ = path;
  f.mtime_ns_ = stat_ok ? MtimeNs(st) : 0;
  if (!stat_ok || uint64_t(st.st_size) != file_size) {
    return Status::IOError(path + ": the file changed while it was being opened; try again");
  }
  f.guard_slot_ = sigbus_guard::Register(p, size_t(file_size));
  return f;
}

MappedFile MappedFile::Borrow(const void* data, uint64_t size) {
  MappedFile f;
  f.data_ = static_cast<const uint8_t*>(data);
  f.size_ = size;
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept :
    data_(std::exchange(o.data_, nullptr)),
    size_(std::exchange(o.size_, 0)),
    mapped_(std::exchange(o.mapped_, false)),
    fd_(std::exchange(o.fd_, -1)),
    guard_slot_(std::exchange(o.guard_slot_, -1)),
    mtime_ns_(std::exchange(o.mtime_ns_, 0)),
    path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, false);
    fd_ = std::exchange(o.fd_, -1);
    guard_slot_ = std::exchange(o.guard_slot_, -1);
    mtime_ns_ = std::exchange(o.mtime_ns_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void MappedFile::Reset() {
  // Unguarded before unmapped: a fault at these addresses after munmap belongs to whatever is
  // mapped there next, never to this file.
  sigbus_guard::Unregister(guard_slot_);
  if (mapped_ && data_ && size_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
  fd_ = -1;
  guard_slot_ = -1;
  mtime_ns_ = 0;
  path_.clear();
}

bool MappedFile::poisoned() const { return sigbus_guard::Poisoned(guard_slot_); }

Status MappedFile::CheckUnchanged() const {
  if (!mapped_) return Status::Ok();
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Status::IOError(path_ + ": cannot stat: " + std::strerror(errno));
  const uint64_t now = uint64_t(st.st_size);
  if (!poisoned() && now == size_ && MtimeNs(st) == mtime_ns_) return Status::Ok();
  return Status::DataLoss(path_ + ": the model file changed on disk while in use (it is now " + std::to_string(now) +
                          " bytes, was " + std::to_string(size_) + (now == size_ ? ", rewritten in place" : "") +
                          "); load it again");
}

void MappedFile::DiscardPages(const uint8_t* p, uint64_t n) const {
  if (!mapped_ || p < data_ || n > size_ || uint64_t(p - data_) > size_ - n) return;
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::Populate() const {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14; older kernels refuse it (EINVAL), harmlessly
#endif
  if (mapped_) (void)::madvise(const_cast<uint8_t*>(data_), size_t(size_), MADV_POPULATE_READ);
}

Status CheckModelFiles(const Model& model) {
  for (const MappedFile* f : model.mapped_files) IMPRESS_RETURN_IF_ERROR(f->CheckUnchanged());
  return Status::Ok();
}

}  // namespace impress
