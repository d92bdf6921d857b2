#include "engine/model/fingerprint-cache.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace impress {

namespace {

constexpr const char* kHeader = "# impress model fingerprints v1: digest dev ino size mtime_ns ctime_ns";

struct Entry {
  std::string digest;
  FileIdentity id;
};

std::vector<Entry> ReadEntries(const std::string& cache_file) {
  std::vector<Entry> out;
  std::ifstream in(cache_file);
  std::string line;
  if (!in || !std::getline(in, line) || line != kHeader) return out;
  while (std::getline(in, line) && out.size() < kMaxFingerprints) {
    std::istringstream ls(line);
    Entry e;
    if (!(ls >> e.digest >> e.id.dev >> e.id.ino >> e.id.size >> e.id.mtime_ns >> e.id.ctime_ns)) continue;
    if (e.digest.size() != 32 || e.digest.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::optional<FileIdentity> IdentityOf(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::nullopt;
  FileIdentity id;
  id.dev = uint64_t(st.st_dev);
  id.ino = uint64_t(st.st_ino);
  id.size = uint64_t(st.st_size);
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

std::string DefaultFingerprintCache() {
  if (const char* e = std::getenv("IMPRESS_FINGERPRINT_CACHE")) return e;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/impress/fingerprints";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/impress/fingerprints";
  return "";
}

std::optional<std::string> LookupFingerprint(const std::string& cache_file, const FileIdentity& id) {
  if (cache_file.empty()) return std::nullopt;
  for (const Entry& e : ReadEntries(cache_file))
    if (e.id == id) return e.digest;
  return std::nullopt;
}

void RememberFingerprint(const std::string& cache_file, const FileIdentity& id, const std::string& digest,
                         int64_t now_ns) {
  if (cache_file.empty()) return;
  if (now_ns < 0) {
    struct timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    now_ns = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  if (now_ns - std::max(id.mtime_ns, id.ctime_ns) < kSettleNs) return;
  std::vector<Entry> entries = ReadEntries(cache_file);
  std::erase_if(entries, [&](const Entry& e) { return e.id == id; });
  entries.insert(entries.begin(), Entry{digest, id});
  if (entries.size() > kMaxFingerprints) entries.resize(kMaxFingerprints);
  std::error_code ec;
  const std::filesystem::path path(cache_file);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const std::string tmp = fmt::format("{}.{}.tmp", cache_file, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << kHeader << "\n";
    for (const Entry& e : entries)
      out << fmt::format("{} {} {} {} {} {}\n", e.digest, e.id.dev, e.id.ino, e.id.size, e.id.mtime_ns, e.id.ctime_ns);
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, cache_file, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace impress
