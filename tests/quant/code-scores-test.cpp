// engine/quant/code-scores.h: scores of int8 query rows against int4 key records, on every path
// this CPU runs, against the scalar reference and against a double-precision dot.
//  - Packed codes and scales are the records' codes and scales, padding columns zero.
//  - Scores equal the scalar kernel's bit for bit on every path (the integer dot is exact, the
//    float step the same), and are within the query's rounding of the exact dot of the unrounded
//    query and the key the record decodes to: |s - q.k| <= qs / 2 * ks * sum_c |code - 8| plus
//    the float rounding of the last steps (relative 2^-22).
// Paths the CPU lacks are skipped, naming the missing feature.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "engine/quant/code-scores.h"

namespace impress::quant {
namespace {

struct Records {
  std::vector<uint8_t> bytes;
  int n = 0, hd = 0, rec_bytes = 0, scale_at = 0, codes_at = 0;
  // Element c of key j as the format defines it: (code - 8) * scale.
  int Code(int j, int c) const {
    const uint8_t b = bytes[size_t(j) * rec_bytes + codes_at + c / 2];
    return (c % 2 ? b >> 4 : b & 0x0f) - 8;
  }
  float Scale(int j) const {
    f16_t s;
    std::memcpy(&s, bytes.data() + size_t(j) * rec_bytes + scale_at, 2);
    return Fp16ToFp32(s);
  }
};

// Records of three heads (the scored one in the middle), random codes, scales from zero to
// large, one key of all-zero codes (-8 everywhere) and one of all 15s.
Records RandomRecords(int n, int hd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0f, 0.5f);
  Records r;
  r.n = n;
  r.hd = hd;
  r.rec_bytes = 3 * (2 + hd / 2);
  r.scale_at = 2;
  r.codes_at = 6 + hd / 2;
  r.bytes.resize(size_t(n) * r.rec_bytes);
  for (int j = 0; j < n; ++j) {
    uint8_t* rec = r.bytes.data() + size_t(j) * r.rec_bytes;
    for (int x = 0; x < r.rec_bytes; ++x) rec[x] = uint8_t(byte(rng));
    const float s = j % 7 == 2 ? 0.0f : j % 7 == 4 ? 300.0f : scale(rng);
    const f16_t h = Fp32ToFp16(s);
    std::memcpy(rec + r.scale_at, &h, 2);
    if (j % 13 == 5) std::memset(rec + r.codes_at, 0x00, size_t(hd / 2));
    if (j % 13 == 9) std::memset(rec + r.codes_at, 0xff, size_t(hd / 2));
  }
  return r;
}

struct Shape {
  int rows, n, hd;
};

constexpr Shape kShapes[] = {{1, 5, 8},     {7, 33, 24},   {5, 40, 20},    {19, 200, 64},
                             {25, 257, 64}, {9, 100, 128}, {51, 640, 128}, {3, 31, 512}};

// Where dim c of a key (or a query row) lies among its code bytes: word 2 * (c / 8) + c % 2, byte
// (c % 8) / 2 of it (code-scores.h).
int WordOf(int c) { return 2 * (c / 8) + c % 2; }
int ByteOf(int c) { return (c % 8) / 2; }

// Eight keys at a time (hd a multiple of 8) and one by one (hd = 20: the last word pair half
// used), the padding columns and the dims past hd zero.
TEST(CodeKeyScoresPacking, PackedCodesAndScalesAreTheRecords) {
  for (const int hd : {24, 20}) {
    SCOPED_TRACE(testing::Message() << "hd " << hd);
    const Records r = RandomRecords(45, hd, 3);
    const int n_pad = CodeScorePad(r.n);
    ASSERT_EQ(n_pad, 64);
    const int words = CodeWords(hd);
    ASSERT_EQ(words, 6);
    std::vector<uint8_t> codes(size_t(words) * 4 * n_pad, uint8_t(99));
    std::vector<float> ks(size_t(n_pad), -1.0f);
    PackInt4Keys(r.bytes.data(), r.rec_bytes, r.scale_at, r.codes_at, r.n, hd, codes.data(), n_pad, ks.data());
    for (int j = 0; j < n_pad; ++j) {
      EXPECT_EQ(ks[size_t(j)], j < r.n ? r.Scale(j) : 0.0f) << j;
      for (int c = 0; c < words * 4; ++c) {
        const uint8_t got = codes[(size_t(WordOf(c)) * n_pad + j) * 4 + ByteOf(c)];
        EXPECT_EQ(got, j < r.n && c < hd ? r.Code(j, c) + 8 : 0) << "key " << j << " dim " << c;
      }
    }
  }
}

// A query row's codes: each dim rounded to the nearest of max |q| / 127's multiples, in the
// keys' layout, dims past hd zero, the sum of the codes alongside.
TEST(CodeKeyScoresPacking, QueryCodesAreTheRoundedRowInTheKeysLayout) {
  const int hd = 20, words = CodeWords(hd);
  std::vector<float> q(size_t(2) * hd);
  for (int c = 0; c < hd; ++c) {
    q[size_t(c)] = float(c - 9) * 0.37f;
    q[size_t(hd + c)] = 0.0f;
  }
  std::vector<int8_t> q8(size_t(2) * 4 * words, int8_t(99));
  std::vector<float> qs(2);
  std::vector<int32_t> q_sum(2);
  QuantizeQueriesForCodes(q.data(), 2, hd, q8.data(), qs.data(), q_sum.data());
  EXPECT_FLOAT_EQ(qs[0], 10 * 0.37f / 127);
  EXPECT_EQ(qs[1], 0.0f);
  EXPECT_EQ(q_sum[1], 0);
  int32_t sum = 0;
  for (int c = 0; c < words * 4; ++c) {
    const int got = q8[size_t(WordOf(c)) * 4 + ByteOf(c)];
    const int want = c < hd ? int(std::nearbyint(q[size_t(c)] / qs[0])) : 0;
    EXPECT_EQ(got, want) << "dim " << c;
    EXPECT_LE(std::abs(got), 127);
    sum += got;
    EXPECT_EQ(q8[size_t(4 * words) + size_t(WordOf(c)) * 4 + ByteOf(c)], 0) << "zero row, dim " << c;
  }
  EXPECT_EQ(q_sum[0], sum);
}

class CodeKeyScores : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    if (const char* missing = MissingCpuFeature(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << missing << " (needed by the " << KernelPathName(GetParam()) << " path)";
    }
  }
};

TEST_P(CodeKeyScores, ScoresEqualTheScalarKernelExactlyAndBoundTheExactDot) {
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(testing::Message() << "rows " << sh.rows << " n " << sh.n << " hd " << sh.hd);
    const Records r = RandomRecords(sh.n, sh.hd, 11 + uint32_t(sh.hd + sh.n));
    const int n_pad = CodeScorePad(sh.n);
    std::vector<uint8_t> codes(size_t(CodeWords(sh.hd)) * 4 * n_pad);
    std::vector<float> ks(static_cast<size_t>(n_pad));
    PackInt4Keys(r.bytes.data(), r.rec_bytes, r.scale_at, r.codes_at, sh.n, sh.hd, codes.data(), n_pad, ks.data());
    std::mt19937 rng(5 + uint32_t(sh.rows));
    std::normal_distribution<float> nd(0.0f, 0.4f);
    std::vector<float> q(size_t(sh.rows) * sh.hd);
    for (float& x : q) x = nd(rng);
    for (int c = 0; c < sh.hd; ++c) q[size_t(c)] = 0.0f;  // row 0: all zero
    if (sh.rows > 1) q[size_t(sh.hd) + 1] = 90.0f;        // row 1: an outlier
    std::vector<int8_t> q8(size_t(sh.rows) * 4 * CodeWords(sh.hd));
    std::vector<float> qs(size_t(sh.rows));
    std::vector<int32_t> q_sum(size_t(sh.rows));
    QuantizeQueriesForCodes(q.data(), sh.rows, sh.hd, q8.data(), qs.data(), q_sum.data());
    const int ld = n_pad + 3;
    std::vector<float> want(size_t(sh.rows) * ld, -1.0f), got(size_t(sh.rows) * ld, -1.0f);
    Int4KeyScores(KernelPath::kScalar, q8.data(), qs.data(), q_sum.data(), sh.rows, sh.hd, codes.data(), n_pad,
                  ks.data(), want.data(), ld);
    Int4KeyScores(GetParam(), q8.data(), qs.data(), q_sum.data(), sh.rows, sh.hd, codes.data(), n_pad, ks.data(),
                  got.data(), ld);
    for (int row = 0; row < sh.rows; ++row) {
      for (int j = 0; j < n_pad; ++j) {
        const float w = want[size_t(row) * ld + j], g = got[size_t(row) * ld + j];
        ASSERT_FALSE(std::isnan(g)) << row << "," << j;
        ASSERT_EQ(g, w) << "row " << row << " column " << j;
        if (j >= sh.n || row == 0) {
          ASSERT_EQ(w, 0.0f) << "padding column or zero row, " << row << "," << j;
          continue;
        }
        double exact = 0, bound = 0, magnitude = 0;
        for (int c = 0; c < sh.hd; ++c) {
          const double k = double(r.Code(j, c)) * r.Scale(j);
          exact += double(q[size_t(row) * sh.hd + c]) * k;
          magnitude += std::fabs(double(q[size_t(row) * sh.hd + c]) * k);
          bound += double(qs[size_t(row)]) / 2 * r.Scale(j) * std::abs(r.Code(j, c));
        }
        ASSERT_LE(std::fabs(double(w) - exact), bound * (1 + 1e-5) + 2.4e-7 * magnitude + 1e-30)
            << "row " << row << " key " << j;
      }
    }
    // The column past n_pad in each row is the caller's: untouched.
    for (int row = 0; row < sh.rows; ++row) EXPECT_EQ(got[size_t(row) * ld + n_pad], -1.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CodeKeyScores,
                         ::testing::Values(KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512),
                         [](const ::testing::TestParamInfo<KernelPath>& p) { return KernelPathName(p.param); });

}  // namespace
}  // namespace impress::quant
