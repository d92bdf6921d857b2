// Hostile model files: every malformed GGUF / safetensors / HF folder gets a clear Status (naming
// the file and what was wrong) and no crash. Run under ASan in CI; truncated images are copied
// into exact-size heap buffers so any over-read is caught.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>

#include "base/fp16.h"
#include "engine/model/gguf.h"
#include "engine/model/model-loader.h"
#include "engine/model/random-model.h"
#include "engine/model/safetensors.h"
#include "tests/model/fifo-guard.h"
#include "tests/model/gguf-builder.h"

namespace impress {
namespace {

namespace fs = std::filesystem;
using test::GgufBuilder;

constexpr uint64_t k2p63 = uint64_t(1) << 63;

// Parses `bytes` from an exact-size heap copy (so ASan sees any read past the end).
Status ParseGguf(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto f = GgufFile::OpenFromMemory(copy.get(), bytes.size(), "bad.gguf");
  return f.ok() ? Status::Ok() : f.status();
}

Status ParseSt(const std::string& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto f = SafetensorsFile::OpenFromMemory(copy.get(), bytes.size(), "bad.safetensors");
  return f.ok() ? Status::Ok() : f.status();
}

// Expects a failure whose message names the file and contains `needle`.
#define EXPECT_BAD(status_expr, needle)                                           \
  do {                                                                            \
    const Status _s = (status_expr);                                              \
    EXPECT_FALSE(_s.ok());                                                        \
    EXPECT_NE(_s.message().find(needle), std::string::npos) << _s.ToString();     \
    EXPECT_TRUE(_s.message().find("bad.") != std::string::npos) << _s.ToString(); \
  } while (0)

// A valid image with metadata of several types and two tensors; the last tensor ends exactly at
// the end of the file, so every proper prefix is invalid.
GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.KvString("general.architecture", "llama");
  b.KvScalar<uint32_t>("llama.block_count", test::kU32, 1);
  b.KvStringArray("tokenizer.ggml.tokens", {"a", "bc", "<s>"});
  b.KvArray<float>("tokenizer.ggml.scores", test::kF32, {0.f, -1.f, -2.f});
  std::vector<float> x(8, 1.0f), y(16, 2.0f);
  b.tensors.push_back({"x", {8}, 0, test::F32Bytes(x)});
  b.tensors.push_back({"y", {8, 2}, 0, test::F32Bytes(y)});
  return b;
}

TEST(BadGguf, ValidImageParses) { EXPECT_TRUE(ParseGguf(ValidBuilder().Build()).ok()); }

TEST(BadGguf, EveryTruncationFails) {
  const auto full = ValidBuilder().Build();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const Status s = ParseGguf(std::vector<uint8_t>(full.begin(), full.begin() + long(cut)));
    ASSERT_FALSE(s.ok()) << "cut at " << cut;
    ASSERT_NE(s.message().find("bad.gguf"), std::string::npos) << s.ToString();
  }
}

TEST(BadGguf, TruncatedFileOnDiskFails) {
  const std::string dir = test::MakeTempDir("bad-gguf");
  const auto full = ValidBuilder().Build();
  for (size_t cut : {size_t(3), size_t(20), full.size() / 2, full.size() - 1}) {
    const std::string p = dir + "/cut.gguf";
    test::WriteFile(p, std::vector<uint8_t>(full.begin(), full.begin() + long(cut)));
    auto f = GgufFile::Open(p);
    EXPECT_FALSE(f.ok()) << cut;
    EXPECT_NE(f.status().message().find(p), std::string::npos);
  }
  test::WriteFile(dir + "/empty.gguf", {});
  EXPECT_EQ(GgufFile::Open(dir + "/empty.gguf").status().code(), Status::Code::kCorruption);
  EXPECT_FALSE(LoadModel(dir + "/empty.gguf").ok());
  fs::remove_all(dir);
}

TEST(BadGguf, WrongMagic) {
  auto bytes = ValidBuilder().Build();
  std::memcpy(bytes.data(), "GGML", 4);
  EXPECT_BAD(ParseGguf(bytes), "magic");
  const std::string text = "{\"not\": \"a model\"}";
  EXPECT_BAD(ParseGguf(std::vector<uint8_t>(text.begin(), text.end())), "magic");
}

TEST(BadGguf, BigEndianAndUnknownVersions) {
  auto b = ValidBuilder();
  b.version = 0x03000000;
  EXPECT_BAD(ParseGguf(b.Build()), "big-endian");
  b.version = 4;
  EXPECT_BAD(ParseGguf(b.Build()), "version 4");
}

TEST(BadGguf, CountsOf2To63) {
  auto b = ValidBuilder();
  b.n_tensors_override = k2p63;
  EXPECT_BAD(ParseGguf(b.Build()), "tensor count 9223372036854775808");
  b = ValidBuilder();
  b.n_kv_override = k2p63;
  EXPECT_BAD(ParseGguf(b.Build()), "key count 9223372036854775808");
  b = ValidBuilder();
  b.n_kv_override = ~0ull - 1;
  EXPECT_BAD(ParseGguf(b.Build()), "key count");
  b = ValidBuilder();
  b.n_kv_override = 5;  // one more than there are: runs into the tensor infos and fails somewhere
  EXPECT_FALSE(ParseGguf(b.Build()).ok());
}

TEST(BadGguf, DimsWhoseProductOverflows) {
  auto b = ValidBuilder();
  b.tensors[1].ne = {1ull << 32, 1ull << 32, 1ull << 32};
  EXPECT_BAD(ParseGguf(b.Build()), "overflows");
  b.tensors[1].ne = {1ull << 31, 1ull << 31, 4};  // exactly 2^64: wraps to 0
  EXPECT_BAD(ParseGguf(b.Build()), "overflows");
  b.tensors[1].ne = {8, k2p63};  // a dim that is negative as int64
  EXPECT_BAD(ParseGguf(b.Build()), "dimension 1");
  b.tensors[1].ne = {8, 0};
  EXPECT_BAD(ParseGguf(b.Build()), "dimension 1");
  b.tensors[1].ne = {1ull << 62, 1};  // fits in elements; bytes (x4) overflow
  EXPECT_BAD(ParseGguf(b.Build()), "overflows");
  b.tensors[1].ne = {1, 1, 1, 1, 1};
  EXPECT_BAD(ParseGguf(b.Build()), "5 dimensions");
}

TEST(BadGguf, OffsetsPastTheEnd) {
  auto b = ValidBuilder();
  b.tensors[1].offset_override = 1ull << 40;
  EXPECT_BAD(ParseGguf(b.Build()), "past the end");
  b.tensors[1].offset_override = ~0ull - 31;  // aligned; offset + size overflows
  EXPECT_BAD(ParseGguf(b.Build()), "past the end");
  b.tensors[1].offset_override = 64;  // in the file, but the data runs past its end
  EXPECT_BAD(ParseGguf(b.Build()), "past the end");
  b.tensors[1].offset_override = 4;  // not aligned
  EXPECT_BAD(ParseGguf(b.Build()), "alignment");
  b.tensors[1].offset_override = 0;  // overlaps x
  EXPECT_BAD(ParseGguf(b.Build()), "overlap");
}

TEST(BadGguf, AbsurdStringLengths) {
  // A key of length 2^63.
  test::ByteWriter w;
  w.Bytes("GGUF", 4);
  w.U32(3);
  w.U64(0);
  w.U64(1);
  w.U64(k2p63);
  w.Bytes(std::string(100, 'k').data(), 100);
  EXPECT_BAD(ParseGguf(w.buf), "string length 9223372036854775808");
  // A string value of length 2^64 - 1.
  auto b = ValidBuilder();
  b.Kv("s", test::kString, [](test::ByteWriter& v) { v.U64(~0ull); });
  EXPECT_BAD(ParseGguf(b.Build()), "string length");
  // One token of the tokens array, far too long.
  b = ValidBuilder();
  b.Kv("t", test::kArray, [](test::ByteWriter& v) {
    v.U32(test::kString);
    v.U64(2);
    v.Str("ok");
    v.U64(1ull << 40);
  });
  EXPECT_BAD(ParseGguf(b.Build()), "'t' element 1");
  // A tensor name longer than the file.
  b = ValidBuilder();
  b.tensors[0].name = std::string(10, 'n');
  auto bytes = b.Build();
  const std::string key = "nnnnnnnnnn";
  auto pos = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(pos, bytes.end());
  const uint64_t huge = 1ull << 50;
  std::memcpy(&*(pos - 8), &huge, 8);
  EXPECT_BAD(ParseGguf(bytes), "tensor #0");
}

TEST(BadGguf, HugeArrays) {
  auto b = ValidBuilder();
  b.Kv("a", test::kArray, [](test::ByteWriter& v) {
    v.U32(test::kU64);
    v.U64(1ull << 61);  // x 8 bytes = 2^64: must not wrap
  });
  EXPECT_BAD(ParseGguf(b.Build()), "cannot fit");
  b = ValidBuilder();
  b.Kv("a", test::kArray, [](test::ByteWriter& v) {
    v.U32(test::kString);
    v.U64(k2p63);
  });
  EXPECT_BAD(ParseGguf(b.Build()), "cannot fit");
  b = ValidBuilder();
  b.Kv("a", test::kArray, [](test::ByteWriter& v) {  // arrays nested 100 deep
    for (int i = 0; i < 100; ++i) {
      v.U32(test::kArray);
      v.U64(1);
    }
  });
  EXPECT_BAD(ParseGguf(b.Build()), "nested");
  b = ValidBuilder();
  b.Kv("a", test::kArray, [](test::ByteWriter& v) {
    v.U32(77);
    v.U64(1);
  });
  EXPECT_BAD(ParseGguf(b.Build()), "element type 77");
}

TEST(BadGguf, UnknownTypesAndValues) {
  auto b = ValidBuilder();
  b.tensors[1].type = 99;
  const Status s = ParseGguf(b.Build());
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find("'y'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("99"), std::string::npos) << s.ToString();
  b = ValidBuilder();
  b.Kv("k", 13, [](test::ByteWriter&) {});
  EXPECT_BAD(ParseGguf(b.Build()), "unknown value type 13");
  b = ValidBuilder();
  b.KvScalar<uint8_t>("flag", test::kBool, 7);
  EXPECT_BAD(ParseGguf(b.Build()), "bool");
  b = ValidBuilder();
  b.tensors[1].type = 2;  // Q4_0 with a row of 8: not whole blocks
  EXPECT_BAD(ParseGguf(b.Build()), "block size");
}

TEST(BadGguf, DuplicatesAndAlignment) {
  auto b = ValidBuilder();
  b.tensors[1].name = "x";
  EXPECT_BAD(ParseGguf(b.Build()), "more than once");
  b = ValidBuilder();
  b.KvScalar<uint32_t>("llama.block_count", test::kU32, 2);
  EXPECT_BAD(ParseGguf(b.Build()), "more than once");
  b = ValidBuilder();
  b.KvScalar<uint32_t>("general.alignment", test::kU32, 3);
  EXPECT_BAD(ParseGguf(b.Build()), "power of two");
  b = ValidBuilder();
  b.KvScalar<uint32_t>("general.alignment", test::kU32, 0);
  EXPECT_BAD(ParseGguf(b.Build()), "power of two");
  b = ValidBuilder();
  b.KvString("general.alignment", "32");
  EXPECT_BAD(ParseGguf(b.Build()), "general.alignment");
}

// --- safetensors ------------------------------------------------------------------------------

std::string StImage(const std::string& header, size_t n_data, uint64_t len_override = ~0ull) {
  std::string out(8, '\0');
  const uint64_t len = len_override != ~0ull ? len_override : header.size();
  std::memcpy(out.data(), &len, 8);
  return out + header + std::string(n_data, '\x01');
}

const char* kGoodHeader =
    R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
    R"( "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}})";

TEST(BadSafetensors, ValidImageParses) {
  auto f = SafetensorsFile::OpenFromMemory(nullptr, 0, "bad.safetensors");
  EXPECT_FALSE(f.ok());
  const std::string img = StImage(kGoodHeader, 32);
  auto g = SafetensorsFile::OpenFromMemory(img.data(), img.size(), "ok.safetensors");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->tensors().size(), 2u);
  EXPECT_EQ(g->metadata().at("format"), "pt");
  ASSERT_NE(g->FindTensor("b"), nullptr);
  EXPECT_EQ(g->FindTensor("b")->shape, (std::vector<int64_t>{4}));
  std::vector<float> out(4);
  ASSERT_TRUE(SafetensorsToF32(*g->FindTensor("b"), "ok", out.data()).ok());
  EXPECT_EQ(out[0], Bf16ToFp32(0x0101));
}

TEST(BadSafetensors, EveryTruncationFails) {
  const std::string img = StImage(kGoodHeader, 32);
  for (size_t cut = 0; cut < img.size(); ++cut) {
    const Status s = ParseSt(img.substr(0, cut));
    ASSERT_FALSE(s.ok()) << "cut at " << cut;
  }
}

TEST(BadSafetensors, HeaderLengthPastEofOrAbsurd) {
  EXPECT_BAD(ParseSt(StImage(kGoodHeader, 32, 100000)), "past the end");
  EXPECT_BAD(ParseSt(StImage(kGoodHeader, 32, k2p63)), "limit");
  EXPECT_BAD(ParseSt(StImage(kGoodHeader, 32, 0)), "too small");
  EXPECT_BAD(ParseSt("abc"), "truncated");
}

TEST(BadSafetensors, OverlappingRanges) {
  const std::string h =
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})";
  EXPECT_BAD(ParseSt(StImage(h, 24)), "overlap");
}

TEST(BadSafetensors, OffsetsAndShapes) {
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}})", 16)), "past the end");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", 16)),
             "needs 16 bytes");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", 16)), "reversed");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", 16)),
             "non-negative");
  EXPECT_BAD(
      ParseSt(StImage(
          R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 16]}})", 16)),
      "overflows");
  EXPECT_BAD(
      ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 16]}})", 16)),
      "more than 2^64");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1e30]}})", 16)),
             "data_offsets");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", 16)), "data_offsets");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})", 16)), "unknown dtype");
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"shape": [4], "data_offsets": [0, 16]}})", 16)), "dtype");
  EXPECT_BAD(ParseSt(StImage(R"({"a": 5})", 16)), "not an object");
}

TEST(BadSafetensors, BadJson) {
  EXPECT_BAD(ParseSt(StImage(R"({"a": {"dtype": "F32", )", 16)), "JSON");
  EXPECT_BAD(ParseSt(StImage(R"([1, 2, 3])", 16)), "not a JSON object");
  EXPECT_BAD(ParseSt(StImage("{\"\xff\xfe\": 1}", 16)), "JSON");
  const std::string dup =
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  EXPECT_BAD(ParseSt(StImage(dup, 8)), "more than once");
  EXPECT_BAD(ParseSt(StImage(std::string(5000, '[') + std::string(5000, ']'), 0)), "JSON object");
}

TEST(BadSafetensors, UnsupportedDtypeForWeights) {
  const std::string img = StImage(R"({"a": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  auto f = SafetensorsFile::OpenFromMemory(img.data(), img.size(), "x.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<float> out(2);
  const Status s = SafetensorsToF32(f->tensors()[0], "x.safetensors", out.data());
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find("I64"), std::string::npos);
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// --- metadata that costs more memory than the file holds ---------------------------------------

// Peak resident memory of this process so far, in bytes.
uint64_t PeakRss() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

// A sparse file of `size` bytes starting with `head`: the rest reads as zeros, which parse as
// metadata entries of the smallest size (empty key, u8 value: 13 bytes).
std::string SparseGguf(const std::string& dir, const std::vector<uint8_t>& head, uint64_t size) {
  const std::string path = dir + "/huge.gguf";
  test::WriteFile(path, head);
  std::error_code ec;
  fs::resize_file(path, size, ec);
  EXPECT_FALSE(ec) << ec.message();
  return path;
}

// A GGUF header with one metadata key, an array of n elements of elem_type (the elements follow).
std::vector<uint8_t> OneArrayHeader(const std::string& key, uint32_t elem_type, uint64_t n) {
  test::ByteWriter w;
  w.Bytes("GGUF", 4);
  w.U32(3);
  w.U64(0);  // tensors
  w.U64(1);  // metadata keys
  w.Str(key);
  w.U32(test::kArray);
  w.U32(elem_type);
  w.U64(n);
  return w.buf;
}

TEST(BadGguf, HugeCountsOfTinyEntriesAreRefusedByMemoryNotByAllocationFailure) {
  const std::string dir = test::MakeTempDir("huge-gguf");
  constexpr uint64_t kSize = uint64_t(4) << 30;  // 4 GiB, sparse: no disk used
  const uint64_t rss_before = PeakRss();
  // 330M key/values of 13 bytes each: within what the file can hold, ~50 GB once parsed.
  test::ByteWriter w;
  w.Bytes("GGUF", 4);
  w.U32(3);
  w.U64(0);                      // tensors
  w.U64((kSize - 24) / 13 - 1);  // metadata keys
  auto f = GgufFile::Open(SparseGguf(dir, w.buf, kSize));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Status::Code::kResourceExhausted) << f.status().ToString();
  EXPECT_NE(f.status().message().find("metadata keys"), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("huge.gguf"), std::string::npos) << f.status().ToString();
  // One key holding 358M nested (empty) arrays of 12 bytes each.
  f = GgufFile::Open(SparseGguf(dir, OneArrayHeader("nested", test::kArray, (kSize - 64) / 12), kSize));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Status::Code::kResourceExhausted) << f.status().ToString();
  EXPECT_NE(f.status().message().find("'nested'"), std::string::npos) << f.status().ToString();
  // One key holding 32M (empty) strings: 8 bytes each in the file (256 MiB, which 2 GiB holds),
  // 16 bytes each once parsed (512 MiB of views).
  f = GgufFile::Open(SparseGguf(dir, OneArrayHeader("strings", test::kString, uint64_t(32) << 20), uint64_t(2) << 30));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Status::Code::kResourceExhausted) << f.status().ToString();
  // And memory stayed far below the file size (the budget is 256 MiB).
  EXPECT_LT(PeakRss(), rss_before + (uint64_t(300) << 20)) << "peak RSS grew by " << (PeakRss() - rss_before);
  fs::remove_all(dir);
}

// --- non-finite values -----------------------------------------------------------------------

// A small random llama as an F32 GGUF (Q/K rows left as they are: only the checks matter here),
// with `freq_base` written as an f64.
test::GgufBuilder SmallLlamaGguf(const Model& m, double freq_base) {
  const ModelConfig& c = m.config;
  test::GgufBuilder b;
  b.KvString("general.architecture", "llama");
  b.KvString("general.name", "nan-test");
  b.KvScalar<uint32_t>("llama.context_length", test::kU32, uint32_t(c.n_ctx_train));
  b.KvScalar<uint32_t>("llama.embedding_length", test::kU32, uint32_t(c.n_embd));
  b.KvScalar<uint32_t>("llama.block_count", test::kU32, uint32_t(c.n_layer));
  b.KvScalar<uint32_t>("llama.feed_forward_length", test::kU32, uint32_t(c.n_ff));
  b.KvScalar<uint32_t>("llama.attention.head_count", test::kU32, uint32_t(c.n_head));
  b.KvScalar<uint32_t>("llama.attention.head_count_kv", test::kU32, uint32_t(c.n_head_kv));
  b.KvScalar<float>("llama.attention.layer_norm_rms_epsilon", test::kF32, 1e-5f);
  b.KvScalar<double>("llama.rope.freq_base", test::kF64, freq_base);
  auto add = [&](const std::string& name, const Tensor& t) {
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // ggml order
    b.tensors.push_back({name, ne, 0, test::F32Bytes(t.data)});
  };
  add("token_embd.weight", m.weights.tok_embd);
  add("output_norm.weight", m.weights.output_norm);
  add("output.weight", m.weights.output);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = m.weights.layers[size_t(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", l.attn_norm);
    add(p + "attn_q.weight", l.wq);
    add(p + "attn_k.weight", l.wk);
    add(p + "attn_v.weight", l.wv);
    add(p + "attn_output.weight", l.wo);
    add(p + "ffn_norm.weight", l.ffn_norm);
    add(p + "ffn_gate.weight", l.w_gate);
    add(p + "ffn_up.weight", l.w_up);
    add(p + "ffn_down.weight", l.w_down);
  }
  return b;
}

TEST(NonFiniteGguf, HugeFreqBaseAndNaNNormWeightAreNamed) {
  auto random = RandomModel(ModelConfig{.n_vocab = 16,
                                        .n_ctx_train = 32,
                                        .n_embd = 8,
                                        .n_layer = 2,
                                        .n_head = 2,
                                        .n_head_kv = 1,
                                        .head_dim = 4,
                                        .n_ff = 16});
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  const std::string dir = test::MakeTempDir("nan-gguf"), path = dir + "/m.gguf";
  test::WriteFile(path, SmallLlamaGguf(*random, 10000.0).Build());
  ASSERT_TRUE(LoadModel(path).ok()) << LoadModel(path).status().ToString();
  // 1e300 is a finite double but an infinite float.
  test::WriteFile(path, SmallLlamaGguf(*random, 1e300).Build());
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama.rope.freq_base"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("finite"), std::string::npos) << m.status().ToString();
  test::WriteFile(path, SmallLlamaGguf(*random, std::nan("")).Build());
  EXPECT_NE(LoadModel(path).status().message().find("llama.rope.freq_base"), std::string::npos);
  // A NaN in layer 1's attention norm weight.
  random->weights.layers[1].attn_norm.data[2] = std::nanf("");
  test::WriteFile(path, SmallLlamaGguf(*random, 10000.0).Build());
  m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kCorruption);
  EXPECT_NE(m.status().message().find("layer 1's attention norm weight"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("m.gguf"), std::string::npos) << m.status().ToString();
  fs::remove_all(dir);
}

TEST(NonFiniteHf, ConfigFloatBeyondFloatRangeIsNamed) {
  const std::string dir = test::MakeTempDir("bad-hf");
  WriteText(dir + "/model.safetensors", StImage(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  WriteText(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "rope_theta": 1e300})");
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rope_theta"), std::string::npos) << m.status().ToString();
  fs::remove_all(dir);
}

// --- Hugging Face folders --------------------------------------------------------------------

TEST(BadHfFolder, IndexCannotEscapeTheFolderOrLie) {
  const std::string dir = test::MakeTempDir("bad-hf");
  WriteText(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8})");
  WriteText(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "../../etc/passwd"}})");
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("not a file name"), std::string::npos) << m.status().ToString();

  WriteText(dir + "/model.safetensors.index.json", R"({"weight_map": {"b": "shard.safetensors"}})");
  WriteText(dir + "/shard.safetensors", StImage(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'b'"), std::string::npos) << m.status().ToString();

  WriteText(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "missing.safetensors"}})");
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing.safetensors"), std::string::npos) << m.status().ToString();

  WriteText(dir + "/model.safetensors.index.json", "not json");
  EXPECT_FALSE(LoadModel(dir).ok());
  fs::remove_all(dir);
}

TEST(BadHfFolder, MissingConfigKeysAreNamed) {
  const std::string dir = test::MakeTempDir("bad-hf");
  WriteText(dir + "/model.safetensors", StImage(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  const char* keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"};
  for (const char* missing : keys) {
    std::string cfg = R"({"architectures": ["LlamaForCausalLM"])";
    for (const char* k : keys) {
      if (std::strcmp(k, missing) != 0) cfg += std::string(", \"") + k + "\": 8";
    }
    WriteText(dir + "/config.json", cfg + "}");
    auto m = LoadModel(dir);
    ASSERT_FALSE(m.ok()) << missing;
    EXPECT_NE(m.status().message().find(missing), std::string::npos) << m.status().ToString();
    EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().ToString();
  }
  WriteText(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "big"})");
  EXPECT_NE(LoadModel(dir).status().message().find("hidden_size"), std::string::npos);
  WriteText(dir + "/config.json", R"({"architectures": ["GPT2LMHeadModel"]})");
  EXPECT_EQ(LoadModel(dir).status().code(), Status::Code::kUnsupported);
  WriteText(dir + "/config.json", "{");
  EXPECT_EQ(LoadModel(dir).status().code(), Status::Code::kCorruption);
  fs::remove_all(dir);
}

TEST(BadHfFolder, ConfigLinkLoopAndFifoAreClearErrors) {
  const std::string dir = test::MakeTempDir("bad-hf");
  WriteText(dir + "/model.safetensors", StImage(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  // config.json -> loop.json -> config.json: an error naming the file, never an exception.
  fs::create_symlink("loop.json", dir + "/config.json");
  fs::create_symlink("config.json", dir + "/loop.json");
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("symbolic links"), std::string::npos) << m.status().ToString();
  // The model path itself a link loop.
  EXPECT_FALSE(LoadModel(dir + "/loop.json").ok());
  fs::remove(dir + "/config.json");
  fs::remove(dir + "/loop.json");

  // config.json a FIFO nobody writes: refused at once, no blocking open.
  ASSERT_TRUE(test::MakeFifo(dir + "/config.json"));
  bool hung = false;
  m = test::CallGuardingFifo(
      dir + "/config.json", [&] { return LoadModel(dir); }, &hung);
  EXPECT_FALSE(hung) << "loading blocked on a FIFO config.json";
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kInvalidArgument) << m.status().ToString();
  EXPECT_NE(m.status().message().find("FIFO"), std::string::npos) << m.status().ToString();
  fs::remove_all(dir);
}

TEST(BadGguf, FifoAsModelIsRefusedWithoutBlocking) {
  const std::string dir = test::MakeTempDir("bad-gguf");
  const std::string path = dir + "/model.gguf";
  ASSERT_TRUE(test::MakeFifo(path));
  bool hung = false;
  auto m = test::CallGuardingFifo(
      path, [&] { return LoadModel(path); }, &hung);
  EXPECT_FALSE(hung) << "loading blocked on a FIFO model file";
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("FIFO"), std::string::npos) << m.status().ToString();
  fs::remove_all(dir);
}

TEST(BadHfFolder, DuplicateConfigKeysAreRefusedByName) {
  const std::string dir = test::MakeTempDir("bad-hf");
  WriteText(dir + "/model.safetensors", StImage(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  WriteText(dir + "/config.json",
            R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 2, "hidden_size": 16})");
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kCorruption);
  EXPECT_NE(m.status().message().find("'hidden_size' appears twice"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().ToString();
  // Nested objects too; the same key in two different objects is fine.
  WriteText(dir + "/config.json",
            R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"factor": 2, "factor": 4}})");
  EXPECT_NE(LoadModel(dir).status().message().find("'factor' appears twice"), std::string::npos);
  WriteText(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "a": {"x": 1}, "b": {"x": 1}})");
  EXPECT_EQ(LoadModel(dir).status().message().find("twice"), std::string::npos) << LoadModel(dir).status().ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace impress
