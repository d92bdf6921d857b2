// The architecture tables (engine/model/arch.h): every registered table is well formed (names
// unique, each tensor in exactly one place, dimensions that resolve), found under each of its
// names, and a random model built from it passes the forward pass's checks and computes finite
// logits; the GGUF writer and loader round-trip every architecture with GGUF names.
#include "engine/model/arch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"
#include "engine/model/quantize-model.h"
#include "engine/model/random-model.h"
#include "tests/model/gguf-builder.h"

namespace impress {
namespace {

// A small configuration of `arch`: GQA 4/2 with a head dimension of its own (24 * 4 != 64).
ModelConfig SmallConfig(const ArchSpec* arch) {
  ModelConfig c{.arch = Arch(arch),
                .name = std::string("small ") + arch->name,
                .n_vocab = 64,
                .n_ctx_train = 128,
                .n_embd = 64,
                .n_layer = 2,
                .n_head = 4,
                .n_head_kv = 2,
                .head_dim = 24,
                .n_ff = 96};
  if (arch->graph.position == PositionKind::kLearned) {  // OPT: no GQA, head_dim = n_embd / n_head
    c.n_head_kv = 4;
    c.head_dim = 16;
  }
  return c;
}

TEST(ArchTables, NamesAreUniqueAndFindable) {
  std::set<std::string> names, gguf_names, classes;
  ASSERT_GE(Architectures().size(), 4u);
  for (const ArchSpec* a : Architectures()) {
    SCOPED_TRACE(a->name);
    EXPECT_TRUE(names.insert(a->name).second);
    EXPECT_EQ(FindArch(a->name), a);
    EXPECT_STREQ(Arch(a).name(), a->name);
    if (a->gguf_name) {
      EXPECT_TRUE(gguf_names.insert(a->gguf_name).second);
      EXPECT_EQ(FindGgufArch(a->gguf_name), a);
    }
    for (const char* c : a->hf_classes) {
      EXPECT_TRUE(classes.insert(c).second);
      EXPECT_EQ(FindHfArch(c), a);
    }
    if (a->hf_model_type) {
      EXPECT_EQ(FindHfModelType(a->hf_model_type), a);
    }
  }
  EXPECT_EQ(FindArch("gpt-j"), nullptr);
  EXPECT_EQ(FindGgufArch("opt"), nullptr);  // OPT loads from Hugging Face folders only
  EXPECT_EQ(Arch(), Arch::kLlama);
  EXPECT_NE(Arch::kLlama, Arch::kOpt);
}

TEST(ArchTables, EveryTensorHasOnePlaceAndUniqueNames) {
  for (const ArchSpec* a : Architectures()) {
    SCOPED_TRACE(a->name);
    const ModelConfig c = SmallConfig(a);
    std::set<std::string> gguf, hf, whats;
    std::set<const void*> fields;
    auto check = [&](const TensorSpec& t, bool layer) {
      SCOPED_TRACE(t.what);
      EXPECT_EQ(t.model == nullptr, layer);
      EXPECT_EQ(t.layer == nullptr, !layer);
      EXPECT_TRUE(whats.insert(t.what).second);
      if (t.gguf) {
        EXPECT_TRUE(gguf.insert(t.gguf).second);
      }
      EXPECT_EQ(t.gguf != nullptr, a->gguf_name != nullptr);  // all or none
      ASSERT_NE(t.hf, nullptr);
      EXPECT_TRUE(hf.insert(t.hf).second);
      for (int64_t d : TensorShape(t, c)) EXPECT_GT(d, 0);
      EXPECT_EQ(t.cols == Dim::kNone, t.role == Role::kNorm || t.role == Role::kBias);
    };
    for (const TensorSpec& t : a->model_tensors) check(t, false);
    for (const TensorSpec& t : a->layer_tensors) check(t, true);
    // Every graph reads the norms and projections every layer has.
    for (const char* need : {"attention norm weight", "FFN norm weight", "query projection", "key projection",
                             "value projection", "attention output projection"}) {
      EXPECT_TRUE(whats.contains(need)) << need;
    }
  }
}

TEST(ArchTables, RandomModelOfEveryArchitectureRunsTheForwardPass) {
  auto be = MakeCpuBackend({.n_threads = 1});
  for (const ArchSpec* a : Architectures()) {
    SCOPED_TRACE(a->name);
    auto m = RandomModel(SmallConfig(a), {.seed = 5, .n_threads = 1});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    // Every tensor of the table is there, with its shape, and nothing the table lacks.
    for (int il = 0; il < 2; ++il) {
      for (const TensorSpec& t : a->layer_tensors) {
        EXPECT_EQ(SpecTensor(t, m->weights, il).shape, TensorShape(t, m->config)) << t.what;
      }
    }
    EXPECT_EQ(!m->weights.layers[0].q_norm.empty(), a->graph.qk_norm);
    EXPECT_EQ(!m->weights.pos_embd.empty(), a->graph.position == PositionKind::kLearned);
    EXPECT_EQ(!m->weights.layers[0].w_gate.empty(), a->graph.ffn == FfnKind::kSwiGlu);
    EXPECT_TRUE(CheckNormWeights(*m).ok());
    auto gen = Generator::Create(*m, *be, {32, 8});
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    const std::vector<int32_t> tokens = {1, 7, 3, 60, 22, 9, 41, 5, 17, 2, 33};
    std::vector<float> logits;
    ASSERT_TRUE((*gen)->Eval(tokens, &logits).ok());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

// A tensor the table requires, missing from a model, is named by the forward pass's check.
TEST(ArchTables, ValidateModelNamesAMissingTableTensor) {
  auto m = RandomModel(SmallConfig(FindArch("qwen3")), {.n_threads = 1});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(ValidateModel(*m).ok());
  m->weights.layers[1].k_norm = Tensor{};
  const Status st = ValidateModel(*m);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 1 key norm weight"), std::string::npos) << st.ToString();
}

// Every architecture with GGUF names: written by the GGUF writer, read back by the GGUF loader
// as the same architecture, with the same configuration and the table's every tensor.
TEST(ArchTables, GgufRoundTripKeepsTheArchitecture) {
  const std::string dir = test::MakeTempDir("arch");
  for (const ArchSpec* a : Architectures()) {
    if (!a->gguf_name) continue;
    SCOPED_TRACE(a->name);
    const ModelConfig c = SmallConfig(a);
    const std::string path = dir + "/" + a->name + ".gguf";
    const Status st = WriteRandomModel(c, path, {.type = "f32", .n_threads = 1}, {.seed = 2});
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->config.arch, Arch(a));
    EXPECT_EQ(m->config.head_dim, c.head_dim);
    EXPECT_EQ(m->config.n_head_kv, c.n_head_kv);
    for (const TensorSpec& t : a->layer_tensors) {
      EXPECT_EQ(SpecTensor(t, m->weights, 1).shape, TensorShape(t, c)) << t.what;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace impress
