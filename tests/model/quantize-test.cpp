// QuantizeRow and GgufWriter: rows of every type we quantize to (random values of several
// magnitudes, outliers, all-zero and constant blocks) are written to a GGUF by GgufWriter; the
// `gguf` Python package reads the file (tests/model/quantize-reference.py) and its
// dequantization must equal ours bit for bit (so the bytes mean to an independent decoder what
// they mean to us), metadata must read back the same in Python and in our reader, and the
// decoded values must be within each type's error bound of the input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/model/dequant.h"
#include "engine/model/gguf-writer.h"
#include "engine/model/gguf.h"
#include "engine/model/quantize-blocks.h"
#include "engine/model/quantize-model.h"
#include "engine/quant/quant-kernels.h"
#include "tests/model/gguf-builder.h"
#include "tests/model/python-ref.h"

namespace impress {
namespace {

struct TypeCase {
  const char* name;
  GgmlType type;
  double max_rel_rms;  // bound on rms(decoded - input) / rms(input) over the random rows
};

// Bounds: uniform rounding error is step / sqrt(12); these leave ~1.5x margin over measured.
constexpr TypeCase kTypes[] = {
    {"F32", GgmlType::kF32, 0.0},     {"F16", GgmlType::kF16, 1e-3},    {"BF16", GgmlType::kBF16, 5e-3},
    {"Q8_0", GgmlType::kQ8_0, 0.01},  {"Q4_0", GgmlType::kQ4_0, 0.15},  {"Q4_1", GgmlType::kQ4_1, 0.12},
    {"Q5_0", GgmlType::kQ5_0, 0.075}, {"Q5_1", GgmlType::kQ5_1, 0.06},  {"Q4_K", GgmlType::kQ4_K, 0.12},
    {"Q5_K", GgmlType::kQ5_K, 0.06},  {"Q6_K", GgmlType::kQ6_K, 0.035},
};

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

constexpr int64_t kCols = 512, kRows = 48;

// Rows 0..39: N(0, s^2) with s from 1e-4 to 1e3 (row-dependent); rows 40..47: special blocks.
std::vector<float> TestValues() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(size_t(kRows * kCols));
  for (int64_t r = 0; r < kRows; ++r) {
    const float s = std::pow(10.0f, -4.0f + 7.0f * float(r % 40) / 39.0f);
    for (int64_t c = 0; c < kCols; ++c) v[size_t(r * kCols + c)] = s * nd(rng);
  }
  float* sp = v.data() + 40 * kCols;
  std::fill(sp, sp + kCols, 0.0f);                                                                // all zero
  std::fill(sp + kCols, sp + 2 * kCols, 0.25f);                                                   // constant positive
  std::fill(sp + 2 * kCols, sp + 3 * kCols, -3.0f);                                               // constant negative
  for (int64_t c = 0; c < kCols; ++c) sp[3 * kCols + c] = c % 97 == 0 ? 50.0f : 0.01f * nd(rng);  // outliers
  for (int64_t c = 0; c < kCols; ++c) sp[4 * kCols + c] = std::abs(nd(rng)) + 2.0f;  // all positive, offset
  for (int64_t c = 0; c < kCols; ++c) sp[5 * kCols + c] = -std::abs(nd(rng)) - 2.0f;
  return v;
}

TEST(Quantize, RoundTripsThroughGgufPythonBitForBitWithinBounds) {
  const std::string dir = test::MakeTempDir("quantize");
  ASSERT_FALSE(dir.empty());
  const std::vector<float> x = TestValues();
  GgufWriter w;
  w.SetString("general.architecture", "test");
  w.SetU32("test.u32", 4000000000u);
  w.SetI32("test.i32", -7);
  w.SetF32("test.f32", 0.125f);
  w.SetBool("test.bool", true);
  w.SetStringArray("test.strings", {"a", "", "ünï"});
  w.SetI32Array("test.ints", {1, -2, 3});
  w.SetF32Array("test.floats", {0.5f, -1.5f});
  w.SetString("test.u32", "replaced");  // a later Set replaces the value
  std::vector<std::vector<uint8_t>> encoded;
  for (const TypeCase& t : kTypes) {
    ASSERT_TRUE(CanQuantize(uint32_t(t.type))) << t.name;
    ASSERT_TRUE(w.AddTensor(t.name, {kRows, kCols}, uint32_t(t.type)).ok()) << t.name;
    auto size = GgmlByteSize(uint32_t(t.type), uint64_t(kRows * kCols));
    ASSERT_TRUE(size.ok());
    std::vector<uint8_t> bytes(*size);
    const Status st = QuantizeRow(uint32_t(t.type), x.data(), kRows * kCols, bytes.data());
    ASSERT_TRUE(st.ok()) << t.name << ": " << st.ToString();
    encoded.push_back(std::move(bytes));
  }
  EXPECT_FALSE(w.AddTensor("Q8_0", {2, 32}, uint32_t(GgmlType::kQ8_0)).ok()) << "duplicate name";
  EXPECT_FALSE(w.AddTensor("odd", {2, 100}, uint32_t(GgmlType::kQ4_K)).ok()) << "rows not whole blocks";
  const std::string path = dir + "/rt.gguf";
  ASSERT_TRUE(w.Write(path, [&](size_t i, std::vector<uint8_t>* b) {
                 *b = encoded[i];
                 return Status::Ok();
               }).ok());

  // Our reader sees what was written.
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("test.u32"), "replaced");
  EXPECT_EQ(*f->GetInt("test.i32"), -7);
  EXPECT_EQ(*f->GetFloat("test.f32"), 0.125);
  EXPECT_EQ(*f->GetStringArray("test.strings"), (std::vector<std::string>{"a", "", "ünï"}));
  ASSERT_EQ(f->tensors().size(), std::size(kTypes));

  const int rc = test::RunReferenceScript("quantize-reference.py", "'" + path + "' '" + dir + "'");
  if (rc == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  ASSERT_EQ(rc, 0) << "quantize-reference.py failed";
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  EXPECT_EQ(meta["kv"]["test.u32"], "replaced");
  EXPECT_EQ(meta["kv"]["test.bool"], true);
  EXPECT_EQ(meta["kv"]["test.ints"], nlohmann::json({1, -2, 3}));
  EXPECT_EQ(meta["kv"]["test.strings"], nlohmann::json({"a", "", "ünï"}));

  for (size_t k = 0; k < std::size(kTypes); ++k) {
    const TypeCase& t = kTypes[k];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(meta["tensors"][t.name]["type"], t.name);
    EXPECT_EQ(meta["tensors"][t.name]["shape"], nlohmann::json({kCols, kRows}));
    const auto ref = ReadAll(dir + "/" + t.name + ".f32");
    ASSERT_EQ(ref.size(), x.size() * 4);
    std::vector<float> ours(x.size());
    ASSERT_TRUE(
        Dequantize(uint32_t(t.type), encoded[k].data(), encoded[k].size(), ours.data(), ours.size(), t.name).ok());
    EXPECT_EQ(std::memcmp(ours.data(), ref.data(), ref.size()), 0) << "our decode differs from gguf's";
    // Error per row, relative to the row's rms; special rows are exact or nearly.
    double worst = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      double se = 0, ss = 0;
      for (int64_t c = 0; c < kCols; ++c) {
        const size_t i = size_t(r * kCols + c);
        ASSERT_TRUE(std::isfinite(ours[i]));
        se += (double(ours[i]) - x[i]) * (double(ours[i]) - x[i]);
        ss += double(x[i]) * x[i];
      }
      const double rel = ss > 0 ? std::sqrt(se / ss) : std::sqrt(se);
      if (r == 40) {
        EXPECT_EQ(se, 0.0) << "an all-zero row decodes to zeros";
      }
      // Row 0 (values ~1e-4) puts Q6_K's fp16 super-block scale (~1e-7) among fp16 subnormals,
      // which the format cannot avoid: a looser bound there.
      if (r == 0) {
        EXPECT_LT(rel, 0.1) << "values of 1e-4";
      } else if (r < 40 || r >= 43) {
        worst = std::max(worst, rel);
      }
      if (r == 41 || r == 42) {
        EXPECT_LT(rel, 0.01) << "constant row " << r;
      }
    }
    std::printf("%-5s worst relative rms error %.4g (bound %.3g)\n", t.name, worst, t.max_rel_rms);
    EXPECT_LE(worst, t.max_rel_rms);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(Quantize, RefusesBadInput) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_EQ(QuantizeRow(uint32_t(GgmlType::kQ4_K), x.data(), 64, out.data()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(uint32_t(GgmlType::kQ2_K), x.data(), 256, out.data()).code(), Status::Code::kUnsupported);
  x[5] = NAN;
  EXPECT_EQ(QuantizeRow(uint32_t(GgmlType::kQ8_0), x.data(), 64, out.data()).code(), Status::Code::kInvalidArgument);
  x[5] = 1e30f;
  EXPECT_EQ(QuantizeRow(uint32_t(GgmlType::kQ8_0), x.data(), 64, out.data()).code(), Status::Code::kInvalidArgument);
}

TEST(Quantize, Q4KMRecipeFollowsItsRule) {
  const auto q6 = uint32_t(GgmlType::kQ6_K), q4 = uint32_t(GgmlType::kQ4_K);
  // 16 layers: more bits for layers 0-1, 14-15 and 4, 7, 10, 13.
  for (int il = 0; il < 16; ++il) {
    const bool more = il < 2 || il >= 14 || (il - 2) % 3 == 2;
    const std::string b = "blk." + std::to_string(il) + ".";
    EXPECT_EQ(RecipeType("q4_k_m", b + "attn_v.weight", il, 16, 2048, true, false), more ? q6 : q4) << il;
    EXPECT_EQ(RecipeType("q4_k_m", b + "ffn_down.weight", il, 16, 8192, true, false), more ? q6 : q4) << il;
    EXPECT_EQ(RecipeType("q4_k_m", b + "attn_q.weight", il, 16, 2048, true, false), q4) << il;
  }
  EXPECT_EQ(RecipeType("q4_k_m", "output.weight", -1, 16, 2048, true, true), q6);
  EXPECT_EQ(RecipeType("q4_k_m", "token_embd.weight", -1, 16, 2048, true, false), q4);
  // Rows of 896 values are not whole 256-blocks: Q4_K -> Q5_0, Q6_K -> Q8_0.
  EXPECT_EQ(RecipeType("q4_k_m", "blk.5.attn_q.weight", 5, 24, 896, true, false), uint32_t(GgmlType::kQ5_0));
  EXPECT_EQ(RecipeType("q4_k_m", "output.weight", -1, 24, 896, true, true), uint32_t(GgmlType::kQ8_0));
  EXPECT_EQ(RecipeType("q8_0", "blk.0.attn_norm.weight", 0, 24, 896, false, false), uint32_t(GgmlType::kF32));
  EXPECT_FALSE(CheckRecipe("q3_k").ok());
}

}  // namespace
}  // namespace impress
