// Dequantize(): bit-exact against gguf-py's quants.dequantize (tests/model/dequant-reference.py)
// for every supported type; sizes; unsupported types; the threaded path equals the serial one.
#include "engine/model/dequant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/model/gguf-builder.h"
#include "tests/model/python-ref.h"

namespace impress {
namespace {

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct TypeCase {
  const char* name;
  GgmlType type;
};

TEST(Dequant, MatchesGgufPythonReferenceBitForBit) {
  const std::string dir = test::MakeTempDir("dequant");
  ASSERT_FALSE(dir.empty());
  const int rc = test::RunReferenceScript("dequant-reference.py", "'" + dir + "'");
  if (rc == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  ASSERT_EQ(rc, 0) << "dequant-reference.py failed";
  const TypeCase cases[] = {{"F32", GgmlType::kF32},   {"F16", GgmlType::kF16},   {"BF16", GgmlType::kBF16},
                            {"Q8_0", GgmlType::kQ8_0}, {"Q4_0", GgmlType::kQ4_0}, {"Q4_1", GgmlType::kQ4_1},
                            {"Q4_K", GgmlType::kQ4_K}, {"Q6_K", GgmlType::kQ6_K}};
  for (const TypeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto raw = ReadAll(dir + "/" + c.name + ".bin");
    const auto ref_bytes = ReadAll(dir + "/" + c.name + ".f32");
    ASSERT_FALSE(raw.empty());
    ASSERT_EQ(ref_bytes.size() % 4, 0u);
    const uint64_t n = ref_bytes.size() / 4;
    auto size = GgmlByteSize(uint32_t(c.type), n);
    ASSERT_TRUE(size.ok()) << size.status().ToString();
    ASSERT_EQ(*size, raw.size());
    // Misaligned source on purpose: files need not align blocks to 4 bytes.
    std::vector<uint8_t> shifted(raw.size() + 1);
    std::memcpy(shifted.data() + 1, raw.data(), raw.size());
    std::vector<float> out(n, -12345.0f);
    ASSERT_TRUE(Dequantize(uint32_t(c.type), shifted.data() + 1, raw.size(), out.data(), n, c.name).ok());
    uint64_t n_diff = 0, first = n;
    for (uint64_t i = 0; i < n; ++i) {
      if (std::memcmp(&out[i], ref_bytes.data() + i * 4, 4) != 0) {
        if (first == n) first = i;
        ++n_diff;
      }
    }
    EXPECT_EQ(n_diff, 0u) << "first mismatch at element " << first;
  }
  std::filesystem::remove_all(dir);
}

TEST(Dequant, ThreadedEqualsSerial) {
  std::mt19937 rng(7);
  const uint64_t n_blocks = 40000;  // 1.28M elements: enough for the threaded path
  std::vector<uint8_t> raw(n_blocks * 20);
  for (auto& b : raw) b = uint8_t(rng());
  for (uint64_t ib = 0; ib < n_blocks; ++ib) {  // finite scales
    raw[ib * 20 + 1] &= 0x3b;
    raw[ib * 20 + 3] &= 0x3b;
  }
  const uint64_t n = n_blocks * 32;
  std::vector<float> a(n), b(n);
  ASSERT_TRUE(Dequantize(uint32_t(GgmlType::kQ4_1), raw.data(), raw.size(), a.data(), n, "t", 1).ok());
  ASSERT_TRUE(Dequantize(uint32_t(GgmlType::kQ4_1), raw.data(), raw.size(), b.data(), n, "t", 3).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
}

TEST(Dequant, SizesAreCheckedAndNamed) {
  EXPECT_EQ(*GgmlByteSize(uint32_t(GgmlType::kQ4_1), 64), 40u);
  EXPECT_EQ(*GgmlByteSize(uint32_t(GgmlType::kQ6_K), 512), 420u);
  EXPECT_EQ(*GgmlByteSize(uint32_t(GgmlType::kBF16), 3), 6u);
  EXPECT_FALSE(GgmlByteSize(uint32_t(GgmlType::kQ4_0), 33).ok());    // not whole blocks
  EXPECT_FALSE(GgmlByteSize(uint32_t(GgmlType::kF32), ~0ull).ok());  // overflows
  EXPECT_FALSE(GgmlByteSize(99, 32).ok());                           // unknown id
  std::vector<uint8_t> raw(18);
  std::vector<float> out(32);
  // Fewer bytes than the count needs.
  Status st = Dequantize(uint32_t(GgmlType::kQ4_0), raw.data(), 17, out.data(), 32, "blk.0.attn_q.weight");
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_NE(st.message().find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(Dequant, UnsupportedTypeNamesTypeAndTensor) {
  std::vector<uint8_t> raw(1024);
  std::vector<float> out(256);
  Status st = Dequantize(uint32_t(GgmlType::kIQ2_XXS), raw.data(), raw.size(), out.data(), 256, "blk.3.ffn_up.weight");
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("IQ2_XXS"), std::string::npos);
  EXPECT_NE(st.message().find("blk.3.ffn_up.weight"), std::string::npos);
  EXPECT_FALSE(CanDequantize(uint32_t(GgmlType::kQ2_K)));
  EXPECT_TRUE(CanDequantize(uint32_t(GgmlType::kQ5_K)));  // decoded by the quantized kernels' decoder
  EXPECT_TRUE(CanDequantize(uint32_t(GgmlType::kQ6_K)));
  st = Dequantize(77, raw.data(), raw.size(), out.data(), 32, "x");
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("77"), std::string::npos);
}

}  // namespace
}  // namespace impress

namespace impress {
namespace {

// Found by the safetensors fuzzer: a tensor with shape [2, 0] reached memcpy(nullptr, ...).
TEST(Dequant, EmptyTensorConvertsToNothing) {
  for (uint32_t type : {uint32_t(GgmlType::kF32), uint32_t(GgmlType::kF16), uint32_t(GgmlType::kQ4_1)}) {
    EXPECT_TRUE(Dequantize(type, nullptr, 0, nullptr, 0, "empty", 2).ok()) << type;
  }
}

}  // namespace
}  // namespace impress
