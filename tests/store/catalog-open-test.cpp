// Opening the store when the catalog cannot be read right now: another program holding an
// exclusive lock on it (SQLite from the test), an I/O error or a full disk on its reads and writes
// (injected below SQLite, in a VFS that wraps the default one, the catalog's counterpart of the
// store's Env). Each is retried, then reported as an error naming the cause; the catalog is never
// moved aside for it and, once the cause is gone, opens with every prefix intact. Catalogs shown
// damaged are still moved aside (store-safety-test.cpp). A store directory that cannot be written
// (through the Env, and through its mode) serves reads and refuses changes, saying why.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "store/env.h"
#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::SyntheticKV;

constexpr int kLayers = 2, kHeads = 2, kDim = 32;
const SyntheticKV kKV{kLayers, kHeads, kDim};

PrefixStoreOptions Options(const std::string& dir) {
  PrefixStoreOptions o = testing::TestOptions(dir, "catalog-open-model", kLayers, kHeads, kDim, {0}, 16);
  // Short waits: each case fails every try, so this bounds only how long the test runs.
  o.catalog_busy_timeout = std::chrono::milliseconds(20);
  o.catalog_retry_pause = std::chrono::milliseconds(5);
  return o;
}

// A store holding `t`, closed.
std::string StoreWith(const std::string& tag, const std::vector<int32_t>& t) {
  const std::string dir = testing::TempDir(tag);
  auto s = OpenOrDie(Options(dir));
  EXPECT_TRUE(s && kKV.Insert(*s, t, 0).ok());
  return dir;
}

// Files in `dir` whose name says they were moved aside.
int MovedAside(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().find("unreadable") != std::string::npos;
  return n;
}

// After the cause went away: the store opens with nothing repaired and every token of `t` reads
// back exactly.
void ExpectIntact(const std::string& dir, const std::vector<int32_t>& t) {
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->recovery().catalog_moved_to.empty());
  EXPECT_EQ(s->recovery().total(), 0u);
  EXPECT_TRUE(testing::ReadsExact(*s, kKV, t, t.size()));
  EXPECT_EQ(MovedAside(dir), 0);
}

// ---- a VFS that fails the catalog's reads or writes on demand ------------------------------

// What to break, for files whose name contains "catalog.db" (the database, its -wal and -shm):
// the next `reads` page reads of the database file fail with SQLITE_IOERR_READ (-1: all of them;
// the 100-byte header SQLite reads when it opens the file is left alone, so the error comes
// where the catalog is first read, as a failing disk sector would), the
// next `writes` writes of any of them with SQLITE_FULL, the next `shm_maps` mappings of the WAL
// index with SQLITE_IOERR_SHMSIZE (what growing the -shm file gives on a full disk).
struct Faults {
  std::atomic<int> reads{0};
  std::atomic<int> writes{0};
  std::atomic<int> shm_maps{0};
  std::atomic<int> n_failed{0};
};
Faults g_faults;

bool Take(std::atomic<int>& budget) {
  int n = budget.load();
  while (n != 0) {
    if (n < 0) return true;
    if (budget.compare_exchange_weak(n, n - 1)) return true;
  }
  return false;
}

struct ShimFile {
  sqlite3_file base;
  sqlite3_file* real;  // the wrapped VFS's file, allocated right after this struct
  bool catalog;
  bool main_db;
};

sqlite3_vfs* g_real_vfs = nullptr;
sqlite3_vfs g_shim_vfs;
sqlite3_io_methods g_shim_io;

sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<ShimFile*>(f)->real; }

int ShimClose(sqlite3_file* f) { return Real(f)->pMethods->xClose(Real(f)); }
int ShimRead(sqlite3_file* f, void* p, int n, sqlite3_int64 off) {
  auto* s = reinterpret_cast<ShimFile*>(f);
  if (s->catalog && s->main_db && n >= 512 && Take(g_faults.reads)) {
    ++g_faults.n_failed;
    return SQLITE_IOERR_READ;
  }
  return s->real->pMethods->xRead(s->real, p, n, off);
}
int ShimWrite(sqlite3_file* f, const void* p, int n, sqlite3_int64 off) {
  auto* s = reinterpret_cast<ShimFile*>(f);
  if (s->catalog && Take(g_faults.writes)) {
    ++g_faults.n_failed;
    return SQLITE_FULL;
  }
  return s->real->pMethods->xWrite(s->real, p, n, off);
}
int ShimTruncate(sqlite3_file* f, sqlite3_int64 n) { return Real(f)->pMethods->xTruncate(Real(f), n); }
int ShimSync(sqlite3_file* f, int flags) { return Real(f)->pMethods->xSync(Real(f), flags); }
int ShimFileSize(sqlite3_file* f, sqlite3_int64* n) { return Real(f)->pMethods->xFileSize(Real(f), n); }
int ShimLock(sqlite3_file* f, int l) { return Real(f)->pMethods->xLock(Real(f), l); }
int ShimUnlock(sqlite3_file* f, int l) { return Real(f)->pMethods->xUnlock(Real(f), l); }
int ShimCheckReserved(sqlite3_file* f, int* out) { return Real(f)->pMethods->xCheckReservedLock(Real(f), out); }
int ShimFileControl(sqlite3_file* f, int op, void* arg) { return Real(f)->pMethods->xFileControl(Real(f), op, arg); }
int ShimSectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
int ShimDeviceCharacteristics(sqlite3_file* f) { return Real(f)->pMethods->xDeviceCharacteristics(Real(f)); }
int ShimShmMap(sqlite3_file* f, int pg, int sz, int extend, void volatile** pp) {
  if (reinterpret_cast<ShimFile*>(f)->catalog && Take(g_faults.shm_maps)) {
    ++g_faults.n_failed;
    return SQLITE_IOERR_SHMSIZE;
  }
  return Real(f)->pMethods->xShmMap(Real(f), pg, sz, extend, pp);
}
int ShimShmLock(sqlite3_file* f, int off, int n, int flags) {
  return Real(f)->pMethods->xShmLock(Real(f), off, n, flags);
}
void ShimShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
int ShimShmUnmap(sqlite3_file* f, int del) { return Real(f)->pMethods->xShmUnmap(Real(f), del); }
int ShimFetch(sqlite3_file* f, sqlite3_int64 off, int n, void** pp) {
  return Real(f)->pMethods->xFetch(Real(f), off, n, pp);
}
int ShimUnfetch(sqlite3_file* f, sqlite3_int64 off, void* p) { return Real(f)->pMethods->xUnfetch(Real(f), off, p); }

int ShimOpen(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  auto* s = reinterpret_cast<ShimFile*>(f);
  s->base.pMethods = nullptr;
  s->real = reinterpret_cast<sqlite3_file*>(s + 1);
  s->catalog = name && std::strstr(name, "catalog.db") != nullptr;
  s->main_db = (flags & SQLITE_OPEN_MAIN_DB) != 0;
  const int rc = g_real_vfs->xOpen(g_real_vfs, name, s->real, flags, out_flags);
  if (rc == SQLITE_OK && s->real->pMethods) s->base.pMethods = &g_shim_io;
  return rc;
}

// Installs the fault VFS as SQLite's default for the lifetime of the object.
class FaultVfs {
 public:
  FaultVfs() {
    g_real_vfs = sqlite3_vfs_find(nullptr);
    g_shim_vfs = *g_real_vfs;
    g_shim_vfs.pNext = nullptr;
    g_shim_vfs.zName = "impress-catalog-faults";
    g_shim_vfs.szOsFile = int(sizeof(ShimFile)) + g_real_vfs->szOsFile;
    g_shim_vfs.xOpen = ShimOpen;
    g_shim_io = sqlite3_io_methods{3,
                                   ShimClose,
                                   ShimRead,
                                   ShimWrite,
                                   ShimTruncate,
                                   ShimSync,
                                   ShimFileSize,
                                   ShimLock,
                                   ShimUnlock,
                                   ShimCheckReserved,
                                   ShimFileControl,
                                   ShimSectorSize,
                                   ShimDeviceCharacteristics,
                                   ShimShmMap,
                                   ShimShmLock,
                                   ShimShmBarrier,
                                   ShimShmUnmap,
                                   ShimFetch,
                                   ShimUnfetch};
    ok_ = sqlite3_vfs_register(&g_shim_vfs, /*makeDflt=*/1) == SQLITE_OK;
    g_faults.reads = 0;
    g_faults.writes = 0;
    g_faults.shm_maps = 0;
    g_faults.n_failed = 0;
  }
  ~FaultVfs() {
    if (ok_) sqlite3_vfs_unregister(&g_shim_vfs);
  }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

// ---- the tests ----------------------------------------------------------------------------

TEST(CatalogOpen, CatalogLockedByAnotherProgramIsReportedAndKept) {
  std::mt19937 rng(1);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("locked", t);
  // Another program takes the catalog for itself, as `sqlite3 catalog.db` with
  // PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE would.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/catalog.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other,
                         "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; "
                         "CREATE TABLE IF NOT EXISTS held_by_test(x);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(other);

  auto s = PrefixStore::Open(Options(dir));
  ASSERT_FALSE(s.ok()) << "opened a catalog another program holds exclusively";
  EXPECT_EQ(s.status().code(), Status::Code::kIOError);
  EXPECT_NE(s.status().message().find("locked"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("3 tries"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("not moved aside"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(MovedAside(dir), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/catalog.db"));

  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  ExpectIntact(dir, t);
  std::filesystem::remove_all(dir);
}

TEST(CatalogOpen, IoErrorOnEveryReadIsReportedAndTheCatalogKept) {
  std::mt19937 rng(2);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("ioerr", t);
  {
    FaultVfs vfs;
    ASSERT_TRUE(vfs.ok());
    g_faults.reads = -1;
    auto s = PrefixStore::Open(Options(dir));
    ASSERT_FALSE(s.ok()) << "opened a catalog none of whose pages could be read";
    EXPECT_EQ(s.status().code(), Status::Code::kIOError);
    EXPECT_NE(s.status().message().find("I/O error"), std::string::npos) << s.status().ToString();
    EXPECT_NE(s.status().message().find("not moved aside"), std::string::npos) << s.status().ToString();
    EXPECT_GE(g_faults.n_failed.load(), 3) << "every try reads the catalog";
    EXPECT_EQ(MovedAside(dir), 0);
    g_faults.reads = 0;
  }
  ExpectIntact(dir, t);
  std::filesystem::remove_all(dir);
}

TEST(CatalogOpen, OneFailedReadIsRetriedAndTheStoreOpens) {
  std::mt19937 rng(3);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("ioerr-once", t);
  {
    FaultVfs vfs;
    ASSERT_TRUE(vfs.ok());
    g_faults.reads = 1;
    auto s = PrefixStore::Open(Options(dir));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(g_faults.n_failed.load(), 1);
    EXPECT_TRUE((*s)->recovery().catalog_moved_to.empty());
    EXPECT_TRUE(testing::ReadsExact(**s, kKV, t, t.size()));
  }
  ExpectIntact(dir, t);
  std::filesystem::remove_all(dir);
}

// A full disk, twice: the WAL index cannot grow (the first read of the catalog fails), then,
// with the index in place, the WAL cannot take the commit that records the model.
TEST(CatalogOpen, DiskFullWhileOpeningIsReportedAndTheCatalogKept) {
  std::mt19937 rng(4);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("full", t);
  {
    FaultVfs vfs;
    ASSERT_TRUE(vfs.ok());
    g_faults.shm_maps = -1;
    auto s = PrefixStore::Open(Options(dir));
    ASSERT_FALSE(s.ok()) << "opened a catalog whose WAL index could not be mapped";
    EXPECT_EQ(s.status().code(), Status::Code::kIOError);
    EXPECT_NE(s.status().message().find("I/O error"), std::string::npos) << s.status().ToString();
    EXPECT_GE(g_faults.n_failed.load(), 3);
    EXPECT_EQ(MovedAside(dir), 0);
    g_faults.shm_maps = 0;

    g_faults.writes = -1;
    s = PrefixStore::Open(Options(dir));
    ASSERT_FALSE(s.ok()) << "opened a catalog that could not record the model";
    EXPECT_EQ(s.status().code(), Status::Code::kIOError);
    EXPECT_NE(s.status().message().find("disk full"), std::string::npos) << s.status().ToString();
    EXPECT_EQ(MovedAside(dir), 0);
    g_faults.writes = 0;
  }
  ExpectIntact(dir, t);
  std::filesystem::remove_all(dir);
}

// ---- a store directory that cannot be written --------------------------------------------

// The directory as a read-only filesystem shows it: CanWrite says no, and any open for writing,
// creation or removal fails (so a write the store attempted anyway would fail the test).
class ReadOnlyEnv : public EnvWrapper {
 public:
  ReadOnlyEnv() : EnvWrapper(Env::Default()) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& o) override {
    if (!o.read_only) return Status::IOError("open " + path + ": Read-only file system");
    return target()->OpenFile(path, o);
  }
  Status RemoveFile(const std::string& path) override { return Status::IOError("unlink " + path + ": Read-only"); }
  Result<bool> CanWrite(const std::string&, std::string* why) override {
    *why = "Read-only file system";
    return false;
  }
};

// Every file of `dir` with its bytes.
std::map<std::string, std::string> Contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// What a read-only store must do: open, serve `t` exactly, refuse every change with a message
// that says why. Returns "" or the first failure, so a forked child can report it.
std::string CheckServesReadsOnly(PrefixStoreOptions o, const std::vector<int32_t>& t) {
  auto s = PrefixStore::Open(o);
  if (!s.ok()) return "open: " + s.status().ToString();
  if (!(*s)->recovery().catalog_moved_to.empty()) return "the catalog was moved aside";
  if (auto r = testing::ReadsExact(**s, kKV, t, t.size()); !r) return std::string("read: ") + r.message();
  std::mt19937 rng(9);
  const auto other = RandomTokens(rng, 40);
  auto ins = kKV.Insert(**s, other, 0);
  if (ins.ok()) return "an insert succeeded";
  if (ins.status().message().find("read-only") == std::string::npos) return "insert: " + ins.status().ToString();
  if ((*s)->Pin(t).ok()) return "a pin succeeded";
  if ((*s)->ReorderNow().ok()) return "a reorder succeeded";
  if ((*s)->EvictNodes(1).ok()) return "an eviction succeeded";
  if ((*s)->Match(other).n_matched != 0) return "the refused insert left a prefix";
  return "";
}

TEST(CatalogOpen, ReadOnlyDirectoryServesReadsAndRefusesWrites) {
  std::mt19937 rng(5);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("read-only", t);
  const auto before = Contents(dir);
  ReadOnlyEnv env;
  PrefixStoreOptions o = Options(dir);
  o.env = &env;
  EXPECT_EQ(CheckServesReadsOnly(o, t), "");
  EXPECT_EQ(Contents(dir), before) << "a read-only store changed its directory";
  ExpectIntact(dir, t);  // and a writable open afterwards finds it whole
  std::filesystem::remove_all(dir);
}

// The same through the operating system: the directory's mode is 0500. Root ignores modes, so
// as root the directory and its files are given to user nobody and the check runs in a child
// that becomes nobody.
TEST(CatalogOpen, DirectoryWithoutWritePermissionServesReads) {
  std::mt19937 rng(6);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("mode-0500", t);
  const bool root = ::geteuid() == 0;
  constexpr uid_t kNobody = 65534;
  if (root) {
    for (const auto& e : std::filesystem::directory_iterator(dir))
      ASSERT_EQ(::chown(e.path().c_str(), kNobody, kNobody), 0) << e.path();
    ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0);
  }
  const auto before = Contents(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  int pipe_fd[2];
  ASSERT_EQ(::pipe(pipe_fd), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fd[0]);
    std::string failure;
    if (root && (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0)) failure = "cannot become nobody";
    if (failure.empty()) failure = CheckServesReadsOnly(Options(dir), t);
    (void)!::write(pipe_fd[1], failure.data(), failure.size());
    _exit(failure.empty() ? 0 : 1);
  }
  ::close(pipe_fd[1]);
  std::string failure;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof buf)) > 0;) failure.append(buf, size_t(n));
  ::close(pipe_fd[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << failure;
  EXPECT_EQ(failure, "");
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  if (root) {
    for (const auto& e : std::filesystem::directory_iterator(dir))
      ASSERT_EQ(::chown(e.path().c_str(), 0, 0), 0) << e.path();
    ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  }
  // LOCK gets the reader's pid (the file itself is writable); nothing else changed.
  auto after = Contents(dir);
  after.erase("LOCK");
  auto expected = before;
  expected.erase("LOCK");
  EXPECT_EQ(after, expected);
  ExpectIntact(dir, t);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
