// Backend::MatMuls (several matrices over one input, as Q/K/V and gate/up are issued) against
// MatMul on each matrix alone: bit for bit, for mixed stored types, the decode GEMV and the
// prefill tiles, accumulation (beta 1) and strided outputs, one and two threads.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "tests/quant/random-blocks.h"

namespace impress {
namespace {

using quant::WeightType;

// A (rows, cols) matrix: fp32 values (type F32) or random realistic blocks of `type`.
Tensor RandomMatrix(int64_t rows, int64_t cols, uint32_t type, std::mt19937& rng) {
  Tensor t;
  t.shape = {rows, cols};
  if (type == 0) {
    std::normal_distribution<float> nd(0.0f, 0.05f);
    t.data.resize(size_t(rows * cols));
    for (float& v : t.data) v = nd(rng);
    return t;
  }
  const auto wt = static_cast<WeightType>(type);
  const int64_t block = quant::BlockBytes(wt);
  t.owned_bytes.resize(size_t(rows * cols / quant::BlockElements(wt) * block));
  for (size_t off = 0; off < t.owned_bytes.size(); off += size_t(block))
    quant::test::FillBlock(wt, quant::test::BlockCase::kRealistic, rng, t.owned_bytes.data() + off);
  t.ggml_type = type;
  return t;
}

struct Out {
  WeightRef w;
  float beta;
  int ldy;
};

// Runs `outs` over m rows of x once through MatMuls and once as separate MatMul calls, from
// the same starting y (random, so beta = 1 accumulates onto something), and compares bytes.
void ExpectSame(Backend& be, int m, const std::vector<float>& x, int ldx, const std::vector<Out>& outs) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> start(outs.size()), fused, alone;
  std::vector<Backend::MatMulOut> args;
  for (size_t j = 0; j < outs.size(); ++j) {
    start[j].resize(size_t(m) * size_t(outs[j].ldy));
    for (float& v : start[j]) v = nd(rng);
  }
  fused = start;
  alone = start;
  for (size_t j = 0; j < outs.size(); ++j)
    args.push_back({&outs[j].w, outs[j].beta, DevPtr<float>(fused[j].data()), outs[j].ldy});
  be.MatMuls(m, DevPtr<const float>(x.data()), ldx, args);
  for (size_t j = 0; j < outs.size(); ++j)
    be.MatMul(m, outs[j].w, DevPtr<const float>(x.data()), ldx, outs[j].beta, DevPtr<float>(alone[j].data()),
              outs[j].ldy);
  for (size_t j = 0; j < outs.size(); ++j) {
    const int64_t n = outs[j].w.n_rows;
    for (int i = 0; i < m; ++i) {
      // Columns past n of a strided output are not the op's: both runs leave them as they were.
      ASSERT_EQ(0, std::memcmp(fused[j].data() + size_t(i) * outs[j].ldy, alone[j].data() + size_t(i) * outs[j].ldy,
                               sizeof(float) * size_t(outs[j].ldy)))
          << "matrix " << j << " (" << n << " rows), m " << m << ", row " << i;
      ASSERT_EQ(0, std::memcmp(fused[j].data() + size_t(i) * outs[j].ldy + n,
                               start[j].data() + size_t(i) * outs[j].ldy + n, sizeof(float) * size_t(outs[j].ldy - n)));
    }
  }
}

class MatMulsTest : public ::testing::TestWithParam<int> {};  // the pool's threads

TEST_P(MatMulsTest, EqualSeparateMatMulsBitForBit) {
  auto be = MakeCpuBackend({.n_threads = GetParam()});
  std::mt19937 rng(5);
  const int64_t k = 512;
  // Q/K/V-like (a Q4_K_M-like mix: two types, two activation formats), an F16 and an fp32
  // matrix, and a fifth matrix: more than one GEMV job holds.
  std::vector<Tensor> tensors;
  const std::vector<std::pair<int64_t, uint32_t>> shapes = {{576, uint32_t(WeightType::kQ4_1)},
                                                            {192, uint32_t(WeightType::kQ8_0)},
                                                            {192, uint32_t(WeightType::kQ6_K)},
                                                            {64, uint32_t(WeightType::kF16)},
                                                            {96, 0},
                                                            {1536, uint32_t(WeightType::kQ4_K)}};
  for (const auto& [rows, type] : shapes) tensors.push_back(RandomMatrix(rows, k, type, rng));
  std::vector<WeightRef> refs;
  for (const Tensor& t : tensors) {
    auto r = be->MapWeight(t);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    refs.push_back(*r);
  }
  std::normal_distribution<float> nd;
  for (int m : {1, 2, 3, 6}) {  // 6: the prefill (tiled) path
    const int ldx = int(k) + 8;
    std::vector<float> x(size_t(m) * ldx);
    for (float& v : x) v = nd(rng);
    for (float beta : {0.0f, 1.0f}) {
      std::vector<Out> outs;
      for (size_t j = 0; j < refs.size(); ++j)  // every other output strided (staged, then copied)
        outs.push_back({refs[j], beta, int(refs[j].n_rows) + (j % 2 ? 5 : 0)});
      ExpectSame(*be, m, x, ldx, outs);
      ExpectSame(*be, m, x, ldx, std::vector<Out>(outs.begin(), outs.begin() + 3));  // Q/K/V
      ExpectSame(*be, m, x, ldx, std::vector<Out>(outs.begin() + 5, outs.end()));    // one alone
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MatMulsTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace impress
