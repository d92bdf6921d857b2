#include "store/store-dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

namespace impress::store {

namespace {

Status Errno(const std::string& what, const std::string& path, int err) {
  return Status::IOError(what + " " + path + ": " + std::strerror(err));
}

// Takes group and other bits away; never adds any (a stricter mode the user set stays).
Status TightenMode(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd, st.st_mode & 0700) != 0) return Errno("chmod", path, errno);
  return Status::Ok();
}

Status TightenIfPresent(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT ? Status::Ok() : Errno("open", path, errno);
  Status s = TightenMode(fd, path);
  ::close(fd);
  return s;
}

}  // namespace

Status MakePrivateDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("store: no directory given");
  // Each prefix in turn, like mkdir -p, but 0700 for every directory made here.
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = at == std::string::npos ? dir : dir.substr(0, at);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir", part, errno);
    if (at == std::string::npos) break;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno("stat", dir, errno);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("store: " + dir + " is not a directory");
  return Status::Ok();
}

Status MakePrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return Errno("open", path, errno);
  Status s = TightenMode(fd, path);
  ::close(fd);
  IMPRESS_RETURN_IF_ERROR(s);
  IMPRESS_RETURN_IF_ERROR(TightenIfPresent(path + "-wal"));
  return TightenIfPresent(path + "-shm");
}

Result<std::string> MoveAside(const std::string& path) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::string to = path + ".unreadable-" + stamp;
  struct stat st;
  for (int n = 1; ::lstat(to.c_str(), &st) == 0; ++n) to = path + ".unreadable-" + stamp + "-" + std::to_string(n);
  if (::rename(path.c_str(), to.c_str()) != 0) return Errno("rename", path, errno);
  for (const char* tail : {"-wal", "-shm"}) {
    const std::string from = path + tail;
    if (::rename(from.c_str(), (to + tail).c_str()) != 0 && errno != ENOENT) return Errno("rename", from, errno);
  }
  return to;
}

Result<std::unique_ptr<StoreLock>> StoreLock::Acquire(const std::string& dir, std::chrono::milliseconds wait) {
  const std::string path = dir + "/LOCK";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  // A directory the user cannot write (read-only filesystem or mode): flock works on a file
  // opened for reading, so a reader still keeps writers out while it reads.
  const bool writable = fd >= 0;
  if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
    fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Errno("open", path, errno);
  std::unique_ptr<StoreLock> lock(new StoreLock(fd, path));
  if (writable) IMPRESS_RETURN_IF_ERROR(TightenMode(fd, path));
  // flock has no timeout: poll, backing off from 2 to 50 ms, until the holder lets go or `wait` ends.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto pause = std::chrono::milliseconds(2);
  int err = 0;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    err = errno;
    const auto now = std::chrono::steady_clock::now();
    if (err != EWOULDBLOCK || now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    err = 0;
  }
  if (err != 0) {
    if (err != EWOULDBLOCK) return Errno("lock", path, err);
    // The holder wrote "pid\nprogram\n" after locking; it may be mid-write, so read what is there.
    char buf[256] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string who;
    if (n > 0) {
      std::string text(buf, size_t(n));
      const size_t nl = text.find('\n');
      const std::string pid = text.substr(0, nl);
      std::string prog = nl == std::string::npos ? "" : text.substr(nl + 1);
      prog = prog.substr(0, prog.find('\n'));
      if (!pid.empty()) who = " by process " + pid + (prog.empty() ? "" : " (" + prog + ")");
    }
    return Status::IOError("store " + dir + " is in use" + (who.empty() ? " by another process" : who) +
                           "; close that program or use another --store directory");
  }
  if (!writable) return lock;
  const std::string me = std::to_string(::getpid()) + "\n" + program_invocation_short_name + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    return Errno("write", path, errno);
  return lock;
}

StoreLock::~StoreLock() {
  // The pid is left in the file: a reader only trusts it while the lock is held.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace impress::store
