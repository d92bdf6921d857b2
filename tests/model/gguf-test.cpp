// GgufFile: reads back GGUF v2/v3 images written by tests/model/gguf-builder.h (every metadata
// type, arrays, nested arrays, tensors, alignment) and the real default model when present.
#include "engine/model/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tests/model/gguf-builder.h"

namespace impress {
namespace {

using test::GgufBuilder;

GgufBuilder AllTypesBuilder(uint32_t version) {
  GgufBuilder b;
  b.version = version;
  b.KvScalar<uint8_t>("t.u8", test::kU8, 200);
  b.KvScalar<int8_t>("t.i8", test::kI8, -100);
  b.KvScalar<uint16_t>("t.u16", test::kU16, 60000);
  b.KvScalar<int16_t>("t.i16", test::kI16, -30000);
  b.KvScalar<uint32_t>("t.u32", test::kU32, 4000000000u);
  b.KvScalar<int32_t>("t.i32", test::kI32, -2000000000);
  b.KvScalar<float>("t.f32", test::kF32, 1.5e-5f);
  b.KvScalar<uint8_t>("t.bool", test::kBool, 1);
  b.KvString("t.string", "héllo, wörld");
  b.KvScalar<uint64_t>("t.u64", test::kU64, 1ull << 40);
  b.KvScalar<int64_t>("t.i64", test::kI64, -(1ll << 50));
  b.KvScalar<double>("t.f64", test::kF64, 3.141592653589793);
  b.KvScalar<uint64_t>("t.u64.huge", test::kU64, ~0ull);
  b.KvStringArray("t.arr.str", {"a", "", "<|im_start|>", std::string("\0x", 2)});
  b.KvArray<int32_t>("t.arr.i32", test::kI32, {1, -2, 3, 2147483647});
  b.KvArray<float>("t.arr.f32", test::kF32, {0.5f, -1.25f, 1e30f});
  b.KvArray<uint8_t>("t.arr.u8", test::kU8, {0, 255});
  b.KvArray<int64_t>("t.arr.i64", test::kI64, {-5, 1ll << 40});
  b.KvArray<double>("t.arr.f64", test::kF64, {0.25, -8.0});
  b.KvArray<uint8_t>("t.arr.bool", test::kBool, {1, 0, 1});
  b.KvArray<uint16_t>("t.arr.empty", test::kU16, {});
  // [[1, 2], [3]] as an array of arrays of u32.
  b.Kv("t.arr.nested", test::kArray, [](test::ByteWriter& w) {
    w.U32(test::kArray);
    w.U64(2);
    w.U32(test::kU32);
    w.U64(2);
    w.U32(1);
    w.U32(2);
    w.U32(test::kU32);
    w.U64(1);
    w.U32(3);
  });
  b.KvString("general.architecture", "llama");
  return b;
}

Result<GgufFile> OpenBytes(const std::vector<uint8_t>& bytes) {
  return GgufFile::OpenFromMemory(bytes.data(), bytes.size(), "test.gguf");
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, ReadsEveryMetadataType) {
  const auto bytes = AllTypesBuilder(GetParam()).Build();
  auto f = OpenBytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), GetParam());
  EXPECT_EQ(f->kvs().size(), 23u);
  EXPECT_EQ(*f->GetInt("t.u8"), 200);
  EXPECT_EQ(*f->GetInt("t.i8"), -100);
  EXPECT_EQ(*f->GetInt("t.u16"), 60000);
  EXPECT_EQ(*f->GetInt("t.i16"), -30000);
  EXPECT_EQ(*f->GetInt("t.u32"), 4000000000ll);
  EXPECT_EQ(*f->GetInt("t.i32"), -2000000000);
  EXPECT_EQ(*f->GetInt("t.u64"), 1ll << 40);
  EXPECT_EQ(*f->GetInt("t.i64"), -(1ll << 50));
  EXPECT_EQ(f->GetInt("t.u64.huge").status().code(), Status::Code::kOutOfRange);
  EXPECT_EQ(*f->GetFloat("t.f32"), double(1.5e-5f));
  EXPECT_EQ(*f->GetFloat("t.f64"), 3.141592653589793);
  EXPECT_EQ(*f->GetFloat("t.u32"), 4000000000.0);  // integers read as numbers too
  EXPECT_TRUE(*f->GetBool("t.bool"));
  EXPECT_EQ(*f->GetString("t.string"), "héllo, wörld");

  auto strs = f->GetStringArray("t.arr.str");
  ASSERT_TRUE(strs.ok());
  EXPECT_EQ(*strs, (std::vector<std::string>{"a", "", "<|im_start|>", std::string("\0x", 2)}));
  auto views = f->GetStringViewArray("t.arr.str");
  ASSERT_TRUE(views.ok());
  EXPECT_EQ((*views)[2], "<|im_start|>");
  EXPECT_EQ(*f->GetArrayLength("t.arr.str"), 4u);
  EXPECT_EQ(*f->GetIntArray("t.arr.i32"), (std::vector<int32_t>{1, -2, 3, 2147483647}));
  EXPECT_EQ(*f->GetIntArray("t.arr.u8"), (std::vector<int32_t>{0, 255}));
  EXPECT_EQ(*f->GetInt64Array("t.arr.i64"), (std::vector<int64_t>{-5, 1ll << 40}));
  EXPECT_EQ(f->GetIntArray("t.arr.i64").status().code(), Status::Code::kOutOfRange);
  EXPECT_EQ(*f->GetFloatArray("t.arr.f32"), (std::vector<float>{0.5f, -1.25f, 1e30f}));
  EXPECT_EQ(*f->GetFloatArray("t.arr.f64"), (std::vector<float>{0.25f, -8.0f}));
  EXPECT_EQ(*f->GetBoolArray("t.arr.bool"), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(f->GetIntArray("t.arr.empty")->empty());

  const GgufValue* nested = f->Find("t.arr.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->type, GgufType::kArray);
  ASSERT_EQ(nested->elem_type, GgufType::kArray);
  ASSERT_EQ(nested->items.size(), 2u);
  EXPECT_EQ(nested->items[0].n_elems, 2u);
  EXPECT_EQ(nested->items[1].n_elems, 1u);
  EXPECT_EQ(nested->items[1].elem_type, GgufType::kU32);
}

TEST_P(GgufVersions, ReadsTensorsAtTheirAlignedOffsets) {
  GgufBuilder b;
  b.version = GetParam();
  b.KvAlignment(64);
  std::vector<float> a(6), c(3);
  for (int i = 0; i < 6; ++i) a[i] = float(i) * 0.5f;
  for (int i = 0; i < 3; ++i) c[i] = -float(i);
  b.tensors.push_back({"a", {3, 2}, 0, test::F32Bytes(a)});
  b.tensors.push_back({"c", {3}, 0, test::F32Bytes(c)});
  const auto bytes = b.Build();
  auto f = OpenBytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), 2u);
  auto ta = f->GetTensor("a");
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ((*ta)->n_dims, 2u);
  EXPECT_EQ((*ta)->ne[0], 3);
  EXPECT_EQ((*ta)->ne[1], 2);
  EXPECT_EQ((*ta)->n_elements, 6u);
  EXPECT_EQ((*ta)->n_bytes, 24u);
  EXPECT_EQ((*ta)->n_rows(), 2);
  EXPECT_EQ((*ta)->ShapeString(), "[3, 2]");
  EXPECT_EQ(std::memcmp((*ta)->data, a.data(), 24), 0);
  const GgufTensorInfo* tc = f->FindTensor("c");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->offset, 64u);
  EXPECT_EQ(std::memcmp(tc->data, c.data(), 12), 0);
  EXPECT_EQ(f->FindTensor("missing"), nullptr);
  auto missing = f->GetTensor("missing");
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersions, ::testing::Values(2u, 3u));

TEST(Gguf, WrongTypeNamesKeyAndTypes) {
  const auto bytes = AllTypesBuilder(3).Build();
  auto f = OpenBytes(bytes);
  ASSERT_TRUE(f.ok());
  auto s = f->GetString("t.u32");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("t.u32"), std::string::npos);
  EXPECT_NE(s.status().message().find("u32"), std::string::npos);
  EXPECT_NE(s.status().message().find("test.gguf"), std::string::npos);
  EXPECT_FALSE(f->GetInt("t.f32").ok());
  EXPECT_FALSE(f->GetBool("t.u8").ok());
  EXPECT_FALSE(f->GetStringArray("t.arr.i32").ok());
  EXPECT_FALSE(f->GetIntArray("t.arr.f32").ok());
  EXPECT_EQ(f->GetInt("no.such.key").status().code(), Status::Code::kNotFound);
}

TEST(Gguf, Version1IsUnsupportedWithAClearError) {
  auto b = AllTypesBuilder(1);
  auto f = OpenBytes(b.Build());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(f.status().message().find("version 1"), std::string::npos);
}

TEST(Gguf, OpenMapsAFileAndMovesKeepViewsValid) {
  const std::string dir = test::MakeTempDir("gguf");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/all.gguf";
  test::WriteFile(path, AllTypesBuilder(3).Build());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->path(), path);
  GgufFile moved = std::move(f).value();
  EXPECT_EQ(*moved.GetString("general.architecture"), "llama");
  EXPECT_EQ((*moved.GetStringViewArray("t.arr.str"))[2], "<|im_start|>");
  auto missing = GgufFile::Open(dir + "/nope.gguf");
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(Gguf, ReadsTheDefaultModel) {
  const std::string path = test::DefaultModelPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f->GetArrayLength("tokenizer.ggml.tokens"), 49152u);
  EXPECT_EQ(f->GetStringViewArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(f->GetIntArray("tokenizer.ggml.token_type")->size(), 49152u);
  EXPECT_EQ(f->tensors().size(), 272u);
  const GgufTensorInfo* emb = f->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne[0], 576);
  EXPECT_EQ(emb->ne[1], 49152);
}

}  // namespace
}  // namespace impress
