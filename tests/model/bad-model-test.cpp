// Bad input at the model level, on files written by the quantizer: a matrix of a type the build
// cannot compute on is named with its type; a model that does not fit the available memory is
// refused before loading with the numbers; a truncated file is refused at open (every tensor's
// extent is checked against the file size before anything is read from the mapping, so no read
// can fault with SIGBUS).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/model/gguf-writer.h"
#include "engine/model/gguf.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-blocks.h"
#include "engine/model/quantize-model.h"
#include "tests/model/gguf-builder.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

ModelConfig Tiny() {
  return ModelConfig{.name = "tiny",
                     .n_vocab = 64,
                     .n_ctx_train = 256,
                     .n_embd = 256,
                     .n_layer = 2,
                     .n_head = 4,
                     .n_head_kv = 2,
                     .head_dim = 64,
                     .n_ff = 512};
}

class BadModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir("bad-model");
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/tiny.gguf";
    ASSERT_TRUE(WriteRandomModel(Tiny(), path_, {.type = "q8_0", .n_threads = 1}, {}).ok());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_, path_;
};

TEST_F(BadModel, WrittenModelLoads) { EXPECT_TRUE(LoadModel(path_).ok()); }

TEST_F(BadModel, TypeTheBuildCannotComputeIsNamedWithTheTensor) {
  // The same file with blk.1.ffn_up.weight re-typed as Q2_K (zero bytes of its size).
  auto src = GgufFile::Open(path_);
  ASSERT_TRUE(src.ok());
  GgufWriter w;
  for (const GgufKv& kv : src->kvs()) w.SetValue(kv.key, kv.value);
  std::vector<uint32_t> types;
  for (const GgufTensorInfo& t : src->tensors()) {
    std::vector<int64_t> shape(t.ne, t.ne + t.n_dims);
    std::reverse(shape.begin(), shape.end());
    types.push_back(t.name == "blk.1.ffn_up.weight" ? uint32_t(GgmlType::kQ2_K) : t.type_id);
    ASSERT_TRUE(w.AddTensor(t.name, shape, types.back()).ok()) << t.name;
  }
  const std::string bad = dir_ + "/q2k.gguf";
  ASSERT_TRUE(w.Write(bad, [&](size_t i, std::vector<uint8_t>* b) {
                 const GgufTensorInfo& t = src->tensors()[i];
                 if (types[i] == t.type_id) {
                   b->assign(t.data, t.data + t.n_bytes);
                 } else {
                   b->assign(t.n_elements / 256 * 84, 0);  // Q2_K: 84 bytes per 256 values
                 }
                 return Status::Ok();
               }).ok());
  for (bool dequantize : {false, true}) {
    auto m = LoadModel(bad, {}, LoadOptions{.dequantize = dequantize});
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), Status::Code::kUnsupported);
    EXPECT_NE(m.status().message().find("blk.1.ffn_up.weight"), std::string::npos) << m.status().ToString();
    EXPECT_NE(m.status().message().find("Q2_K"), std::string::npos) << m.status().ToString();
  }
}

TEST_F(BadModel, ModelLargerThanMemoryIsRefusedWithTheNumbers) {
  const uint64_t file = fs::file_size(path_);
  const uint64_t kv = KvBytes(Tiny(), 4096);
  EXPECT_EQ(kv, uint64_t(4096) * 2 * 2 * 64 * 2 * 2);  // tokens x layers x KV heads x dim x (K, V) x fp16
  LoadOptions opt{.check_memory = true, .kv_tokens = 4096, .mem_available = file + kv - 1};
  auto m = LoadModel(path_, {}, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kResourceExhausted);
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("MemAvailable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string((file + (1 << 20) - 1) >> 20) + " MiB"), std::string::npos) << msg;
  // Enough memory: loads. Converted to fp32 it needs 4 bytes per value instead of the file.
  opt.mem_available = file + kv;
  EXPECT_TRUE(LoadModel(path_, {}, opt).ok());
  opt.dequantize = true;
  EXPECT_EQ(LoadModel(path_, {}, opt).status().code(), Status::Code::kResourceExhausted);
}

// LoadOptions::weights re-encodes every matrix at load: the result decodes to what QuantizeRow
// gives for the fp32 values of the source (the reference load), and takes less memory.
TEST_F(BadModel, WeightsConvertedAtLoadAreTheQuantizedValues) {
  auto ref = LoadModel(path_, {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ4_K}) {
    SCOPED_TRACE(GgmlTypeName(uint32_t(type)));
    auto m = LoadModel(path_, {}, LoadOptions{.weights = uint32_t(type)});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Tensor& got = m->weights.layers[1].w_up;
    const Tensor& want = ref->weights.layers[1].w_up;
    ASSERT_TRUE(got.stored());
    EXPECT_EQ(got.ggml_type, uint32_t(type));
    std::vector<uint8_t> bytes(got.owned_bytes.size());
    ASSERT_TRUE(QuantizeRow(uint32_t(type), want.data.data(), int64_t(want.data.size()), bytes.data()).ok());
    EXPECT_EQ(got.owned_bytes, bytes);
    EXPECT_TRUE(m->weights.layers[1].ffn_norm.stored() == false);
  }
  EXPECT_EQ(LoadModel(path_, {}, LoadOptions{.weights = uint32_t(GgmlType::kQ2_K)}).status().code(),
            Status::Code::kInvalidArgument);
}

TEST_F(BadModel, TruncatedFilesAreRefusedAtOpenNeverRead) {
  const uint64_t size = fs::file_size(path_);
  auto f = GgufFile::Open(path_);
  ASSERT_TRUE(f.ok());
  const GgufTensorInfo& last = f->tensors().back();
  const std::string cut = dir_ + "/cut.gguf";
  // Inside the last tensor, inside the first, in the header, and one byte short.
  for (uint64_t keep :
       {size - 1, size - last.n_bytes / 2, f->data_offset() + 100, f->data_offset() - 8, uint64_t(64)}) {
    SCOPED_TRACE(keep);
    fs::copy_file(path_, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, keep);
    auto m = LoadModel(cut);
    ASSERT_FALSE(m.ok());
    EXPECT_TRUE(m.status().code() == Status::Code::kCorruption || m.status().code() == Status::Code::kIOError)
        << m.status().ToString();
  }
  // Past the data: the last tensor's extent is what is reported.
  fs::copy_file(path_, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, size - 1);
  auto m = LoadModel(cut);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(last.name), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace impress
