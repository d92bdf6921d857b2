// LoadModel: the default SmolLM2 GGUF (config, token embeddings and un-permuted q/k against the
// gguf PyPI package), tiny GGUF files written here, and tiny Hugging Face Llama/OPT folders
// written by tests/model/model-reference.py with the safetensors package.
#include "engine/model/model-loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/fp16.h"
#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/dequant.h"
#include "engine/model/gguf.h"
#include "engine/model/quantize-model.h"
#include "engine/runtime/model-context.h"
#include "tests/model/gguf-builder.h"
#include "tests/model/python-ref.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  const auto n = size_t(f.tellg());
  std::vector<float> v(n / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// Bitwise equality of n floats; reports the first difference.
::testing::AssertionResult SameFloats(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, 4) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// --- the default model ----------------------------------------------------------------------

class DefaultModel : public ::testing::Test {
 protected:
  // A failed load is kept, not asserted here: GoogleTest reports a fatal failure in
  // SetUpTestSuite by skipping every test of the suite, and ctest counts skips as passes.
  static void SetUpTestSuite() {
    path_ = new std::string(test::DefaultModelPath());
    if (!fs::exists(*path_)) return;
    auto m = LoadModel(*path_);
    if (!m.ok()) {
      load_status_ = new Status(m.status());
      return;
    }
    model_ = new Model(std::move(m).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete path_;
    delete load_status_;
    model_ = nullptr;
    path_ = nullptr;
    load_status_ = nullptr;
  }
  void SetUp() override {
    if (load_status_) FAIL() << "the default model " << *path_ << " failed to load: " << load_status_->ToString();
    if (!model_) GTEST_SKIP() << "default model not found at " << *path_;
  }
  static Model* model_;
  static std::string* path_;
  static Status* load_status_;  // set when the file exists but does not load
};
Model* DefaultModel::model_ = nullptr;
std::string* DefaultModel::path_ = nullptr;
Status* DefaultModel::load_status_ = nullptr;

TEST_F(DefaultModel, ConfigMatchesSmolLM2) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_head_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_EQ(c.n_ctx_train, 8192);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c.fingerprint.size(), 32u);
  const ModelWeights& w = model_->weights;
  EXPECT_EQ(w.tok_embd.shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_TRUE(w.output.empty());
  ASSERT_EQ(w.layers.size(), 30u);
  EXPECT_EQ(w.layers[0].wq.shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(w.layers[0].wk.shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(w.layers[0].w_down.shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(w.layers[29].ffn_norm.shape, (std::vector<int64_t>{576}));
  EXPECT_EQ(w.layers[29].ffn_norm.data.size(), 576u);
}

TEST_F(DefaultModel, WeightsMatchTheGgufPythonPackage) {
  const std::string dir = test::MakeTempDir("loader-ref");
  ASSERT_FALSE(dir.empty());
  const int rc = test::RunReferenceScript("model-reference.py", "gguf '" + *path_ + "' '" + dir + "'");
  if (rc == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
  ASSERT_EQ(rc, 0);
  std::ifstream ids_file(dir + "/ids.txt");
  std::vector<int> ids;
  for (int id; ids_file >> id;) ids.push_back(id);
  ASSERT_FALSE(ids.empty());
  const auto rows = ReadF32(dir + "/tok_embd_rows.f32");
  ASSERT_EQ(rows.size(), ids.size() * 576);
  // The weights stay in their stored type: their decoded values are what the Python package gives.
  auto embd = TensorValues(model_->weights.tok_embd);
  ASSERT_TRUE(embd.ok()) << embd.status().ToString();
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_TRUE(SameFloats(embd->data() + size_t(ids[k]) * 576, rows.data() + k * 576, 576)) << "token " << ids[k];
  }
  for (int il : {0, 29}) {
    const LayerWeights& l = model_->weights.layers[size_t(il)];
    const std::string p = dir + "/blk." + std::to_string(il);
    const auto q = ReadF32(p + ".attn_q.f32"), k = ReadF32(p + ".attn_k.f32"), q_raw = ReadF32(p + ".attn_q_raw.f32");
    auto wq = TensorValues(l.wq), wk = TensorValues(l.wk);
    ASSERT_TRUE(wq.ok() && wk.ok());
    ASSERT_EQ(q.size(), wq->size());
    ASSERT_EQ(k.size(), wk->size());
    EXPECT_TRUE(SameFloats(wq->data(), q.data(), q.size())) << "layer " << il << " wq";
    EXPECT_TRUE(SameFloats(wk->data(), k.data(), k.size())) << "layer " << il << " wk";
    // And the raw GGUF rows are a real permutation of ours (the test would pass vacuously if
    // the un-permutation were the identity and the reference also skipped it).
    EXPECT_FALSE(SameFloats(wq->data(), q_raw.data(), q.size()));
  }
  fs::remove_all(dir);
}

TEST_F(DefaultModel, LoadReportsProgressAndCanBeCancelled) {
  uint64_t calls = 0, last_total = 0;
  auto m = LoadModel(*path_, [&](uint64_t done, uint64_t total, std::string_view what) {
    ++calls;
    last_total = total;
    EXPECT_LE(done, total);
    EXPECT_FALSE(what.empty());
    return true;
  });
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(calls, 272u);  // one per tensor
  EXPECT_EQ(last_total, 272u);
  EXPECT_EQ(m->config.fingerprint, model_->config.fingerprint);
  auto cancelled = LoadModel(*path_, [&](uint64_t done, uint64_t, std::string_view) { return done < 10; });
  EXPECT_EQ(cancelled.status().code(), Status::Code::kCancelled);
}

// --- tiny GGUF files ----------------------------------------------------------------------------

// A 1-layer llama with F32 weights whose values encode (tensor, index), so any misplaced row
// shows. n_head 2, n_head_kv 1, head_dim 4, n_embd 8, n_ff 16, vocab 10.
test::GgufBuilder TinyLlamaGguf(bool with_output) {
  test::GgufBuilder b;
  b.KvString("general.architecture", "llama");
  b.KvString("general.name", "tiny");
  b.KvScalar<uint32_t>("llama.context_length", test::kU32, 128);
  b.KvScalar<uint32_t>("llama.embedding_length", test::kU32, 8);
  b.KvScalar<uint32_t>("llama.block_count", test::kU32, 1);
  b.KvScalar<uint32_t>("llama.feed_forward_length", test::kU32, 16);
  b.KvScalar<uint32_t>("llama.attention.head_count", test::kU32, 2);
  b.KvScalar<uint32_t>("llama.attention.head_count_kv", test::kU32, 1);
  b.KvScalar<float>("llama.attention.layer_norm_rms_epsilon", test::kF32, 1e-6f);
  b.KvScalar<float>("llama.rope.freq_base", test::kF32, 500000.0f);
  b.KvString("llama.rope.scaling.type", "linear");
  b.KvScalar<float>("llama.rope.scaling.factor", test::kF32, 4.0f);
  int tag = 0;
  auto add = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<float> v(n);
    ++tag;
    for (uint64_t i = 0; i < n; ++i) v[i] = float(tag * 1000 + int(i));
    b.tensors.push_back({name, ne, 0, test::F32Bytes(v)});
  };
  add("token_embd.weight", {8, 10});
  add("output_norm.weight", {8});
  if (with_output) add("output.weight", {8, 10});
  add("blk.0.attn_norm.weight", {8});
  add("blk.0.attn_q.weight", {8, 8});
  add("blk.0.attn_k.weight", {8, 4});
  add("blk.0.attn_v.weight", {8, 4});
  add("blk.0.attn_output.weight", {8, 8});
  add("blk.0.ffn_norm.weight", {8});
  add("blk.0.ffn_gate.weight", {8, 16});
  add("blk.0.ffn_up.weight", {8, 16});
  add("blk.0.ffn_down.weight", {16, 8});
  return b;
}

class TinyGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir("tiny-gguf");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const test::GgufBuilder& b, const std::string& name = "m.gguf") {
    const std::string p = dir_ + "/" + name;
    test::WriteFile(p, b.Build());
    return p;
  }
  std::string dir_;
};

TEST_F(TinyGguf, LoadsConfigAndUnpermutesQAndK) {
  auto m = LoadModel(Write(TinyLlamaGguf(/*with_output=*/true)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.n_embd, 8);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.n_vocab, 10);
  EXPECT_EQ(c.n_ctx_train, 128);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  const LayerWeights& l = m->weights.layers.at(0);
  // wq tag 5, rows of 8: GGUF row r holds 5000 + 8r ... With head_dim 4 (half 2), HF row
  // (h, i, j) = GGUF row (h, j, i): HF rows 0,1,2,3 <- GGUF 0,2,1,3; head 1: 4,5,6,7 <- 4,6,5,7.
  const int want_q[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(l.wq.data[size_t(r) * 8 + 3], float(5000 + want_q[r] * 8 + 3)) << r;
  const int want_k[4] = {0, 2, 1, 3};  // one kv head
  for (int r = 0; r < 4; ++r) EXPECT_EQ(l.wk.data[size_t(r) * 8], float(6000 + want_k[r] * 8)) << r;
  // v is not permuted.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(l.wv.data[size_t(r) * 8], float(7000 + r * 8)) << r;
  EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(m->weights.output.shape, (std::vector<int64_t>{10, 8}));
}

// Matrices of a type the kernels compute on stay in it, viewed in place in the file mapping (no
// fp32 copy: what keeps RSS near the file size); Q/K rows, reordered for RoPE, are a stored-type
// copy. Decoding any of them gives exactly what a load with dequantize gives.
TEST_F(TinyGguf, KeepsStoredMatricesInTheMapping) {
  test::GgufBuilder b = TinyLlamaGguf(/*with_output=*/true);
  for (test::TestTensor& t : b.tensors) {
    if (t.ne.size() != 2) continue;
    std::vector<uint8_t> f16(t.data.size() / 2);
    for (size_t i = 0; i < t.data.size() / 4; ++i) {
      float v;
      std::memcpy(&v, t.data.data() + 4 * i, 4);
      const f16_t h = Fp32ToFp16(v);
      std::memcpy(f16.data() + 2 * i, &h, 2);
    }
    t.data = std::move(f16);
    t.type = 1;  // F16
  }
  const std::string path = Write(b);
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto ref = LoadModel(path, {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto file = std::static_pointer_cast<const GgufFile>(m->storage);
  ASSERT_TRUE(file);
  const uint8_t* lo = file->file_data();
  const uint8_t* hi = lo + file->file_size();
  const ModelWeights& w = m->weights;
  const ModelWeights& r = ref->weights;
  const LayerWeights& l = w.layers.at(0);
  const LayerWeights& rl = r.layers.at(0);
  const std::vector<std::pair<const Tensor*, const Tensor*>> viewed = {
      {&w.tok_embd, &r.tok_embd}, {&w.output, &r.output}, {&l.wv, &rl.wv},        {&l.wo, &rl.wo},
      {&l.w_gate, &rl.w_gate},    {&l.w_up, &rl.w_up},    {&l.w_down, &rl.w_down}};
  for (const auto& [t, want] : viewed) {
    EXPECT_EQ(t->ggml_type, 1u);
    EXPECT_TRUE(t->data.empty());
    EXPECT_TRUE(t->owned_bytes.empty());
    EXPECT_GE(t->view, lo);
    EXPECT_LE(t->view + TensorBytes(*t), hi);
    EXPECT_EQ(TensorBytes(*t), uint64_t(want->data.size()) * 2);
    auto values = TensorValues(*t);
    ASSERT_TRUE(values.ok());
    EXPECT_EQ(*values, want->data);
  }
  for (const auto& [t, want] : {std::pair{&l.wq, &rl.wq}, std::pair{&l.wk, &rl.wk}}) {
    EXPECT_TRUE(t->stored());
    EXPECT_TRUE(t->data.empty());
    EXPECT_EQ(t->owned_bytes.size(), want->data.size() * 2);
    auto values = TensorValues(*t);
    ASSERT_TRUE(values.ok());
    EXPECT_EQ(*values, want->data);  // the RoPE row order undone as for fp32
  }
  EXPECT_FALSE(l.attn_norm.stored());
  EXPECT_EQ(l.attn_norm.data, rl.attn_norm.data);
  for (const Tensor* t : {&r.tok_embd, &rl.wq, &rl.w_down}) EXPECT_FALSE(t->stored());
  EXPECT_FALSE(ref->storage);
}

TEST_F(TinyGguf, MissingOutputMeansTied) {
  auto m = LoadModel(Write(TinyLlamaGguf(false)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->config.tied_embeddings);
  EXPECT_TRUE(m->weights.output.empty());
}

TEST_F(TinyGguf, FingerprintDependsOnTheBytes) {
  auto a = LoadModel(Write(TinyLlamaGguf(false), "a.gguf"));
  auto b = TinyLlamaGguf(false);
  b.tensors[0].data[5] ^= 1;
  auto bm = LoadModel(Write(b, "b.gguf"));
  ASSERT_TRUE(a.ok() && bm.ok());
  EXPECT_NE(a->config.fingerprint, bm->config.fingerprint);
  auto a2 = LoadModel(dir_ + "/a.gguf");
  EXPECT_EQ(a->config.fingerprint, a2->config.fingerprint);
}

TEST_F(TinyGguf, MissingOrMisshapenTensorIsNamed) {
  auto b = TinyLlamaGguf(false);
  b.tensors.erase(b.tensors.begin() + 4);  // blk.0.attn_k.weight
  auto m = LoadModel(Write(b));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kNotFound);
  EXPECT_NE(m.status().message().find("blk.0.attn_k.weight"), std::string::npos) << m.status().message();

  auto c = TinyLlamaGguf(false);
  c.tensors[3].ne = {8, 4};  // attn_q with kv's shape
  c.tensors[3].data.resize(8 * 4 * 4);
  m = LoadModel(Write(c));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_q.weight"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("[8, 4]"), std::string::npos) << m.status().message();
}

TEST_F(TinyGguf, UnsupportedTensorTypeIsNamed) {
  auto b = TinyLlamaGguf(false);
  b.tensors[1].type = 28;  // output_norm.weight as F64: a valid GGML type this build cannot convert
  b.tensors[1].data.resize(8 * 8);
  auto m = LoadModel(Write(b));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(m.status().message().find("output_norm.weight"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("F64"), std::string::npos) << m.status().message();
}

TEST_F(TinyGguf, BadConfigValuesAreNamed) {
  auto b = TinyLlamaGguf(false);
  b.kvs.erase(b.kvs.begin() + 3);  // llama.embedding_length
  auto m = LoadModel(Write(b));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama.embedding_length"), std::string::npos) << m.status().message();

  auto c = TinyLlamaGguf(false);
  c.kvs[6] = [](test::ByteWriter& w) {  // head_count = 3: does not divide 8
    w.Str("llama.attention.head_count");
    w.U32(test::kU32);
    w.U32(3);
  };
  m = LoadModel(Write(c));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("head_count"), std::string::npos) << m.status().message();

  auto d = TinyLlamaGguf(false);
  d.kvs[0] = [](test::ByteWriter& w) {
    w.Str("general.architecture");
    w.U32(test::kString);
    w.Str("falcon");
  };
  m = LoadModel(Write(d));
  EXPECT_EQ(m.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(m.status().message().find("falcon"), std::string::npos);
}

// --- Hugging Face folders -------------------------------------------------------------------------

// The Model tensor an HF name maps to, or nullptr.
const Tensor* FieldFor(const Model& m, const std::string& name) {
  const ModelWeights& w = m.weights;
  static const std::map<std::string, Tensor ModelWeights::*> kTop = {
      {"model.embed_tokens.weight", &ModelWeights::tok_embd},
      {"model.norm.weight", &ModelWeights::output_norm},
      {"lm_head.weight", &ModelWeights::output},
      {"model.decoder.embed_tokens.weight", &ModelWeights::tok_embd},
      {"model.decoder.embed_positions.weight", &ModelWeights::pos_embd},
      {"model.decoder.project_in.weight", &ModelWeights::project_in},
      {"model.decoder.project_out.weight", &ModelWeights::project_out},
      {"model.decoder.final_layer_norm.weight", &ModelWeights::output_norm},
      {"model.decoder.final_layer_norm.bias", &ModelWeights::output_norm_b},
  };
  static const std::map<std::string, Tensor LayerWeights::*> kLayer = {
      {"input_layernorm.weight", &LayerWeights::attn_norm},
      {"post_attention_layernorm.weight", &LayerWeights::ffn_norm},
      {"self_attn.q_proj.weight", &LayerWeights::wq},
      {"self_attn.k_proj.weight", &LayerWeights::wk},
      {"self_attn.v_proj.weight", &LayerWeights::wv},
      {"self_attn.o_proj.weight", &LayerWeights::wo},
      {"mlp.gate_proj.weight", &LayerWeights::w_gate},
      {"mlp.up_proj.weight", &LayerWeights::w_up},
      {"mlp.down_proj.weight", &LayerWeights::w_down},
      {"self_attn.out_proj.weight", &LayerWeights::wo},
      {"self_attn.q_proj.bias", &LayerWeights::bq},
      {"self_attn.k_proj.bias", &LayerWeights::bk},
      {"self_attn.v_proj.bias", &LayerWeights::bv},
      {"self_attn.out_proj.bias", &LayerWeights::bo},
      {"self_attn_layer_norm.weight", &LayerWeights::attn_norm},
      {"self_attn_layer_norm.bias", &LayerWeights::attn_norm_b},
      {"final_layer_norm.weight", &LayerWeights::ffn_norm},
      {"final_layer_norm.bias", &LayerWeights::ffn_norm_b},
      {"fc1.weight", &LayerWeights::w_up},
      {"fc1.bias", &LayerWeights::b_up},
      {"fc2.weight", &LayerWeights::w_down},
      {"fc2.bias", &LayerWeights::b_down},
  };
  if (auto it = kTop.find(name); it != kTop.end()) return &(w.*(it->second));
  for (const char* prefix : {"model.layers.", "model.decoder.layers."}) {
    const std::string p = prefix;
    if (name.rfind(p, 0) != 0) continue;
    const size_t dot = name.find('.', p.size());
    const size_t il = std::stoul(name.substr(p.size(), dot - p.size()));
    if (il >= w.layers.size()) return nullptr;
    if (auto it = kLayer.find(name.substr(dot + 1)); it != kLayer.end()) return &(w.layers[il].*(it->second));
  }
  return nullptr;
}

// The largest |logit of a - logit of b| and |logit of b| over ten tokens of a tiny model.
struct LogitGap {
  double max_diff = 0, max_abs = 0;
};
LogitGap CompareLogits(const Model& a, const Model& b, int ubatch) {
  const std::vector<int32_t> toks = {1, 5, 9, 17, 33, 2, 40, 63, 7, 11};
  std::vector<int> rows(toks.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int(i);
  auto logits = [&](const Model& m) {
    auto be = MakeCpuBackend({.n_threads = 2});
    auto g = Generator::Create(m, *be, {.n_ctx = 32, .ubatch = ubatch});
    std::vector<float> out(toks.size() * size_t(m.config.n_vocab));
    EXPECT_TRUE(g.ok() && (*g)->EvalRows(toks, rows, out.data()).ok());
    return out;
  };
  const std::vector<float> x = logits(a), y = logits(b);
  LogitGap gap;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    gap.max_abs = std::max(gap.max_abs, std::abs(double(y[i])));
    gap.max_diff = std::max(gap.max_diff, std::abs(double(x[i]) - y[i]));
  }
  return gap;
}

class HfFolders : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test::MakeTempDir("hf"));
    rc_ = test::RunReferenceScript("model-reference.py", "hf '" + *dir_ + "'");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    if (rc_ == -1) GTEST_SKIP() << "reference python not found (set IMPRESS_PYTHON)";
    ASSERT_EQ(rc_, 0) << "model-reference.py hf failed";
  }
  // Every tensor the script wrote equals, bit for bit, the Model field it maps to.
  static void ExpectAllWeights(const Model& m, const std::string& folder, size_t n_expected) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(folder + "/expected")) {
      const std::string name = e.path().stem().string();
      const auto want = ReadF32(e.path().string());
      const Tensor* t = FieldFor(m, name);
      if (name == "lm_head.weight" && m.config.tied_embeddings) continue;
      ASSERT_NE(t, nullptr) << name;
      // A stored tensor (F16/BF16 kept as in the file) is decoded as the kernels read it.
      auto got = TensorValues(*t);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
      ASSERT_EQ(got->size(), want.size()) << name;
      EXPECT_TRUE(SameFloats(got->data(), want.data(), want.size())) << name;
      ++n;
    }
    EXPECT_EQ(n, n_expected);
  }
  static std::string* dir_;
  static int rc_;
};
std::string* HfFolders::dir_ = nullptr;
int HfFolders::rc_ = -1;

TEST_F(HfFolders, LoadsShardedMixedDtypeLlama) {
  auto m = LoadModel(*dir_ + "/llama");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 48);
  EXPECT_EQ(c.n_vocab, 64);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 50000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_ctx, 128);
  EXPECT_EQ(c.fingerprint.size(), 32u);
  ExpectAllWeights(*m, *dir_ + "/llama", 3 + 2 * 9);
  // F16 and BF16 matrices stay in their stored type, viewed in the file mapping the Model keeps;
  // F32 ones and every vector are fp32 values. The fp32 reference load holds the same values.
  int n_f16 = 0, n_bf16 = 0, n_f32 = 0;
  auto count = [&](const Tensor& t) {
    if (t.rows() > 0 && t.shape.size() == 2) {
      n_f16 += t.stored() && t.ggml_type == uint32_t(GgmlType::kF16) && t.view != nullptr;
      n_bf16 += t.stored() && t.ggml_type == uint32_t(GgmlType::kBF16) && t.view != nullptr;
      n_f32 += !t.stored();
    } else {
      EXPECT_FALSE(t.stored());
    }
  };
  count(m->weights.tok_embd);
  count(m->weights.output);
  count(m->weights.output_norm);
  for (const LayerWeights& l : m->weights.layers) {
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.attn_norm, &l.ffn_norm}) {
      count(*t);
    }
  }
  EXPECT_GT(n_f16, 0);
  EXPECT_GT(n_bf16, 0);
  EXPECT_GT(n_f32, 0);
  EXPECT_EQ(n_f16 + n_bf16 + n_f32, 2 + 2 * 7);
  EXPECT_NE(m->storage, nullptr);
  auto ref = LoadModel(*dir_ + "/llama", {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_FALSE(ref->weights.layers[0].wq.stored());
  ExpectAllWeights(*ref, *dir_ + "/llama", 3 + 2 * 9);
}

// The forward pass over F16/BF16 matrices kept as stored equals the one over the same values
// converted to fp32 (checked against numpy in tests/compute) within fp32 rounding: the kernels
// multiply the decoded rows with fp32 activations. Prefill (GEMM) and one-row decode (GEMV).
TEST_F(HfFolders, StoredF16Bf16ForwardMatchesTheFp32Path) {
  auto stored = LoadModel(*dir_ + "/llama");
  auto fp32 = LoadModel(*dir_ + "/llama", {}, LoadOptions{.dequantize = true});
  ASSERT_TRUE(stored.ok() && fp32.ok());
  for (int ubatch : {16, 1}) {
    SCOPED_TRACE(ubatch);
    const LogitGap gap = CompareLogits(*stored, *fp32, ubatch);
    EXPECT_GT(gap.max_abs, 0.1);
    EXPECT_LE(gap.max_diff, 1e-4 * gap.max_abs) << "max |stored - fp32| " << gap.max_diff << " of " << gap.max_abs;
  }
}

// --weights q8_0 (LoadOptions::weights from ParseWeightsOption): every matrix whose rows are whole
// Q8_0 blocks is kept as Q8_0, with the bytes `impress quantize --type q8_0` writes for it, and the
// model answers as that converted file does; the fingerprint names the conversion.
TEST_F(HfFolders, WeightsOptionKeepsQ8_0LikeTheConvertedFile) {
  auto type = ParseWeightsOption("Q8_0");
  ASSERT_TRUE(type.ok()) << type.status().ToString();
  EXPECT_EQ(*type, uint32_t(GgmlType::kQ8_0));
  auto m = LoadModel(*dir_ + "/llama", {}, LoadOptions{.weights = *type});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string file = *dir_ + "/llama-q8_0.gguf";
  ASSERT_TRUE(QuantizeModel(*dir_ + "/llama", file, {.type = "q8_0", .n_threads = 2}).ok());
  auto ref = LoadModel(file);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  int n_q8 = 0;
  auto same = [&](const Tensor& a, const Tensor& b, const std::string& what) {
    if (a.shape.size() != 2 || a.shape[1] % 32 != 0) return;
    ASSERT_EQ(a.ggml_type, uint32_t(GgmlType::kQ8_0)) << what;
    ASSERT_EQ(b.ggml_type, uint32_t(GgmlType::kQ8_0)) << what;
    EXPECT_EQ(std::memcmp(a.stored_bytes(), b.stored_bytes(), size_t(a.shape[0] * a.shape[1] / 32 * 34)), 0) << what;
    ++n_q8;
  };
  same(m->weights.tok_embd, ref->weights.tok_embd, "tok_embd");
  same(m->weights.output, ref->weights.output, "output");
  for (size_t il = 0; il < m->weights.layers.size(); ++il) {
    const LayerWeights &a = m->weights.layers[il], &b = ref->weights.layers[il];
    for (auto f : {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::w_gate,
                   &LayerWeights::w_up, &LayerWeights::w_down}) {
      same(a.*f, b.*f, "layer " + std::to_string(il));
    }
  }
  EXPECT_EQ(n_q8, 2 + 2 * 6);  // all but down_proj, whose 48 columns are not whole blocks
  const LogitGap gap = CompareLogits(*m, *ref, 16);
  EXPECT_GT(gap.max_abs, 0.1);
  // The down projections differ only by how each file keeps its F16/BF16/F32 values.
  EXPECT_LE(gap.max_diff, 1e-3 * gap.max_abs)
      << "max |--weights q8_0 - converted file| " << gap.max_diff << " of " << gap.max_abs;
  auto stored = LoadModel(*dir_ + "/llama");
  ASSERT_TRUE(stored.ok());
  EXPECT_NE(m->config.fingerprint, stored->config.fingerprint);
}

TEST(WeightsOption, UnknownTypesAreRefusedByName) {
  for (const char* bad : {"q9_0", "int8", "q4_k_m"}) {
    auto t = ParseWeightsOption(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find(bad), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("q8_0, q4_k or f16"), std::string::npos) << t.status().message();
    // The model context refuses it before touching the model.
    auto ctx = ModelContext::Load("/nonexistent/model.gguf", ModelContextOptions{.weights = bad});
    ASSERT_FALSE(ctx.ok());
    EXPECT_EQ(ctx.status().code(), Status::Code::kInvalidArgument) << ctx.status().ToString();
  }
  EXPECT_EQ(*ParseWeightsOption(""), 0u);
  EXPECT_EQ(*ParseWeightsOption("q4_k"), uint32_t(GgmlType::kQ4_K));
  EXPECT_EQ(*ParseWeightsOption("f16"), uint32_t(GgmlType::kF16));
}

TEST_F(HfFolders, LoadsOpt) {
  auto m = LoadModel(*dir_ + "/opt");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kOpt);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_ff, 64);
  EXPECT_EQ(c.n_ctx_train, 40);
  EXPECT_EQ(c.pos_offset, 2);
  EXPECT_EQ(c.word_embed_proj_dim, 0);
  EXPECT_TRUE(c.do_layer_norm_before);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(m->weights.pos_embd.shape, (std::vector<int64_t>{42, 32}));
  ExpectAllWeights(*m, *dir_ + "/opt", 4 + 2 * 16);
}

TEST_F(HfFolders, LoadsOpt350mStyleProjectionsAndPostLn) {
  auto m = LoadModel(*dir_ + "/opt350");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.word_embed_proj_dim, 16);
  EXPECT_FALSE(m->config.do_layer_norm_before);
  EXPECT_EQ(m->weights.tok_embd.shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(m->weights.project_in.shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(m->weights.project_out.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_TRUE(m->weights.output_norm.empty());
  ExpectAllWeights(*m, *dir_ + "/opt350", 4 + 2 * 16);
}

TEST_F(HfFolders, MissingConfigKeyAndTensorAreNamed) {
  const std::string d = *dir_ + "/broken";
  fs::remove_all(d);
  fs::copy(*dir_ + "/opt", d, fs::copy_options::recursive);
  std::ifstream in(d + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cfg = ss.str();
  in.close();
  const std::string key = "\"ffn_dim\"";
  const size_t at = cfg.find(key);
  ASSERT_NE(at, std::string::npos);
  std::string broken = cfg;
  broken.replace(at, key.size(), "\"ffn_dimension\"");
  std::ofstream(d + "/config.json", std::ios::trunc) << broken;
  auto m = LoadModel(d);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ffn_dim"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().message();

  // num_hidden_layers 3: layer 2's tensors are missing.
  std::string more = cfg;
  const size_t l = more.find("\"num_hidden_layers\": 2");
  ASSERT_NE(l, std::string::npos);
  more.replace(l, 22, "\"num_hidden_layers\": 3");
  std::ofstream(d + "/config.json", std::ios::trunc) << more;
  m = LoadModel(d);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.decoder.layers.2."), std::string::npos) << m.status().message();

  fs::remove(d + "/config.json");
  m = LoadModel(d);
  EXPECT_EQ(m.status().code(), Status::Code::kNotFound);
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos);
  fs::remove_all(d);
}

// A truncated shard is refused from its header's extents before any tensor is read from the
// mapping (a read past the end of a mapped file would be SIGBUS, which would kill the test).
TEST_F(HfFolders, TruncatedShardIsRefusedNeverRead) {
  const std::string d = *dir_ + "/cut";
  std::vector<fs::path> shards;
  for (const auto& e : fs::directory_iterator(*dir_ + "/llama")) {
    if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename());
  }
  ASSERT_FALSE(shards.empty());
  for (const fs::path& shard : shards) {
    const uint64_t size = fs::file_size(*dir_ + "/llama/" + shard.string());
    for (uint64_t keep : {size - 1, size / 2, uint64_t(12)}) {
      SCOPED_TRACE(shard.string() + " cut to " + std::to_string(keep));
      fs::remove_all(d);
      fs::copy(*dir_ + "/llama", d, fs::copy_options::recursive);
      fs::resize_file(d + "/" + shard.string(), keep);
      auto m = LoadModel(d);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), Status::Code::kCorruption) << m.status().ToString();
      EXPECT_NE(m.status().message().find(shard.string()), std::string::npos) << m.status().ToString();
    }
  }
  fs::remove_all(d);
}

TEST_F(HfFolders, FingerprintCoversConfigWeightsAndTokenizer) {
  const std::string d = *dir_ + "/fp";
  fs::remove_all(d);
  fs::copy(*dir_ + "/opt", d, fs::copy_options::recursive);
  auto fingerprint = [&]() {
    auto m = LoadModel(d);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->config.fingerprint : std::string();
  };
  const std::string a = fingerprint();
  EXPECT_EQ(fingerprint(), a);
  std::ofstream(d + "/tokenizer.json") << "{}";
  const std::string b = fingerprint();
  EXPECT_NE(b, a);
  std::ofstream(d + "/tokenizer.json", std::ios::trunc) << "{ }";
  const std::string c = fingerprint();
  EXPECT_NE(c, b);
  std::ofstream(d + "/config.json", std::ios::app) << "\n";
  EXPECT_NE(fingerprint(), c);
  fs::remove_all(d);
}

TEST(LoadModel, MissingPathIsNotFound) {
  auto m = LoadModel("/nonexistent/impress/model.gguf");
  EXPECT_EQ(m.status().code(), Status::Code::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/impress/model.gguf"), std::string::npos);
}

TEST(UnpermuteRopeRows, InvertsTheConverterPermutation) {
  // Forward permutation as llama.cpp's converter does it: GGUF row (h, j, i) = HF row (h, i, j).
  const int n_head = 3, hd = 6, n_cols = 2;
  std::vector<float> hf(size_t(n_head * hd * n_cols));
  for (size_t i = 0; i < hf.size(); ++i) hf[i] = float(i);
  std::vector<float> gguf(hf.size());
  for (int h = 0; h < n_head; ++h)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < hd / 2; ++j)
        for (int c = 0; c < n_cols; ++c)
          gguf[size_t(((h * hd) + j * 2 + i) * n_cols + c)] = hf[size_t(((h * hd) + i * hd / 2 + j) * n_cols + c)];
  UnpermuteRopeRows(gguf.data(), n_head * hd, n_cols, n_head);
  EXPECT_EQ(gguf, hf);
}

}  // namespace
}  // namespace impress
