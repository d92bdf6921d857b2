// The store benchmark runs end to end on a small configuration and reports sane numbers.
#include "bench/store-bench.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tests/store/store-test-util.h"

namespace impress::store {
namespace {

TEST(StoreBench, SmallRunReportsBandwidthAgainstFio) {
  StoreBenchOptions o;
  o.dir = testing::TempDir("bench");
  const bool full = std::getenv("IMPRESS_STORE_BENCH_FULL") != nullptr;  // the product defaults
  if (!full) {
    o.n_prefixes = 2;
    o.prefix_tokens = 1024;
    o.n_layer = 4;
    o.seconds = 0.5;
  }
  auto r = RunStoreBenchmark(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("%s", FormatStoreBench(*r).c_str());
  EXPECT_GT(r->store_mb_s, 0.0);
  EXPECT_EQ(r->block_bytes % 4096, 0u);
  EXPECT_EQ(r->chunks_per_batch, uint64_t(o.prefix_tokens / o.chunk_tokens));
  EXPECT_GT(r->batches, 1u);
  if (r->fio_mb_s == 0) std::printf("fio unavailable: %s\n", r->fio_error.c_str());
  else EXPECT_GT(r->ratio, 0.0);
  std::filesystem::remove_all(o.dir);
}

}  // namespace
}  // namespace impress::store
