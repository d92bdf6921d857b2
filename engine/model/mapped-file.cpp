#include "engine/model/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace impress {

Result<MappedFile> MappedFile::Open(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
    return Status::InvalidArgument(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return Status::Corruption(path + ": empty file, not a " + what);
  }
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::IOError(path + ": mmap failed: " + std::strerror(map_err));
  MappedFile f;
  f.data_ = static_cast<const uint8_t*>(p);
  f.size_ = uint64_t(st.st_size);
  return f;
}

void MappedFile::Unmap(const uint8_t* data, uint64_t size) {
  if (data && size) ::munmap(const_cast<uint8_t*>(data), size);
}

void MappedFile::DiscardPages(const uint8_t* p, uint64_t n) {
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace impress
