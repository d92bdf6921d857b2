// The store's chunk size follows the model's KV bytes per token (ChunkTokensFor): a power of two
// from 64 to 1,024 whose fp16 K region stays within kChunkRegionTarget, checked against a brute
// force over shapes and on the shapes of the models people use.
#include <gtest/gtest.h>

#include <cstdint>

#include "pipeline/impress-pipeline.h"

namespace impress {
namespace {

ModelConfig Shape(int n_head_kv, int head_dim) {
  ModelConfig c;
  c.n_head = n_head_kv * 4;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  c.n_layer = 2;
  return c;
}

TEST(ChunkSize, FollowsTheKvBytesOfKnownModels) {
  EXPECT_EQ(ChunkTokensFor(Shape(3, 64)), 256) << "SmolLM2-135M: 384 bytes of K per token and layer";
  EXPECT_EQ(ChunkTokensFor(Shape(8, 64)), 128) << "Llama-3.2-1B: 1 KiB";
  EXPECT_EQ(ChunkTokensFor(Shape(8, 128)), 64) << "Llama-3.1-8B: 2 KiB";
  EXPECT_EQ(ChunkTokensFor(Shape(40, 128)), 64) << "OPT-13B: never below the paper's 64";
  EXPECT_EQ(ChunkTokensFor(Shape(1, 16)), 1024) << "a tiny model: never above 1,024";
}

TEST(ChunkSize, IsTheLargestPowerOfTwoInRangeWithinTheTarget) {
  for (int n_kv = 1; n_kv <= 64; ++n_kv)
    for (int hd : {16, 32, 64, 80, 96, 128, 256}) {
      const int c = ChunkTokensFor(Shape(n_kv, hd));
      const int64_t k_bytes = int64_t(n_kv) * hd * 2;
      ASSERT_GE(c, 64);
      ASSERT_LE(c, 1024);
      ASSERT_EQ(c & (c - 1), 0) << "a power of two";
      if (c > 64) {
        EXPECT_LE(c * k_bytes, kChunkRegionTarget) << n_kv << " x " << hd;
      }
      if (c < 1024) {
        EXPECT_GT(2 * c * k_bytes, kChunkRegionTarget) << n_kv << " x " << hd;
      }
    }
}

TEST(ChunkSize, StoreOptionsCarryIt) {
  EXPECT_EQ(StoreOptionsFor(Shape(3, 64), 3).chunk_tokens, 256);
  EXPECT_EQ(StoreOptionsFor(Shape(8, 128), 3).chunk_tokens, 64);
}

}  // namespace
}  // namespace impress
