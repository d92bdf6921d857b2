// Crash safety: a child process inserts, reports importance, reorders and evicts while the parent
// SIGKILLs it at random moments. After every kill the parent reopens the store and checks: the
// catalog is consistent, every chunk it names reads back with a valid checksum, and every prefix
// it matches returns exactly the KV written for it (recomputed from the synthetic formula).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::SyntheticKV;
using testing::TestOptions;

#if defined(__SANITIZE_ADDRESS__)
constexpr int kKills = 40;  // ASan is slow; the Release build does the full count
#else
constexpr int kKills = 200;
#endif

constexpr int kLayers = 2, kHeads = 2, kDim = 32;

PrefixStoreOptions CrashOptions(const std::string& dir) {
  PrefixStoreOptions o = TestOptions(dir, "crash-model", kLayers, kHeads, kDim, {1}, 16);
  o.device_bytes = 32 * 1024;
  o.host_bytes = 64 * 1024;
  o.ssd_bytes = 3ull << 20;  // small: inserts evict
  o.data_file_bytes = 1ull << 20;
  return o;
}

std::vector<std::vector<int32_t>> Universe() {
  std::mt19937 rng(2024);
  std::vector<std::vector<int32_t>> bases(3), seqs;
  for (auto& b : bases)
    for (int i = 0; i < 120; ++i) b.push_back(int32_t(rng() % 1000));
  for (int i = 0; i < 24; ++i) {
    auto t = bases[size_t(i) % 3];
    t.resize(20 + rng() % 100);
    size_t tail = 10 + rng() % 150;
    for (size_t j = 0; j < tail; ++j) t.push_back(int32_t(rng() % 1000));
    seqs.push_back(std::move(t));
  }
  return seqs;
}

[[noreturn]] void ChildWork(const std::string& dir, uint32_t seed) {
  SyntheticKV kv{kLayers, kHeads, kDim};
  auto seqs = Universe();
  auto st = PrefixStore::Open(CrashOptions(dir));
  if (!st.ok()) _exit(3);
  PrefixStore& s = **st;
  std::mt19937 rng(seed);
  for (uint64_t op = 0;; ++op) {
    const auto& t = seqs[rng() % seqs.size()];
    MatchHandle h = s.Match(t);
    if (h.n_matched < t.size()) (void)kv.Insert(s, t, h.n_matched);
    if (h.n_matched > 0) {
      // A different pattern per layer: each layer gets its own mapping list on reorder.
      for (int il = 0; il < kLayers; ++il) {
        std::vector<uint32_t> imp;
        for (uint32_t p = 0; p < h.n_matched; ++p)
          if ((p * 7 + seed + uint32_t(il) * 2) % 5 == 0) imp.push_back(p);
        (void)s.ReportImportance(h, il, imp);
      }
    }
    (void)s.Release(h);
    if (rng() % 4 == 0) (void)s.ReorderNow();
    if (rng() % 5 == 0) (void)s.EvictNodes(1 + rng() % 2);
  }
}

TEST(StoreCrash, SigkillAtRandomMomentsLeavesAConsistentStore) {
  std::string dir = testing::TempDir("crash");
  SyntheticKV kv{kLayers, kHeads, kDim};
  auto seqs = Universe();
  std::mt19937 rng(77);
  const auto t0 = std::chrono::steady_clock::now();
  int kills = 0, exited_early = 0;
  uint64_t matched_total = 0, checked_reads = 0;
  for (int it = 0; kills < kKills; ++it) {
    ASSERT_LT(it, kKills * 3) << "the child keeps exiting before it can be killed";
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ChildWork(dir, uint32_t(it) * 2654435761u);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 60000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++kills;
    else ++exited_early;
    // Reopen and check everything.
    auto o = CrashOptions(dir);
    o.verify_on_open = true;
    auto st = PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << "after kill " << kills << ": " << st.status().ToString();
    PrefixStore& s = **st;
    ASSERT_EQ(s.Stats().chunks_dropped_corrupt, 0u)
        << "after kill " << kills << ": a committed chunk was missing or failed its checksum";
    // Every change is one catalog transaction, so a kill at any moment leaves a catalog that
    // needs no repair: no row is invalid, no node is orphaned or cut, no KV is missing or bad, no
    // row is left over. (Space written but never committed is reclaimed silently: no row names it.)
    const RecoveryStats& rec = s.recovery();
    ASSERT_EQ(rec.catalog_rows_invalid, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.nodes_dropped, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.nodes_cut, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.segments_dropped, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.chunk_rows_dropped, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.probe_rows_dropped, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.chunks_missing, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.chunks_corrupt, 0u) << "after kill " << kills;
    ASSERT_EQ(rec.foreign_rows_dropped, 0u) << "after kill " << kills;
    ASSERT_TRUE(rec.catalog_moved_to.empty()) << "after kill " << kills;
    ASSERT_EQ(rec.total(), 0u) << "after kill " << kills;
    Status c = s.CheckConsistency();
    ASSERT_TRUE(c.ok()) << "after kill " << kills << ": " << c.ToString();
    const auto st_now = s.Stats();
    ASSERT_LE(st_now.ssd_disk_bytes + st_now.catalog_bytes, o.ssd_bytes + (1u << 20));
    for (size_t q = 0; q < seqs.size(); q += 1 + size_t(it % 3)) {
      const auto& t = seqs[q];
      MatchHandle h = s.Match(t);
      matched_total += h.n_matched;
      if (h.n_matched == 0) continue;
      std::vector<uint32_t> all(h.n_matched);
      for (uint32_t p = 0; p < all.size(); ++p) all[p] = p;
      for (int il = 0; il < kLayers; ++il) {
        auto tk = s.SubmitReadKV(h, il, all, true, true);
        ASSERT_TRUE(tk.ok());
        auto r = s.Wait(*tk);
        ASSERT_TRUE(r.ok()) << "after kill " << kills << ": " << r.status().ToString();
        ASSERT_TRUE(kv.Check(t, il, all, *r, true, true)) << "after kill " << kills;
        auto tp = s.SubmitProbeKeys(h, il);
        ASSERT_TRUE(tp.ok());
        auto rp = s.Wait(*tp);
        ASSERT_TRUE(rp.ok()) << rp.status().ToString();
        ASSERT_TRUE(kv.CheckProbe(t, il, {1}, h.n_matched, *rp)) << "after kill " << kills;
        ++checked_reads;
      }
      ASSERT_TRUE(s.Release(h).ok());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[crash] %d SIGKILLs (%d early exits), %llu verified layer reads, %llu matched tokens checked, %.1f s\n",
              kills, exited_early, (unsigned long long)checked_reads, (unsigned long long)matched_total, secs);
  EXPECT_GE(kills, kKills);
  EXPECT_GT(matched_total, 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
