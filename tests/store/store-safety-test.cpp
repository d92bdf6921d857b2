// The store against hostile files, careless users and other processes: catalog values checked
// before use (NULL meta values, absurd token counts, bad extents), a newer schema refused, an
// unreadable catalog moved aside; private modes for the directory and its files; one process
// per store directory (the LOCK), released when the holder dies; several models side by side
// in one directory, none reading another's KV, sharing one SSD budget.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "store/catalog.h"
#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::OpenOrDie;
using testing::RandomTokens;
using testing::SyntheticKV;
using testing::TempDir;
using testing::TestOptions;

constexpr int kLayers = 2, kHeads = 2, kDim = 32, kC = 16;
const SyntheticKV kKV{kLayers, kHeads, kDim};

PrefixStoreOptions Options(const std::string& dir, const std::string& model = "model-A") {
  PrefixStoreOptions o = TestOptions(dir, model, kLayers, kHeads, kDim, {1}, kC);
  o.ssd_bytes = 64ull << 20;
  o.data_file_bytes = 4ull << 20;
  return o;
}

::testing::AssertionResult ReadsExact(PrefixStore& s, const std::vector<int32_t>& tokens, uint64_t n) {
  return testing::ReadsExact(s, kKV, tokens, n);
}

void Sql(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* msg = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << (msg ? msg : "") << "\n" << sql;
  sqlite3_free(msg);
  sqlite3_close(db);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

unsigned Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// A store holding `t` (and closed), for the catalog-crafting tests.
std::string StoreWith(const std::string& tag, const std::vector<int32_t>& t) {
  const std::string dir = TempDir(tag);
  auto s = OpenOrDie(Options(dir));
  EXPECT_TRUE(s && kKV.Insert(*s, t, 0).ok());
  return dir;
}

// ---------------------------------------------------------------- on-disk values

TEST(StoreSafety, NullMetaValuesAreNotACrash) {
  std::mt19937 rng(1);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("null-meta", t);
  // A meta table without NOT NULL, as a hostile or damaged file may have it.
  Sql(dir + "/catalog.db", R"(BEGIN;
CREATE TABLE meta2(key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta2 SELECT key, value FROM meta;
DROP TABLE meta;
ALTER TABLE meta2 RENAME TO meta;
UPDATE meta SET value = NULL;
INSERT INTO meta VALUES(NULL, NULL), ('fingerprint', NULL), ('geometry', NULL);
COMMIT;)");
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_TRUE(ReadsExact(*s, t, t.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  EXPECT_TRUE(s->recovery().catalog_moved_to.empty());
  std::filesystem::remove_all(dir);
}

TEST(StoreSafety, AbsurdTokenCountWithNullBlobsIsDroppedNotAllocated) {
  std::mt19937 rng(2);
  const auto t = RandomTokens(rng, 70);
  for (const char* n_tokens : {"4000000000", "10000000"}) {  // past the row limit; past what the disk can hold
    const std::string dir = StoreWith("huge-seg", t);
    Sql(dir + "/catalog.db", std::string("UPDATE segments SET n_tokens = ") + n_tokens +
                                 ", mapping = NULL, imp_sum = NULL, imp_count = NULL;");
    auto s = OpenOrDie(Options(dir));
    ASSERT_TRUE(s) << n_tokens;
    const RecoveryStats& r = s->recovery();
    EXPECT_EQ(r.catalog_rows_invalid + r.segments_dropped, 1u) << n_tokens;
    EXPECT_GE(r.chunks_missing, 1u) << n_tokens;  // its nodes are cut: the segment is gone
    EXPECT_EQ(s->Match(t).n_matched, 0u);
    EXPECT_TRUE(s->CheckConsistency().ok());
    s.reset();
    s = OpenOrDie(Options(dir));  // the repair was written: a second open finds nothing to repair
    ASSERT_TRUE(s);
    EXPECT_EQ(s->recovery().total(), 0u) << n_tokens;
    ASSERT_TRUE(kKV.Insert(*s, t, 0).ok());
    EXPECT_TRUE(ReadsExact(*s, t, t.size()));
    std::filesystem::remove_all(dir);
  }
}

TEST(StoreSafety, NegativeOrOverflowingExtentValuesDropTheRow) {
  std::mt19937 rng(3);
  const auto t = RandomTokens(rng, 70);
  for (const char* set : {"offset = -4096", "length = 1099511627776", "file = -1", "n_slots = 1000000000",
                          "imp_ratio = 'x'", "freq = -1.0", "freq = 1.3e294", "block_sums = x'0102'"}) {
    const std::string dir = StoreWith("bad-extent", t);
    Sql(dir + "/catalog.db", std::string("UPDATE chunks SET ") + set + " WHERE layer = 1 AND idx = 2;");
    auto s = OpenOrDie(Options(dir));
    ASSERT_TRUE(s) << set;
    EXPECT_EQ(s->recovery().catalog_rows_invalid, 1u) << set;
    EXPECT_EQ(s->recovery().chunks_missing, 1u) << set;
    // Chunk 2 holds tokens [32, 48): the prefix before it is intact.
    EXPECT_TRUE(ReadsExact(*s, t, 2 * kC)) << set;
    EXPECT_TRUE(s->CheckConsistency().ok()) << set;
    s.reset();
    std::filesystem::remove_all(dir);
  }
}

TEST(StoreSafety, NewerSchemaIsRefusedAndLeftUnchanged) {
  std::mt19937 rng(4);
  const auto t = RandomTokens(rng, 40);
  const std::string dir = StoreWith("newer", t);
  const std::string db = dir + "/catalog.db";
  Sql(db, "UPDATE meta SET value = '" + std::to_string(kCatalogSchemaVersion + 1) + "' WHERE key = 'schema_version';");
  Sql(db, "PRAGMA wal_checkpoint(TRUNCATE);");
  const std::string before = ReadFile(db);
  auto s = PrefixStore::Open(Options(dir));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(s.status().message().find("newer"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find(std::to_string(kCatalogSchemaVersion + 1)), std::string::npos);
  EXPECT_EQ(ReadFile(db), before);
  // Nothing was moved aside either.
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("unreadable"), std::string::npos) << e.path();
  std::filesystem::remove_all(dir);
}

// After a catalog was moved aside: the store is empty, takes new KV and keeps it across a reopen
// that finds nothing more to move. Consumes `s`; removes `dir`.
void ExpectStartsOverCleanly(std::unique_ptr<PrefixStore> s, const std::string& dir, const std::vector<int32_t>& t) {
  EXPECT_EQ(s->Match(t).n_matched, 0u);
  ASSERT_TRUE(kKV.Insert(*s, t, 0).ok());
  EXPECT_TRUE(ReadsExact(*s, t, t.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->recovery().catalog_moved_to.empty());
  EXPECT_TRUE(ReadsExact(*s, t, t.size()));
  EXPECT_TRUE(s->CheckConsistency().ok());
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST(StoreSafety, UnreadableCatalogIsMovedAsideAndTheStoreStartsEmpty) {
  std::mt19937 rng(5);
  const auto t = RandomTokens(rng, 70);
  const std::string dir = StoreWith("garbage", t);
  const std::string db = dir + "/catalog.db";
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  std::string garbage(8192, '\0');
  for (auto& c : garbage) c = char(rng());
  std::ofstream(db, std::ios::binary | std::ios::trunc) << garbage;
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const std::string moved = s->recovery().catalog_moved_to;
  ASSERT_FALSE(moved.empty());
  EXPECT_NE(moved.find("catalog.db.unreadable-"), std::string::npos) << moved;
  EXPECT_EQ(ReadFile(moved), garbage);       // kept, not deleted
  EXPECT_EQ(s->Stats().ssd_disk_bytes, 0u);  // the data nobody names any more was reclaimed
  ExpectStartsOverCleanly(std::move(s), dir, t);
}

// SQLite's own verdict on a file (what `PRAGMA quick_check` says), read without the store.
std::string QuickCheck(const std::string& db_path) {
  sqlite3* db = nullptr;
  std::string verdict;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_exec(
        db, "PRAGMA quick_check(1)",
        [](void* out, int, char** v, char**) {
          *static_cast<std::string*>(out) = v[0] ? v[0] : "";
          return 0;
        },
        &verdict, nullptr);
  }
  if (verdict.empty()) verdict = sqlite3_errmsg(db);
  sqlite3_close(db);
  return verdict;
}

// Damage inside the file's pages that the first reads do not meet (a B-tree page of a table
// the store only writes to later): the store must not open over it and then be refused on every
// later open; it is found at open and moved aside like an unreadable file.
TEST(StoreSafety, DamagedPagesAreFoundAtOpenAndTheCatalogMovedAside) {
  std::mt19937 rng(6);
  const auto t = RandomTokens(rng, 3000);  // enough rows for tables over several pages
  const std::string dir = StoreWith("damaged-pages", t);
  const std::string db = dir + "/catalog.db";
  Sql(db, "PRAGMA wal_checkpoint(TRUNCATE);");
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  std::string bytes = ReadFile(db);
  const size_t page = 4096;
  ASSERT_GE(bytes.size(), 6 * page);
  // The last page: a leaf of some table, its cell pointers overwritten.
  for (size_t i = bytes.size() - page + 8; i < bytes.size() - page + 64; ++i) bytes[i] = char(0xff);
  std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
  ASSERT_NE(QuickCheck(db), "ok");  // the damage is real, by SQLite's own measure
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  const std::string moved = s->recovery().catalog_moved_to;
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(ReadFile(moved), bytes);  // kept for inspection
  ExpectStartsOverCleanly(std::move(s), dir, t);
}

// The fuzzer's reproducer (tests/fuzz/findings): a catalog image that once opened, took a write,
// and was then refused as malformed on every reopen. Now it is moved aside at the first open.
TEST(StoreSafety, FuzzFindingCatalogThatBrokeOnReopenIsMovedAsideFirst) {
  const std::string image = ReadFile(std::string(IMPRESS_SOURCE_DIR) + "/tests/fuzz/findings/catalog-reopen-malformed");
  ASSERT_GT(image.size(), 1u);
  ASSERT_EQ(image[0] % 2, 0);  // the harness's "whole SQLite file" mode
  const std::string dir = TempDir("fuzz-finding");
  std::ofstream(dir + "/catalog.db", std::ios::binary) << image.substr(1);
  ASSERT_NE(QuickCheck(dir + "/catalog.db"), "ok");
  std::mt19937 rng(7);
  const auto t = RandomTokens(rng, 70);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->recovery().catalog_moved_to.empty());
  ExpectStartsOverCleanly(std::move(s), dir, t);
}

// ---------------------------------------------------------------- private modes

TEST(StoreSafety, DirectoryAndFilesArePrivate) {
  for (mode_t mask : {mode_t(022), mode_t(077)}) {
    const mode_t old = ::umask(mask);
    const std::string root = TempDir("modes");
    const std::string dir = root + "/data/impress/store";  // parents made here too
    {
      auto s = OpenOrDie(Options(dir));
      ASSERT_TRUE(s);
      std::mt19937 rng(6);
      ASSERT_TRUE(kKV.Insert(*s, RandomTokens(rng, 40), 0).ok());
      EXPECT_EQ(Mode(dir), 0700u);
      EXPECT_EQ(Mode(root + "/data/impress"), 0700u);
      EXPECT_EQ(Mode(dir + "/catalog.db"), 0600u);
      EXPECT_EQ(Mode(dir + "/LOCK"), 0600u);
      for (const char* tail : {"-wal", "-shm"})
        if (std::filesystem::exists(dir + "/catalog.db" + tail)) {
          EXPECT_EQ(Mode(dir + "/catalog.db" + tail), 0600u);
        }
    }
    // A catalog an older build left readable by everyone is made private on open.
    ASSERT_EQ(::chmod((dir + "/catalog.db").c_str(), 0644), 0);
    OpenOrDie(Options(dir)).reset();
    EXPECT_EQ(Mode(dir + "/catalog.db"), 0600u);
    ::umask(old);
    std::filesystem::remove_all(root);
  }
}

// ---------------------------------------------------------------- one process per store

TEST(StoreSafety, SecondOpenOfADirectoryNamesTheHolder) {
  const std::string dir = TempDir("lock");
  auto first = OpenOrDie(Options(dir));
  ASSERT_TRUE(first);
  auto second = PrefixStore::Open(Options(dir, "model-B"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kIOError);
  const std::string m = second.status().message();
  EXPECT_NE(m.find("in use by process " + std::to_string(::getpid())), std::string::npos) << m;
  EXPECT_NE(m.find(program_invocation_short_name), std::string::npos) << m;
  first.reset();
  EXPECT_TRUE(OpenOrDie(Options(dir, "model-B")));
  std::filesystem::remove_all(dir);
}

TEST(StoreSafety, KilledHolderReleasesTheLock) {
  const std::string dir = TempDir("lock-kill");
  std::mt19937 rng(7);
  const auto t = RandomTokens(rng, 60);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = PrefixStore::Open(Options(dir));
    if (!s.ok() || !kKV.Insert(**s, t, 0).ok()) _exit(3);
    const char c = 1;
    if (::write(ready[1], &c, 1) != 1) _exit(4);
    for (;;) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  auto refused = PrefixStore::Open(Options(dir));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("process " + std::to_string(pid)), std::string::npos)
      << refused.status().ToString();
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  auto s = OpenOrDie(Options(dir));
  ASSERT_TRUE(s);
  EXPECT_TRUE(ReadsExact(*s, t, t.size()));  // the holder's committed insert survived
  EXPECT_TRUE(s->CheckConsistency().ok());
  ::close(ready[0]);
  ::close(ready[1]);
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- models side by side

TEST(StoreSafety, SwitchingModelsKeepsEveryModelsPrefixes) {
  const std::string dir = TempDir("models");
  std::mt19937 rng(8);
  const auto a = RandomTokens(rng, 90), b = RandomTokens(rng, 75);
  const SyntheticKV kv{kLayers, kHeads, kDim};
  {
    auto s = OpenOrDie(Options(dir, "model-A"));
    ASSERT_TRUE(s);
    ASSERT_TRUE(kv.Insert(*s, a, 0).ok());
  }
  uint64_t disk_a = 0;
  {
    auto s = OpenOrDie(Options(dir, "model-B"));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->Match(a).n_matched, 0u);  // KV of another model is never returned
    EXPECT_EQ(s->Stats().n_nodes, 0u);
    disk_a = s->Stats().ssd_disk_bytes;
    EXPECT_GT(disk_a, 0u);  // model A's data is kept
    ASSERT_TRUE(kv.Insert(*s, b, 0).ok());
    ASSERT_TRUE(kv.Insert(*s, a, 0).ok());  // the same tokens under B: B's own copy
    EXPECT_TRUE(ReadsExact(*s, a, a.size()));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  {
    auto s = OpenOrDie(Options(dir, "model-A"));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->recovery().total(), 0u);
    EXPECT_TRUE(ReadsExact(*s, a, a.size()));  // A's prefix matches fully
    EXPECT_EQ(s->Match(b).n_matched, 0u);      // B's is not A's
    EXPECT_EQ(s->Stats().n_nodes, 1u);
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  {
    // Another geometry of the same fingerprint is another namespace too.
    auto o = Options(dir, "model-A");
    o.head_dim = 64;
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->Match(a).n_matched, 0u);
  }
  {
    auto s = OpenOrDie(Options(dir, "model-B"));
    ASSERT_TRUE(s);
    EXPECT_TRUE(ReadsExact(*s, b, b.size()));
    EXPECT_TRUE(ReadsExact(*s, a, a.size()));
  }
  std::filesystem::remove_all(dir);
}

TEST(StoreSafety, ModelsShareOneBudgetAndTheOtherModelsSpaceIsEvictedCleanly) {
  const std::string dir = TempDir("models-budget");
  std::mt19937 rng(9);
  const SyntheticKV kv{kLayers, kHeads, kDim};
  auto o = Options(dir, "model-A");
  o.ssd_bytes = 6ull << 20;  // data files get ~5 MiB: about 40 of the 400-token inserts below
  o.data_file_bytes = 1ull << 20;
  std::vector<std::vector<int32_t>> as, bs;
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    for (int i = 0; i < 30; ++i) {
      as.push_back(RandomTokens(rng, 400));
      ASSERT_TRUE(kv.Insert(*s, as.back(), 0).ok());
    }
  }
  o.model_fingerprint = "model-B";
  {
    auto s = OpenOrDie(o);
    ASSERT_TRUE(s);
    for (int i = 0; i < 30; ++i) {
      bs.push_back(RandomTokens(rng, 400));
      auto r = kv.Insert(*s, bs.back(), 0);
      ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();  // room made from A's oldest prefixes
    }
    const auto st = s->Stats();
    EXPECT_LE(st.ssd_disk_bytes + st.catalog_bytes, o.ssd_bytes + (1u << 20));
    EXPECT_TRUE(ReadsExact(*s, bs.back(), 400));
    EXPECT_TRUE(s->CheckConsistency().ok());
  }
  o.model_fingerprint = "model-A";
  auto s = OpenOrDie(o);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->recovery().total(), 0u);  // A's evicted prefixes left the catalog cleanly
  EXPECT_TRUE(s->CheckConsistency().ok());
  size_t kept = 0;
  for (const auto& t : as) {
    const uint64_t n = s->Match(t).n_matched;
    EXPECT_TRUE(n == 0 || n == t.size());
    if (n == t.size()) {
      ++kept;
      EXPECT_TRUE(ReadsExact(*s, t, n));
    }
  }
  EXPECT_GT(kept, 0u);   // the newest of A's prefixes are still there
  EXPECT_LT(kept, 30u);  // the oldest made room for B
  EXPECT_TRUE(ReadsExact(*s, as.back(), 400));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
