// Several processes on one store: four worker processes each serve 50 requests over 5 shared
// documents (match, read back and check every matched token's KV, store the rest, report
// importance, now and then a reorder), taking turns through the store's lock (each request opens
// the store, waiting for whoever holds it, and closes it). The parent SIGKILLs workers at random
// moments, in or out of a request, and starts them again where they stopped. Afterwards a full
// check: the store opens with nothing to repair, every chunk passes its checksum, the tree is
// consistent (no cycle, no orphan), and every prefix a worker stored and saw committed reads
// back bit for bit; any other prefix is present exactly or cleanly absent.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

using testing::SyntheticKV;
using testing::TestOptions;

constexpr int kWorkers = 4, kRequestsPerWorker = 50, kDocs = 5;
constexpr int kLayers = 2, kHeads = 2, kDim = 32;
#if defined(__SANITIZE_ADDRESS__)
constexpr int kKills = 8;
#else
constexpr int kKills = 20;
#endif

PrefixStoreOptions Options(const std::string& dir) {
  PrefixStoreOptions o = TestOptions(dir, "multi-process-model", kLayers, kHeads, kDim, {0}, 16);
  o.device_bytes = 64 * 1024;
  o.host_bytes = 128 * 1024;
  o.data_file_bytes = 4ull << 20;
  // Waiting for the lock is waiting for an event (another worker's close), not a time bound: a
  // worker that cannot get it within this long is reported as a failure, whatever the load.
  o.lock_wait = std::chrono::minutes(10);
  return o;
}

// The documents, and request r of worker w: a document followed by a question of its own.
std::vector<std::vector<int32_t>> Documents() {
  std::mt19937 rng(505);
  std::vector<std::vector<int32_t>> docs(kDocs);
  for (auto& d : docs) {
    const size_t n = 150 + rng() % 250;
    for (size_t i = 0; i < n; ++i) d.push_back(int32_t(rng() % 30000));
  }
  return docs;
}

std::vector<int32_t> Request(const std::vector<std::vector<int32_t>>& docs, int w, int r) {
  std::mt19937 rng(uint32_t(w * 1000 + r));
  std::vector<int32_t> t = docs[rng() % docs.size()];
  const size_t q = 5 + rng() % 40;
  for (size_t i = 0; i < q; ++i) t.push_back(int32_t(30000 + rng() % 1000));
  return t;
}

std::string ProgressFile(const std::string& log_dir, int w) { return log_dir + "/worker-" + std::to_string(w); }

// How many requests worker w completed: the lines of its progress file ("r\n" after request r's
// store closed). A line cut by a kill does not count.
int Completed(const std::string& log_dir, int w) {
  std::ifstream in(ProgressFile(log_dir, w));
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int n = 0;
  for (char c : all) n += c == '\n';
  return n;
}

// Exit codes of a worker: 0 done; 2 could not open; 3 a read differed from what was written;
// 4 an insert or read failed; 5 progress file.
[[noreturn]] void Worker(const std::string& dir, const std::string& log_dir, int w, int from) {
  const SyntheticKV kv{kLayers, kHeads, kDim};
  const auto docs = Documents();
  const int log = ::open(ProgressFile(log_dir, w).c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log < 0) _exit(5);
  for (int r = from; r < kRequestsPerWorker; ++r) {
    const auto t = Request(docs, w, r);
    {
      auto opened = PrefixStore::Open(Options(dir));
      if (!opened.ok()) _exit(2);
      PrefixStore& s = **opened;
      MatchHandle h = s.Match(t);
      if (h.n_matched > 0) {
        std::vector<uint32_t> all(h.n_matched);
        for (uint32_t p = 0; p < all.size(); ++p) all[p] = p;
        for (int il = 0; il < kLayers; ++il) {
          auto tk = s.SubmitReadKV(h, il, all, true, true);
          if (!tk.ok()) _exit(4);
          auto got = s.Wait(*tk);
          if (!got.ok()) _exit(4);
          if (!kv.Check(t, il, all, *got, true, true)) _exit(3);
          std::vector<uint32_t> imp;
          for (uint32_t p = uint32_t(w + il); p < h.n_matched; p += 4) imp.push_back(p);
          (void)s.ReportImportance(h, il, imp);
        }
      }
      const uint64_t matched = h.n_matched;
      if (!s.Release(h).ok()) _exit(4);
      if (matched < t.size() && !kv.Insert(s, t, matched).ok()) _exit(4);
      if (r % 7 == 3 && !s.ReorderNow().ok()) _exit(4);
    }  // closed: the lock is released and the next worker may open
    const std::string line = std::to_string(r) + "\n";
    if (::write(log, line.data(), line.size()) != ssize_t(line.size())) _exit(5);
  }
  _exit(0);
}

pid_t Start(const std::string& dir, const std::string& log_dir, int w) {
  const int from = Completed(log_dir, w);
  const pid_t pid = ::fork();
  if (pid == 0) Worker(dir, log_dir, w, from);
  return pid;
}

TEST(StoreMultiProcess, FourProcessesTakingTurnsWithKillsLeaveAConsistentStore) {
  const std::string dir = testing::TempDir("multi-process");
  const std::string log_dir = dir + "-progress";
  std::filesystem::create_directories(log_dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    pids[size_t(w)] = Start(dir, log_dir, w);
    ASSERT_GT(pids[size_t(w)], 0);
  }
  std::mt19937 rng(99);
  int kills = 0, running = kWorkers, restarts = 0;
  while (running > 0) {
    // A kill now and then, at a random moment, of a random worker still running.
    if (kills < kKills) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 120));
      const int w = int(rng() % kWorkers);
      if (pids[size_t(w)] > 0 && ::kill(pids[size_t(w)], SIGKILL) == 0) ++kills;
    }
    // Reap whoever ended; restart the killed ones where they stopped.
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, kills < kKills ? WNOHANG : 0);
    if (done <= 0) continue;
    int w = 0;
    while (w < kWorkers && pids[size_t(w)] != done) ++w;
    ASSERT_LT(w, kWorkers);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      pids[size_t(w)] = Start(dir, log_dir, w);
      ASSERT_GT(pids[size_t(w)], 0);
      ++restarts;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status)) << "worker " << w << " ended by signal " << WTERMSIG(status);
    ASSERT_EQ(WEXITSTATUS(status), 0) << "worker " << w
                                      << " failed (2 open, 3 KV read back differs, 4 store error, 5 log)";
    pids[size_t(w)] = 0;
    --running;
  }
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(Completed(log_dir, w), kRequestsPerWorker) << "worker " << w;

  // The full check.
  auto o = Options(dir);
  o.verify_on_open = true;
  o.lock_wait = std::chrono::milliseconds(0);  // every worker has ended: the lock must be free
  auto opened = PrefixStore::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  PrefixStore& s = **opened;
  // Every change was one catalog transaction: a kill never leaves anything to repair.
  EXPECT_EQ(s.recovery().total(), 0u);
  EXPECT_TRUE(s.recovery().catalog_moved_to.empty());
  EXPECT_EQ(s.Stats().chunks_dropped_corrupt, 0u);
  const Status c = s.CheckConsistency();
  ASSERT_TRUE(c.ok()) << c.ToString();
  const SyntheticKV kv{kLayers, kHeads, kDim};
  const auto docs = Documents();
  uint64_t checked = 0;
  for (int w = 0; w < kWorkers; ++w)
    for (int r = 0; r < kRequestsPerWorker; ++r) {
      const auto t = Request(docs, w, r);
      // Every request completed, so every one was stored and committed: all of it is there.
      EXPECT_TRUE(testing::ReadsExact(s, kv, t, t.size())) << "worker " << w << " request " << r;
      checked += t.size();
    }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[multi-process] %d workers x %d requests, %d SIGKILLs, %d restarts, %llu tokens read back, %.1f s\n",
              kWorkers, kRequestsPerWorker, kills, restarts, (unsigned long long)checked, secs);
  EXPECT_GE(kills, 1);
  opened->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(log_dir);
}

}  // namespace
}  // namespace impress::store
