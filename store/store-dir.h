// The store directory's own bookkeeping, apart from the data files (store/extent-files.h) and
// the catalog's contents (store/catalog.h): creating the directory private to its owner, the
// LOCK file that keeps a second process out, private file modes for the catalog, and moving an
// unreadable catalog aside.
//
// These are POSIX calls made directly, not through Env: locking, renaming and modes are not the
// data path that tests break with injected faults, and Env has no notion of them.
//
// Thread contract: free functions are stateless and safe from any thread. A StoreLock is owned
// by one PrefixStore and is not shared.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"

namespace impress::store {

// Creates `dir` and any missing parent with mode 0700 (minus the umask); existing directories
// are left as they are (a directory the user chose keeps the modes the user gave it).
Status MakePrivateDir(const std::string& dir);

// Creates `path` if missing with mode 0600 (minus the umask), and takes group and other bits
// away from an existing one (a file an older build created 0644). Refuses a symlink or a
// non-regular file. SQLite gives its -wal and -shm files the main file's mode, so calling this
// on the catalog before SQLite opens it keeps all three private; their bits are tightened too
// when they already exist.
Status MakePrivateFile(const std::string& path);

// Renames `path` (and its -wal / -shm companions when present) to
// `path`.unreadable-YYYYMMDD-HHMMSS[-N]: kept for inspection, never deleted. Returns the new name.
Result<std::string> MoveAside(const std::string& path);

// An exclusive advisory lock on DIR/LOCK (flock): held from Acquire until destruction, and
// released by the kernel when the process dies, so a SIGKILLed holder never blocks the next
// open. The holder writes its pid and program name into the file; a refused Acquire reads them
// for its message. The lock belongs to the open file description: two StoreLocks of one process
// on one directory exclude each other too.
class StoreLock {
 public:
  // A LOCK file that cannot be opened for writing (read-only directory) is locked read-only and
  // gets no pid. kIOError naming the holder ("in use by process 1234 (impress)") when another open still
  // holds it after `wait` (0: at once), so short-lived programs on one store can take turns.
  static Result<std::unique_ptr<StoreLock>> Acquire(const std::string& dir,
                                                    std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  StoreLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace impress::store
