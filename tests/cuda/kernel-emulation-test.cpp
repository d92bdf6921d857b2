// The CUDA backend's kernel bodies (engine/compute/cuda/cuda-kernel-bodies.cuh) and host plans
// (cuda-plan.h), run on the host through the emulator and compared with the CPU backend. This
// checks the index arithmetic, masking, online softmax, key splits and importance column sums
// of the GPU code on machines without a GPU (and under the sanitizers: each emulated block gets
// a heap buffer of exactly the shared memory the launcher reserves). What it cannot check: the
// launch configuration, CUDA API use and cuBLAS; tests/cuda/cuda-backend-test.cpp does on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/cuda/cuda-kernel-bodies.cuh"
#include "engine/compute/cuda/cuda-plan.h"
#include "tests/cuda/parity-util.h"

namespace impress::cuda {
namespace {

// Runs the plan's bodies through the emulator.
struct HostRunner {
  int RowPass(const RowPassBody& b, int n_row_tiles, int n_groups) {
    EmulateBlocks(b, n_row_tiles, n_groups, b.n_split, RowPassBody::SmemBytes(b.s.head_dim, b.out != nullptr));
    return 0;
  }
  int Combine(const CombineBody& b, int64_t n) {
    EmulateElementwise(b, n);
    return 0;
  }
  int Importance(const ImportanceBody& b, int n_heads) {
    const int bk = AttnKeyTile(b.s.head_dim);
    EmulateBlocks(b, (b.n_cols + bk - 1) / bk, n_heads, 1, ImportanceBody::SmemBytes(b.s.head_dim, kBlockThreads));
    return 0;
  }
};

TEST(KernelEmulation, NormsMatchCpuBackend) {
  auto cpu = MakeCpuBackend({1});
  for (int n_cols : {1, 7, 128, 576, 1000}) {
    const int n_rows = 5;
    const auto x = Random(size_t(n_rows) * n_cols, 1, -3, 3), w = Random(n_cols, 2), b = Random(n_cols, 3);
    std::vector<float> want(x.size()), got(x.size());
    cpu->RmsNorm(DevPtr<float>(want.data()), DevPtr<const float>(x.data()), DevPtr<const float>(w.data()), n_rows,
                 n_cols, 1e-5f);
    EmulateBlocks(RmsNormBody{got.data(), x.data(), w.data(), n_cols, 1e-5f}, n_rows, 1, 1,
                  RmsNormBody::SmemBytes(kBlockThreads));
    EXPECT_LT(RelMaxErr(got, want), 1e-6) << "rms norm, n_cols " << n_cols;

    cpu->LayerNorm(DevPtr<float>(want.data()), DevPtr<const float>(x.data()), DevPtr<const float>(w.data()),
                   DevPtr<const float>(b.data()), n_rows, n_cols, 1e-5f);
    EmulateBlocks(LayerNormBody{got.data(), x.data(), w.data(), b.data(), n_cols, 1e-5f}, n_rows, 1, 1,
                  LayerNormBody::SmemBytes(kBlockThreads));
    if (n_cols > 1) {
      EXPECT_LT(RelMaxErr(got, want), 1e-5) << "layer norm, n_cols " << n_cols;
    }

    // In place, as the forward pass uses it.
    std::vector<float> inplace = x;
    EmulateBlocks(RmsNormBody{inplace.data(), inplace.data(), w.data(), n_cols, 1e-5f}, n_rows, 1, 1,
                  RmsNormBody::SmemBytes(kBlockThreads));
    cpu->RmsNorm(DevPtr<float>(want.data()), DevPtr<const float>(x.data()), DevPtr<const float>(w.data()), n_rows,
                 n_cols, 1e-5f);
    EXPECT_LT(RelMaxErr(inplace, want), 1e-6);
  }
}

TEST(KernelEmulation, ElementwiseOpsMatchCpuBackend) {
  auto cpu = MakeCpuBackend({1});
  const int n_rows = 6, n_cols = 37, ld = 50;
  // RoPE with per-token positions (not consecutive), several heads.
  {
    const int n_tok = 5, n_heads = 3, hd = 64;
    auto x = Random(size_t(n_tok) * n_heads * hd, 4, -2, 2);
    std::vector<int32_t> pos = {0, 7, 8, 4000, 123};
    std::vector<float> inv(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv[i] = float(1.0 / std::pow(10000.0, 2.0 * i / hd));
    auto want = x, got = x;
    cpu->Rope({DevPtr<float>(want.data()), n_tok, n_heads, hd, DevPtr<const int32_t>(pos.data()),
               DevPtr<const float>(inv.data())});
    EmulateElementwise(RopeBody{got.data(), pos.data(), inv.data(), n_tok, n_heads, hd}, int64_t(n_tok) * hd / 2);
    EXPECT_LT(RelMaxErr(got, want), 1e-6);
  }
  // SwiGLU from one (rows, 2 * n) GEMM output: gate and up interleaved by row stride.
  {
    auto gu = Random(size_t(n_rows) * 2 * n_cols, 5, -6, 6);
    std::vector<float> want(size_t(n_rows) * n_cols), got(want.size());
    cpu->SwiGlu(DevPtr<float>(want.data()), DevPtr<const float>(gu.data()), DevPtr<const float>(gu.data() + n_cols),
                n_rows, n_cols, 2 * n_cols);
    EmulateElementwise(SwiGluBody{got.data(), gu.data(), gu.data() + n_cols, n_cols, 2 * n_cols},
                       int64_t(n_rows) * n_cols);
    EXPECT_LT(RelMaxErr(got, want), 1e-6);
  }
  // ReLU, Add, AddBias (strided), GetRows, ToF16 (strided).
  {
    auto x = Random(size_t(n_rows) * ld, 6, -2, 2), y = Random(x.size(), 7), bias = Random(n_cols, 8);
    auto want = x, got = x;
    cpu->Relu(DevPtr<float>(want.data()), want.size());
    EmulateElementwise(ReluBody{got.data()}, int64_t(got.size()));
    EXPECT_EQ(got, want);
    cpu->Add(DevPtr<float>(want.data()), DevPtr<const float>(y.data()), want.size());
    EmulateElementwise(AddBody{got.data(), y.data()}, int64_t(got.size()));
    EXPECT_EQ(got, want);
    cpu->AddBias(DevPtr<float>(want.data()), DevPtr<const float>(bias.data()), n_rows, n_cols, ld);
    EmulateElementwise(AddBiasBody{got.data(), bias.data(), n_cols, ld}, int64_t(n_rows) * n_cols);
    EXPECT_EQ(got, want);

    const std::vector<int32_t> ids = {3, 0, 5, 5, 1, 2};
    std::vector<float> rw(size_t(n_rows) * ld), rg(rw.size());
    cpu->GetRows(DevPtr<float>(rw.data()), DevPtr<const float>(x.data()), DevPtr<const int32_t>(ids.data()), n_rows,
                 ld);
    EmulateElementwise(GetRowsBody{rg.data(), x.data(), ids.data(), ld}, int64_t(n_rows) * ld);
    EXPECT_EQ(rg, rw);

    std::vector<f16_t> hw(size_t(n_rows) * 40, 0), hg(hw.size(), 0);
    auto big = Random(x.size(), 9, -70000, 70000);  // includes values that overflow to inf
    cpu->ToF16(DevPtr<f16_t>(hw.data()), 40, DevPtr<const float>(big.data()), ld, n_rows, n_cols);
    EmulateElementwise(ToHalfBody{hg.data(), big.data(), n_cols, 40, ld, false}, int64_t(n_rows) * n_cols);
    EXPECT_EQ(hg, hw);
  }
}

TEST(KernelEmulation, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);  // tie between 0x3f81 and 0x3f82 -> even
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(Bf16ToFp32(FloatToBf16(3.140625f)), 3.140625f);
}

// Naive column-major GEMM with cuBLAS semantics, to check MapRowMajorGemm.
void ColMajorGemmRef(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                     int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[p + size_t(i) * lda] : a[i + size_t(p) * lda];
        const float bv = tb ? b[j + size_t(p) * ldb] : b[p + size_t(j) * ldb];
        s += double(av) * bv;
      }
      c[i + size_t(j) * ldc] = float(s);
    }
}

TEST(KernelEmulation, RowMajorGemmMapsToColumnMajor) {
  auto cpu = MakeCpuBackend({1});
  const int m = 5, n = 7, k = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
      auto a = Random(size_t(ta ? k : m) * lda, 10), b = Random(size_t(tb ? n : k) * ldb, 11);
      std::vector<float> want(size_t(m) * ldc, 0), got(want.size(), 0);
      cpu->Gemm(ta ? Trans::kYes : Trans::kNo, tb ? Trans::kYes : Trans::kNo, m, n, k, 1.0f,
                DevPtr<const float>(a.data()), lda, DevPtr<const float>(b.data()), ldb, 0.0f,
                DevPtr<float>(want.data()), ldc);
      const ColMajorGemm g = MapRowMajorGemm(ta, tb, m, n, k, lda, ldb, ldc);
      ColMajorGemmRef(g.trans_first, g.trans_second, g.m, g.n, g.k, b.data(), g.ld_first, a.data(), g.ld_second,
                      got.data(), g.ldc);
      EXPECT_LT(RelMaxErr(got, want), 1e-6) << "ta " << ta << " tb " << tb;
    }
}

struct AttnCase {
  int n_new, n_prefix, n_head, n_head_kv, head_dim;
  bool include_new;
  int forced_split;  // 0: ChooseSplit with a 132-SM GPU
};
std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << "n_new " << c.n_new << " n_prefix " << c.n_prefix << " heads " << c.n_head << "/" << c.n_head_kv
            << " head_dim " << c.head_dim << (c.include_new ? " include_new" : "") << " split " << c.forced_split;
}

// The query side of a case's attention arguments, on host arrays (the CPU backend's "device").
AttentionQuery HostQuery(const AttnCase& c, const std::vector<float>& q, const std::vector<f16_t>& k_new) {
  return MakeAttentionQuery(c.n_new, c.n_head, c.n_head_kv, c.head_dim, DevPtr<const float>(q.data()),
                            DevPtr<const f16_t>(k_new.data()));
}

class AttentionEmulation : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionEmulation, MatchesCpuBackend) {
  const AttnCase c = GetParam();
  const int hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
  const auto q = Random(size_t(c.n_new) * nq, 20, -2, 2);
  const auto kn = RandomHalf(size_t(c.n_new) * nkv, 21, 2), vn = RandomHalf(kn.size(), 22);
  const auto kp = RandomHalf(size_t(c.n_prefix) * nkv + 1, 23, 2), vp = RandomHalf(kp.size(), 24);
  std::vector<int> imp_heads;
  for (int h = 0; h < c.n_head; h += 2) imp_heads.push_back(h);  // every other head, incl. both groups
  const int ld = c.n_prefix + (c.include_new ? c.n_new : 0);
  const float scale = 1.0f / std::sqrt(float(hd));

  AttentionArgs a;
  static_cast<AttentionQuery&>(a) = HostQuery(c, q, kn);
  a.v_new = DevPtr<const f16_t>(vn.data());
  a.n_prefix = c.n_prefix;
  a.k_prefix = DevPtr<const f16_t>(kp.data());
  a.v_prefix = DevPtr<const f16_t>(vp.data());
  std::vector<float> out_want(size_t(c.n_new) * nq), imp_want(imp_heads.size() * size_t(std::max(ld, 1)));
  a.out = DevPtr<float>(out_want.data());
  a.importance_heads = imp_heads;
  a.importance_include_new = c.include_new;
  a.importance = DevPtr<float>(imp_want.data());
  ASSERT_TRUE(MakeCpuBackend({1})->Attention(a).ok());

  const AttnShape s{c.n_new,   c.n_head,  c.n_head_kv, hd,          scale,     q.data(),
                    kn.data(), vn.data(), c.n_prefix,  c.n_head_kv, kp.data(), vp.data()};
  const int group = c.n_head / c.n_head_kv;
  const int n_split = c.forced_split
                          ? c.forced_split
                          : ChooseSplit(RowTiles(c.n_new * group) * c.n_head_kv, c.n_prefix + c.n_new, hd, 132);
  const AttnScratchSize z = ScratchFor(c.n_head, c.n_new, hd, n_split, true);
  std::vector<float> row_max(z.row_floats), row_sum(z.row_floats), part_m(z.part_floats), part_l(z.part_floats),
      part_o(z.o_floats);
  const AttnScratch sc{row_max.data(), row_sum.data(), part_m.data(), part_l.data(), part_o.data()};
  std::vector<float> out_got(out_want.size(), -7.0f), imp_got(imp_want.size(), -7.0f);
  HostRunner run;
  ASSERT_EQ(RunAttention(run, s, out_got.data(), imp_heads.data(), int(imp_heads.size()), c.include_new, imp_got.data(),
                         sc, n_split),
            0);
  EXPECT_LT(RelMaxErr(out_got, out_want), 2e-5) << "output, split " << n_split;
  if (ld > 0) {
    EXPECT_LT(RelMaxErr(imp_got, imp_want), 2e-5) << "importance, split " << n_split;
    // Each head's importance row sums to the number of rows that see a column: n_new.
    if (c.include_new) {
      for (size_t x = 0; x < imp_heads.size(); ++x) {
        double sum = 0;
        for (int j = 0; j < ld; ++j) sum += imp_got[x * ld + j];
        EXPECT_NEAR(sum, c.n_new, 1e-3 * c.n_new);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionEmulation,
                         ::testing::Values(AttnCase{1, 0, 4, 4, 64, false, 0},     // first token, nothing before it
                                           AttnCase{1, 0, 4, 4, 64, true, 0},      // importance over the new token only
                                           AttnCase{5, 0, 9, 3, 64, true, 0},      // SmolLM2 heads, no prefix
                                           AttnCase{1, 300, 9, 3, 64, false, 0},   // decode: keys split across blocks
                                           AttnCase{3, 130, 9, 3, 64, true, 3},    // forced split, GQA
                                           AttnCase{37, 70, 9, 3, 64, true, 1},    // row tiles cross token boundaries
                                           AttnCase{20, 45, 4, 2, 128, false, 2},  // head_dim 128: key tile 32
                                           AttnCase{6, 17, 2, 1, 80, true, 0},     // head_dim not a power of two
                                           AttnCase{4, 9, 2, 2, 256, false, 1}));  // the largest head_dim

class ScoreKeysEmulation : public ::testing::TestWithParam<AttnCase> {};

TEST_P(ScoreKeysEmulation, MatchesCpuBackend) {
  const AttnCase c = GetParam();
  const int hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
  const int group = c.n_head / c.n_head_kv;
  // Keys of the last kv head and the first, in that slot order (not the natural one).
  std::vector<int> prefix_kv = {c.n_head_kv - 1};
  if (c.n_head_kv > 1) prefix_kv.push_back(0);
  std::vector<int> slot_of(c.n_head_kv, -1);
  for (size_t sl = 0; sl < prefix_kv.size(); ++sl) slot_of[prefix_kv[sl]] = int(sl);
  std::vector<int> query_heads = {c.n_head - 1, 0};
  if (group > 1 && c.n_head - 1 != 1) query_heads.push_back(1);
  const int n_slots = int(prefix_kv.size());
  const auto q = Random(size_t(c.n_new) * nq, 30, -2, 2);
  const auto kn = RandomHalf(size_t(c.n_new) * nkv, 31, 2);
  const auto kp = RandomHalf(size_t(c.n_prefix) * n_slots * hd, 32, 2);
  const float scale = 1.0f / std::sqrt(float(hd));

  ScoreKeysArgs a;
  static_cast<AttentionQuery&>(a) = HostQuery(c, q, kn);
  a.n_prefix = c.n_prefix;
  a.k_prefix = DevPtr<const f16_t>(kp.data());
  a.prefix_kv_heads = prefix_kv;
  a.query_heads = query_heads;
  std::vector<float> want(query_heads.size() * c.n_prefix);
  a.importance = DevPtr<float>(want.data());
  ASSERT_TRUE(MakeCpuBackend({.n_threads = 1, .int8_key_scores = false})->ScoreKeys(a).ok());

  const AttnShape s{c.n_new,   c.n_head, c.n_head_kv, hd,      scale,     q.data(),
                    kn.data(), nullptr,  c.n_prefix,  n_slots, kp.data(), nullptr};
  const int n_q = int(query_heads.size());
  const int n_split =
      c.forced_split ? c.forced_split : ChooseSplit(RowTiles(c.n_new) * n_q, c.n_prefix + c.n_new, hd, 132);
  const AttnScratchSize z = ScratchFor(c.n_head, c.n_new, hd, n_split, false);
  std::vector<float> row_max(z.row_floats), row_sum(z.row_floats), part_m(z.part_floats), part_l(z.part_floats);
  const AttnScratch sc{row_max.data(), row_sum.data(), part_m.data(), part_l.data(), nullptr};
  std::vector<float> got(want.size(), -7.0f);
  HostRunner run;
  ASSERT_EQ(RunScoreKeys(run, s, query_heads.data(), slot_of.data(), n_q, got.data(), sc, n_split), 0);
  EXPECT_LT(RelMaxErr(got, want), 2e-5) << "split " << n_split;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ScoreKeysEmulation,
                         ::testing::Values(AttnCase{1, 200, 9, 3, 64, false, 0},   // decode-like, split
                                           AttnCase{24, 90, 9, 3, 64, false, 1},   // prefill, one pass
                                           AttnCase{7, 150, 4, 2, 128, false, 3},  // forced split
                                           AttnCase{3, 5, 2, 1, 80, false, 0}));   // MQA, odd head_dim

}  // namespace
}  // namespace impress::cuda
