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
#include <random>

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

TEST(UringIo, UringAndPreadReturnIdenticalBytesForBigBatches) {
  std::string dir = testing::TempDir("io");
  auto f = Env::Default()->OpenFile(dir + "/data", OpenOptions{});
  ASSERT_TRUE(f.ok());
  const size_t n = 4 << 20;
  AlignedBuffer src(n);
  std::mt19937 rng(1);
  for (size_t i = 0; i < n; ++i) src.data()[i] = uint8_t(rng());
  ASSERT_TRUE((*f)->WriteAt(0, src.data(), n).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  std::string note;
  auto uring = ReadEngine::Create(4, false, &note);
  auto pread = ReadEngine::Create(4, true, &note);
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
  for (ReadEngine* e : {uring.get(), pread.get()}) {
    std::vector<AlignedBuffer> bufs;
    std::vector<ReadOp> ops;
    std::vector<uint64_t> offs;
    for (int i = 0; i < 100; ++i) {  // 25x the queue depth
      uint64_t off = (rng() % (n / 4096 - 4)) * 4096;
      uint32_t len = uint32_t(4096 * (1 + rng() % 4));
      bufs.emplace_back(len);
      offs.push_back(off);
      ops.push_back({f->get(), off, len, bufs.back().data()});
    }
    auto t = e->Submit(ops);
    ASSERT_TRUE(e->Wait(t).ok()) << e->name();
    for (size_t i = 0; i < ops.size(); ++i)
      ASSERT_EQ(0, std::memcmp(bufs[i].data(), src.data() + offs[i], ops[i].length)) << e->name() << " op " << i;
    EXPECT_FALSE(e->Wait(t).ok()) << "a ticket waited twice must be refused";
    // Past the end of the file: an error naming the file, never a silent short read.
    AlignedBuffer tail(8192);
    auto t2 = e->Submit({ReadOp{f->get(), n - 4096, 8192, tail.data()}});
    Status st = e->Wait(t2);
    EXPECT_FALSE(st.ok()) << e->name();
    EXPECT_NE(st.message().find("short read"), std::string::npos) << st.ToString();
    // An empty batch completes at once.
    EXPECT_TRUE(e->Wait(e->Submit({})).ok());
  }
  f->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress::store
