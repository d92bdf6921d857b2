// ReadEngine: io_uring and pread give identical bytes for batches larger than the queue depth,
// reads past the end of a file are reported (not silently short), and tickets are single-use.
// Where the kernel offers io_uring (probed here with the raw system call, independently of
// liburing and of the store), the engine and a store on an O_DIRECT filesystem really use it;
// each test records the engine it ran as the GoogleTest property "io_engine".
#include "store/uring-io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "store/prefix-store.h"
#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

// Does this kernel (and its seccomp policy) give an io_uring? The same question the store asks,
// asked here without the store's code: io_uring_setup(2) directly.
bool KernelOffersIoUring(std::string* why) {
  io_uring_params p;
  std::memset(&p, 0, sizeof(p));
  const long fd = ::syscall(__NR_io_uring_setup, 4, &p);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  ::close(int(fd));
  return true;
}

// Does the filesystem of `dir` take O_DIRECT? (the store reads buffered with pread where not)
bool DirTakesODirect(const std::string& dir) {
  const std::string p = dir + "/.direct-check";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(p.c_str());
  return fd >= 0;
}

bool ForcedPread() {
  const char* e = std::getenv("IMPRESS_STORE_FORCE_PREAD");
  return e && e[0] && e[0] != '0';
}

TEST(UringIo, EngineIsIoUringWhereTheKernelOffersIt) {
  std::string why, note;
  const bool offered = KernelOffersIoUring(&why);
  auto e = ReadEngine::Create(8, false, &note);
  ::testing::Test::RecordProperty("io_engine", e->name());
  std::string kernel = offered ? "offers io_uring" : "refuses io_uring: ";
  if (!offered) kernel += why;
  std::printf("[io engine] kernel %s; engine: %s %s\n", kernel.c_str(), e->name(), note.c_str());
  if (ForcedPread()) {
    EXPECT_STREQ(e->name(), "pread");
    GTEST_SKIP() << "IMPRESS_STORE_FORCE_PREAD is set";
  }
  if (offered) {
    EXPECT_STREQ(e->name(), "io_uring") << "the kernel offers io_uring but the engine fell back: " << note;
    EXPECT_TRUE(note.empty()) << note;
  } else {
    EXPECT_STREQ(e->name(), "pread");
    EXPECT_NE(note.find("io_uring refused"), std::string::npos) << note;
  }
}

TEST(UringIo, StoreReadsThroughIoUringWhereKernelAndFilesystemAllow) {
  std::string dir = testing::TempDir("io-store");
  std::string why;
  const bool offered = KernelOffersIoUring(&why), direct = DirTakesODirect(dir);
  PrefixStoreOptions o;
  o.dir = dir + "/store";
  o.model_fingerprint = "model-io-engine";
  o.n_layer = 2;
  o.n_head_kv = 2;
  o.head_dim = 16;
  o.probe_kv_heads = {0};
  o.chunk_tokens = 16;
  o.reorder_interval = std::chrono::milliseconds(0);
  auto st = PrefixStore::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const StoreStats ss = (*st)->Stats();
  ::testing::Test::RecordProperty("io_engine", ss.io_engine);
  std::printf("[io engine] store in %s: %s%s (kernel io_uring: %s, O_DIRECT: %s)\n", dir.c_str(), ss.io_engine.c_str(),
              ss.direct_io ? " + O_DIRECT" : "", offered ? "yes" : why.c_str(), direct ? "yes" : "no");
  EXPECT_EQ(ss.direct_io, direct);
  if (offered && direct && !ForcedPread()) {
    EXPECT_EQ(ss.io_engine, "io_uring");
  } else {
    EXPECT_EQ(ss.io_engine, "pread");
  }
  st->reset();
  std::filesystem::remove_all(dir);
}

// n random bytes written to a file of a temporary directory, kept to compare reads with.
struct RandomFile {
  std::string dir;
  std::unique_ptr<File> f;
  AlignedBuffer src;
  RandomFile(const std::string& tag, size_t n, std::mt19937& rng) : dir(testing::TempDir(tag)), src(n) {
    auto opened = Env::Default()->OpenFile(dir + "/data", OpenOptions{});
    EXPECT_TRUE(opened.ok());
    if (!opened.ok()) return;
    f = std::move(*opened);
    for (size_t i = 0; i < n; ++i) src.data()[i] = uint8_t(rng());
    EXPECT_TRUE(f->WriteAt(0, src.data(), n).ok());
    EXPECT_TRUE(f->Sync().ok());
  }
  ~RandomFile() {
    f.reset();
    std::filesystem::remove_all(dir);
  }
};

// io_uring (where offered) and pread, both with queue depth 4.
struct BothEngines {
  std::string note;
  std::unique_ptr<ReadEngine> uring = ReadEngine::Create(4, false, &note);
  std::unique_ptr<ReadEngine> pread = ReadEngine::Create(4, true, &note);
};

TEST(UringIo, UringAndPreadReturnIdenticalBytesForBigBatches) {
  const size_t n = 4 << 20;
  std::mt19937 rng(1);
  RandomFile rf("io", n, rng);
  ASSERT_TRUE(rf.f);
  File* f = rf.f.get();
  const AlignedBuffer& src = rf.src;
  BothEngines engines_;
  ReadEngine* uring = engines_.uring.get();
  ReadEngine* pread = engines_.pread.get();
  EXPECT_STREQ(pread->name(), "pread");
  std::string why;
  std::string engines = uring->name();
  engines += " vs ";
  engines += pread->name();
  ::testing::Test::RecordProperty("io_engine", engines);
  std::printf("[io engine] comparing %s with %s\n", uring->name(), pread->name());
  // Comparing pread with pread would prove nothing: where io_uring exists, it must be used.
  if (KernelOffersIoUring(&why) && !ForcedPread()) {
    EXPECT_STREQ(uring->name(), "io_uring");
  }
  for (ReadEngine* e : {uring, pread}) {
    std::vector<AlignedBuffer> bufs;
    std::vector<ReadOp> ops;
    std::vector<uint64_t> offs;
    for (int i = 0; i < 100; ++i) {  // 25x the queue depth
      uint64_t off = (rng() % (n / 4096 - 4)) * 4096;
      uint32_t len = uint32_t(4096 * (1 + rng() % 4));
      bufs.emplace_back(len);
      offs.push_back(off);
      ops.push_back({f, off, len, bufs.back().data()});
    }
    auto t = e->Submit(ops);
    ASSERT_TRUE(e->Wait(t).ok()) << e->name();
    for (size_t i = 0; i < ops.size(); ++i)
      ASSERT_EQ(0, std::memcmp(bufs[i].data(), src.data() + offs[i], ops[i].length)) << e->name() << " op " << i;
    EXPECT_FALSE(e->Wait(t).ok()) << "a ticket waited twice must be refused";
    // Past the end of the file: an error naming the file, never a silent short read.
    AlignedBuffer tail(8192);
    auto t2 = e->Submit({ReadOp{f, n - 4096, 8192, tail.data()}});
    Status st = e->Wait(t2);
    EXPECT_FALSE(st.ok()) << e->name();
    EXPECT_NE(st.message().find("short read"), std::string::npos) << st.ToString();
    // An empty batch completes at once.
    EXPECT_TRUE(e->Wait(e->Submit({})).ok());
  }
}

// Groups: each group's call comes once, after all of its ops read their bytes (checked inside the
// call), never for a group with a failed op, and every call has returned when Wait does.
TEST(UringIo, GroupCallsComeOnceEachWhenTheirReadsAreDone) {
  const size_t n = 2 << 20;
  std::mt19937 rng(3);
  RandomFile rf("io-groups", n, rng);
  ASSERT_TRUE(rf.f);
  BothEngines both;
  for (ReadEngine* e : {both.uring.get(), both.pread.get()}) {
    File* f = rf.f.get();
    const AlignedBuffer& src = rf.src;
    constexpr uint32_t kGroups = 9, kBad = 4;
    std::vector<AlignedBuffer> bufs;
    std::vector<ReadOp> ops;
    std::vector<uint64_t> offs;
    for (int i = 0; i < 60; ++i) {  // groups interleaved, 15x the queue depth
      const uint32_t g = uint32_t(i) % kGroups;
      uint64_t off = (rng() % (n / 4096 - 4)) * 4096;
      if (g == kBad && i > 50) off = n - 4096;  // reads past the end: group kBad fails
      const uint32_t len = g == kBad && i > 50 ? 8192 : uint32_t(4096 * (1 + rng() % 3));
      bufs.emplace_back(len);
      offs.push_back(off);
      ops.push_back({f, off, len, bufs.back().data(), g});
    }
    ops.push_back({f, 0, 4096, bufs.emplace_back(4096).data()});  // in no group
    offs.push_back(0);
    std::mutex mu;
    std::vector<int> calls(kGroups, 0);
    std::vector<int> complete(kGroups, 0);
    auto t = e->Submit(ops, [&](uint32_t g) {
      bool all = true;
      for (size_t i = 0; i < ops.size(); ++i)
        if (ops[i].group == g) all = all && std::memcmp(bufs[i].data(), src.data() + offs[i], ops[i].length) == 0;
      std::lock_guard<std::mutex> lk(mu);
      ++calls[g];
      complete[g] = all;
    });
    EXPECT_FALSE(e->Wait(t).ok()) << e->name() << ": the short read fails the batch";
    for (uint32_t g = 0; g < kGroups; ++g) {
      EXPECT_EQ(calls[g], g == kBad ? 0 : 1) << e->name() << " group " << g;
      if (g != kBad) {
        EXPECT_TRUE(complete[g]) << e->name() << " group " << g << " was called before its bytes";
      }
    }
  }
}

// Several threads submitting and waiting at once, batches of one read and of many (an engine may
// submit them on its own thread): every read brings its own bytes, every ticket completes once.
// Then an engine closed with reads queued far beyond its depth returns, each read finished whole
// or cancelled unwritten (how many of each depends on timing).
TEST(UringIo, ConcurrentSubmittersEachGetTheirBytesAndClosingWithQueuedReadsReturns) {
  const size_t n = 2 << 20;
  std::mt19937 seed_rng(5);
  RandomFile rf("io-threads", n, seed_rng);
  ASSERT_TRUE(rf.f);
  BothEngines both;
  for (ReadEngine* e : {both.uring.get(), both.pread.get()}) {
    std::vector<std::thread> threads;
    std::vector<int> bad(4, 0);
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&, th] {
        std::mt19937 rng(100 + uint32_t(th));
        for (int round = 0; round < 25; ++round) {
          const int n_ops = round % 3 == 0 ? 1 : 1 + int(rng() % 40);
          std::vector<AlignedBuffer> bufs;
          std::vector<ReadOp> ops;
          for (int i = 0; i < n_ops; ++i) {
            const uint64_t off = (rng() % (n / 4096 - 4)) * 4096;
            const uint32_t len = uint32_t(4096 * (1 + rng() % 3));
            bufs.emplace_back(len);
            ops.push_back({rf.f.get(), off, len, bufs.back().data()});
          }
          if (!e->Wait(e->Submit(ops)).ok()) ++bad[size_t(th)];
          for (size_t i = 0; i < ops.size(); ++i)
            if (std::memcmp(bufs[i].data(), rf.src.data() + ops[i].offset, ops[i].length) != 0) ++bad[size_t(th)];
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int th = 0; th < 4; ++th) EXPECT_EQ(bad[size_t(th)], 0) << e->name() << " thread " << th;
  }
  for (bool force_pread : {false, true}) {
    std::string note;
    std::unique_ptr<ReadEngine> e = ReadEngine::Create(2, force_pread, &note);
    std::vector<AlignedBuffer> bufs;
    std::vector<ReadOp> ops;
    for (int i = 0; i < 300; ++i) {
      bufs.emplace_back(4096);
      ops.push_back({rf.f.get(), uint64_t(i % 256) * 4096, 4096, bufs.back().data()});
    }
    e->Submit(ops);
    e.reset();  // must return; the reads in flight finish into bufs first
    // Each buffer (zeroed at allocation) holds its read's bytes whole, or was never written: a read
    // cancelled at close; never a part, never another read's bytes.
    const std::vector<uint8_t> zero(4096, 0);
    for (int i = 0; i < 300; ++i) {
      const bool read = std::memcmp(bufs[size_t(i)].data(), rf.src.data() + ops[size_t(i)].offset, 4096) == 0;
      const bool untouched = std::memcmp(bufs[size_t(i)].data(), zero.data(), 4096) == 0;
      EXPECT_TRUE(read || untouched) << (force_pread ? "pread" : "io_uring") << " read " << i;
    }
  }
}

}  // namespace
}  // namespace impress::store
