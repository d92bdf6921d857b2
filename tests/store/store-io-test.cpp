// The store's file handling against a hostile or full disk: data files swapped for symlinks are
// refused and their targets left byte-identical; data files are private (0600); a disk-full write
// is remembered, in this run and the next, and not repeated until the filesystem shows room; a
// new data file is followed by an fsync of its directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "store/env.h"
#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 2, kHeads = 2, kDim = 16;

PrefixStoreOptions Options(const std::string& dir, Env* env = nullptr) {
  PrefixStoreOptions o = TestOptions(dir, "model-io", kLayers, kHeads, kDim, {0}, 16);
  o.data_file_bytes = 1ull << 30;  // the store's default size
  if (env) o.env = env;
  return o;
}

std::vector<int32_t> Tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 30000);
  return t;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Prints the read engine the store used, for the test log.
void RecordEngine(PrefixStore& s) {
  ::testing::Test::RecordProperty("io_engine", s.Stats().io_engine);
  std::printf("[io engine] %s\n", s.Stats().io_engine.c_str());
}

TEST(StoreIo, DataFilesArePrivate) {
  std::string dir = TempDir("private");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(1);
  {
    auto st = PrefixStore::Open(Options(dir + "/s"));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    RecordEngine(**st);
    ASSERT_TRUE(kv.Insert(**st, Tokens(rng, 100), 0).ok());
  }
  const std::string data = dir + "/s/data-000001.dat";
  struct stat sb;
  ASSERT_EQ(::stat(data.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u) << std::oct << (sb.st_mode & 0777);
  std::filesystem::remove_all(dir);
}

TEST(StoreIo, EnvRefusesSymlinksAndNonRegularFiles) {
  std::string dir = TempDir("nofollow");
  const std::string victim = dir + "/victim", link = dir + "/link", fifo = dir + "/fifo";
  { std::ofstream(victim) << "precious"; }
  std::filesystem::create_symlink(victim, link);
  auto f = Env::Default()->OpenFile(link, OpenOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("symbolic link"), std::string::npos) << f.status().ToString();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto g = Env::Default()->OpenFile(fifo, OpenOptions{});  // must not block either
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("not a regular file"), std::string::npos) << g.status().ToString();
  EXPECT_EQ(ReadAll(victim), "precious");
  std::filesystem::remove_all(dir);
}

// A data file replaced by a symlink to another file: the store opens, drops the chunks it held
// (the prefix is simply not cached), never touches the target, and new writes go elsewhere.
TEST(StoreIo, DataFileReplacedBySymlinkIsRefusedAndTargetUntouched) {
  std::string dir = TempDir("symlink");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(2);
  auto a = Tokens(rng, 150), b = Tokens(rng, 150);
  const std::string sdir = dir + "/s", data = sdir + "/data-000001.dat", victim = dir + "/victim.bin";
  {
    auto st = PrefixStore::Open(Options(sdir));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_TRUE(kv.Insert(**st, a, 0).ok());
  }
  std::string content(3 << 20, '\0');  // bigger than the data file: a truncation would show
  for (auto& c : content) c = char(rng());
  { std::ofstream(victim, std::ios::binary) << content; }
  ASSERT_TRUE(std::filesystem::remove(data));
  std::filesystem::create_symlink(victim, data);

  auto st = PrefixStore::Open(Options(sdir));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  RecordEngine(**st);
  EXPECT_EQ((*st)->Match(a).n_matched, 0u) << "chunks in the refused file must not be served";
  ASSERT_TRUE(kv.Insert(**st, b, 0).ok());
  MatchHandle h = (*st)->Match(b);
  EXPECT_EQ(h.n_matched, b.size());
  auto r = (*st)->Wait(*(*st)->SubmitReadAllKeys(h, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint32_t> all(b.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  EXPECT_TRUE(kv.Check(b, 1, all, *r, true, false));
  ASSERT_TRUE((*st)->Release(h).ok());
  EXPECT_TRUE((*st)->CheckConsistency().ok());
  st->reset();
  EXPECT_TRUE(std::filesystem::is_symlink(data));
  EXPECT_TRUE(ReadAll(victim) == content) << "the symlink's target changed";
  std::filesystem::remove_all(dir);
}

// Env with a scripted filesystem: writes fail with ENOSPC while `full`, FreeSpace reports
// `free_bytes`, and it counts data-file writes and directory fsyncs.
class FullDiskEnv : public EnvWrapper {
 public:
  FullDiskEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<bool> full{false};
  std::atomic<uint64_t> free_bytes{1ull << 40};
  std::atomic<int> n_writes{0}, n_dir_syncs{0};
  class F : public FileWrapper {
   public:
    F(std::unique_ptr<File> f, FullDiskEnv* e) : FileWrapper(std::move(f)), env_(e) {}
    Status WriteAt(uint64_t off, const void* buf, size_t n) override {
      ++env_->n_writes;
      if (env_->full) return Status::ResourceExhausted("write " + path() + ": No space left on device (disk full)");
      return f_->WriteAt(off, buf, n);
    }

   private:
    FullDiskEnv* env_;
  };
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, const OpenOptions& o) override {
    auto f = target()->OpenFile(p, o);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new F(std::move(*f), this));
  }
  Result<uint64_t> FreeSpace(const std::string&) override { return free_bytes.load(); }
  Status SyncDir(const std::string& d) override {
    ++n_dir_syncs;
    return target()->SyncDir(d);
  }
};

TEST(StoreIo, NewDataFileIsFollowedByADirectoryFsync) {
  std::string dir = TempDir("dirsync");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(3);
  FullDiskEnv env;
  auto st = PrefixStore::Open(Options(dir + "/s", &env));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const int before = env.n_dir_syncs;
  ASSERT_TRUE(kv.Insert(**st, Tokens(rng, 100), 0).ok());
  EXPECT_GT(env.n_dir_syncs, before) << "data-000001.dat was created without an fsync of its directory";
  std::filesystem::remove_all(dir);
}

// ENOSPC once: later inserts (in this run and after a reopen) do not write at all while the
// filesystem shows no room; once it shows room, writing resumes and the data is readable.
TEST(StoreIo, DiskFullIsRememberedUntilSpaceReturns) {
  std::string dir = TempDir("enospc");
  SyntheticKV kv{kLayers, kHeads, kDim};
  std::mt19937 rng(4);
  FullDiskEnv env;
  const std::string sdir = dir + "/s";
  auto a = Tokens(rng, 120), b = Tokens(rng, 120), c = Tokens(rng, 120);
  {
    auto st = PrefixStore::Open(Options(sdir, &env));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    RecordEngine(**st);
    ASSERT_TRUE(kv.Insert(**st, a, 0).ok());
    env.full = true;
    env.free_bytes = 0;
    auto r = kv.Insert(**st, b, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("disk full"), std::string::npos) << r.status().ToString();
    EXPECT_TRUE(std::filesystem::exists(sdir + "/disk-full"));
    const int writes = env.n_writes;
    for (int i = 0; i < 3; ++i) {
      auto again = kv.Insert(**st, b, 0);
      ASSERT_FALSE(again.ok());
      EXPECT_NE(again.status().message().find("not retried until space returns"), std::string::npos)
          << again.status().ToString();
    }
    EXPECT_EQ(env.n_writes, writes) << "the failing write was repeated while the disk showed no room";
    EXPECT_EQ((*st)->Match(a).n_matched, a.size());  // reads go on
  }
  {
    // The next run remembers: no write attempt while the filesystem still shows no room.
    const int writes = env.n_writes;
    auto st = PrefixStore::Open(Options(sdir, &env));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_FALSE(kv.Insert(**st, c, 0).ok());
    EXPECT_EQ(env.n_writes, writes) << "a new run repeated the disk-full write";
    // Space returns: the write is retried and succeeds; the marker goes.
    env.full = false;
    env.free_bytes = 1ull << 30;
    ASSERT_TRUE(kv.Insert(**st, c, 0).ok());
    EXPECT_GT(env.n_writes, writes);
    EXPECT_FALSE(std::filesystem::exists(sdir + "/disk-full"));
    MatchHandle h = (*st)->Match(c);
    EXPECT_EQ(h.n_matched, c.size());
    auto r = (*st)->Wait(*(*st)->SubmitReadAllKeys(h, 0));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<uint32_t> all(c.size());
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    EXPECT_TRUE(kv.Check(c, 0, all, *r, true, false));
    ASSERT_TRUE((*st)->Release(h).ok());
    EXPECT_EQ((*st)->Match(a).n_matched, a.size());
    EXPECT_TRUE((*st)->CheckConsistency().ok());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
