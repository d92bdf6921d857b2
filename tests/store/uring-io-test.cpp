// ReadEngine: io_uring and pread give identical bytes for batches larger than the queue depth,
// reads past the end of a file are reported (not silently short), and tickets are single-use.
#include "store/uring-io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

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
