// The remembered model fingerprints (engine/model/fingerprint-cache.h): a digest comes back only
// for the very identity it was stored with, never for a file that changed or was too fresh to
// trust, and a damaged cache is a miss.
#include "engine/model/fingerprint-cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/model/model-loader.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

class FingerprintCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("impress-fpcache-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cache_ = (dir_ / "sub" / "fingerprints").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  FileIdentity Sample(uint64_t ino) const {
    return FileIdentity{.dev = 7, .ino = ino, .size = 1000, .mtime_ns = 1'000'000'000, .ctime_ns = 1'000'000'000};
  }
  static constexpr int64_t kLater = 100'000'000'000;  // long after the sample files settled
  static std::string Digest(char c) { return std::string(32, c); }
  fs::path dir_;
  std::string cache_;
};

TEST_F(FingerprintCache, SameIdentityHitsAnyChangeMisses) {
  const FileIdentity id = Sample(1);
  EXPECT_FALSE(LookupFingerprint(cache_, id));
  RememberFingerprint(cache_, id, Digest('a'), kLater);
  ASSERT_EQ(LookupFingerprint(cache_, id), Digest('a'));
  for (int field = 0; field < 5; ++field) {
    FileIdentity other = id;
    if (field == 0) other.dev++;
    if (field == 1) other.ino++;
    if (field == 2) other.size++;
    if (field == 3) other.mtime_ns++;
    if (field == 4) other.ctime_ns++;
    EXPECT_FALSE(LookupFingerprint(cache_, other)) << "field " << field;
  }
  // A new digest for the same identity replaces the old one.
  RememberFingerprint(cache_, id, Digest('b'), kLater);
  EXPECT_EQ(LookupFingerprint(cache_, id), Digest('b'));
}

TEST_F(FingerprintCache, FreshFilesAreNotRemembered) {
  const FileIdentity id = Sample(2);
  RememberFingerprint(cache_, id, Digest('c'), id.ctime_ns + kSettleNs - 1);
  EXPECT_FALSE(LookupFingerprint(cache_, id));
  RememberFingerprint(cache_, id, Digest('c'), id.ctime_ns + kSettleNs);
  EXPECT_EQ(LookupFingerprint(cache_, id), Digest('c'));
}

TEST_F(FingerprintCache, DamagedCacheIsAMissAndIsRewritten) {
  const FileIdentity id = Sample(3);
  RememberFingerprint(cache_, id, Digest('d'), kLater);
  std::ofstream(cache_, std::ios::trunc) << "garbage\n" << Digest('d') << " 7 3 1000 1000000000 1000000000\n";
  EXPECT_FALSE(LookupFingerprint(cache_, id));  // no header: not trusted at all
  RememberFingerprint(cache_, id, Digest('e'), kLater);
  EXPECT_EQ(LookupFingerprint(cache_, id), Digest('e'));
  // A line whose digest is not 32 hex digits is skipped.
  {
    std::ofstream out(cache_, std::ios::app);
    out << "XYZ 7 4 1000 1000000000 1000000000\n";
  }
  EXPECT_FALSE(LookupFingerprint(cache_, Sample(4)));
  EXPECT_EQ(LookupFingerprint(cache_, id), Digest('e'));
}

TEST_F(FingerprintCache, KeepsTheMostRecentEntries) {
  for (uint64_t i = 0; i < kMaxFingerprints + 5; ++i) RememberFingerprint(cache_, Sample(100 + i), Digest('f'), kLater);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_FALSE(LookupFingerprint(cache_, Sample(100 + i))) << i;
  for (uint64_t i = 5; i < kMaxFingerprints + 5; ++i) EXPECT_TRUE(LookupFingerprint(cache_, Sample(100 + i))) << i;
  EXPECT_TRUE(fs::exists(cache_));
  for (const auto& e : fs::directory_iterator(fs::path(cache_).parent_path()))
    EXPECT_EQ(e.path().filename(), "fingerprints") << "no temporary file is left behind";
}

TEST_F(FingerprintCache, IdentityFollowsWrites) {
  const std::string f = (dir_ / "model.bin").string();
  std::ofstream(f) << "first";
  int fd = ::open(f.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const auto a = IdentityOf(fd);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size, 5u);
  std::ofstream(f, std::ios::app) << "!";
  const auto b = IdentityOf(fd);
  ASSERT_TRUE(b);
  EXPECT_NE(*a, *b);  // at least the size moved
  ::close(fd);
  EXPECT_FALSE(IdentityOf(-1));
}

}  // namespace
}  // namespace impress
