// Private files of the chat layer: see private-file.h.
#include "chat/private-file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace impress {

namespace {

Status SystemError(const std::string& path, const char* what) {
  return Status::IOError(path + ": " + what + ": " + std::strerror(errno));
}

// Creates the missing folders of `dir` (outermost first) with mode 0700; existing ones are
// left as they are (they may be shared, such as $HOME/.local/share).
Status MakePrivateDirs(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> missing;
  for (std::filesystem::path d = dir; !d.empty(); d = d.parent_path()) {
    struct stat st {};
    if (::stat(d.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(d.string() + ": not a folder");
      break;
    }
    if (errno != ENOENT) return SystemError(d.string(), "cannot stat");
    missing.push_back(d);
    if (d == d.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) return SystemError(it->string(), "cannot create folder");
  }
  return Status::Ok();
}

}  // namespace

Status PreparePrivateFile(const std::string& path) {
  if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return Status::Ok();  // SQLite's own names
  const std::filesystem::path p(path);
  if (p.has_parent_path()) IMPRESS_RETURN_IF_ERROR(MakePrivateDirs(p.parent_path()));
  // O_NONBLOCK: a FIFO at `path` is refused below instead of blocking the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return SystemError(path, "cannot open");
  struct stat st {};
  Status result = Status::Ok();
  if (::fstat(fd, &st) != 0) {
    result = SystemError(path, "cannot stat");
  } else if (!S_ISREG(st.st_mode)) {
    result = Status::InvalidArgument(path + ": not a regular file");
  }
  ::close(fd);
  return result;
}

Status RestrictToOwner(const std::string& path) {
  if (path.empty() || path == ":memory:" || path.rfind("file:", 0) == 0) return Status::Ok();
  for (const std::string& p : {path, path + "-wal", path + "-shm", path + "-journal"}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;  // absent: SQLite makes it with the main file's mode
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) == 0 || st.st_uid != ::geteuid()) continue;
    if (::chmod(p.c_str(), st.st_mode & 0700) != 0) return SystemError(p, "cannot make private");
  }
  return Status::Ok();
}

}  // namespace impress
