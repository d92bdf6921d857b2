// Remembered model fingerprints: hashing a 1 GB model file costs ~0.2-0.4 s at every start, so
// the digest of a file is kept with the file's identity as the filesystem tells it (device,
// inode, size, modification and change times in ns). Any write to the file changes its
// modification or change time, and the change time cannot be set from user space; a file whose
// identity differs is hashed again. The cache is a small text file, rewritten whole by rename,
// best effort: an unreadable or damaged cache is a miss, a failed write is ignored.
// Thread contract: pure functions over the file system; concurrent writers (two processes) leave
// one complete file, the last one's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace impress {

struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of the open file `fd`; nullopt when fstat fails.
std::optional<FileIdentity> IdentityOf(int fd);

// The cache's default place: $IMPRESS_FINGERPRINT_CACHE if set (empty: no cache), else
// $XDG_CACHE_HOME/impress/fingerprints, else $HOME/.cache/impress/fingerprints ("" without HOME).
std::string DefaultFingerprintCache();

// The digest remembered for a file of this identity, if any.
std::optional<std::string> LookupFingerprint(const std::string& cache_file, const FileIdentity& id);
// Remembers it (keeping the most recent kMaxFingerprints entries), unless the file changed less
// than kSettleNs before `now_ns` (default: the real time): file times have a coarse clock (a few
// ms), so two writes in quick succession could leave one identity for two contents; a file that
// has settled cannot be rewritten within its old identity any more.
void RememberFingerprint(const std::string& cache_file, const FileIdentity& id, const std::string& digest,
                         int64_t now_ns = -1);

inline constexpr int64_t kSettleNs = 2'000'000'000;

inline constexpr size_t kMaxFingerprints = 64;

}  // namespace impress
