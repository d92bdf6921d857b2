// MappedFile: see mapped-file.h.
#include "engine/model/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace impress {

namespace {

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
  ::close(fd);
  if (p == MAP_FAILED) return Status::IOError(path + ": mmap failed: " + std::strerror(map_err));
  MappedFile f;
  f.data_ = static_cast<const uint8_t*>(p);
  f.size_ = file_size;
  f.mapped_ = true;
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
    mapped_(std::exchange(o.mapped_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, false);
  }
  return *this;
}

void MappedFile::Reset() {
  if (mapped_ && data_ && size_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

void MappedFile::DiscardPages(const uint8_t* p, uint64_t n) const {
  if (!mapped_ || p < data_ || n > size_ || uint64_t(p - data_) > size_ - n) return;
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace impress
