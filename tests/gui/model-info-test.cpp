// The model picker's pure parts: the estimate read from a GGUF header agrees with the loader's
// config and the file's size (KV bytes per token = 2 x layers x KV heads x head dim x 2 bytes),
// a Hugging Face folder's estimate from config.json (fp16 files counted as fp32 once loaded),
// the fit check's arithmetic and message, the fake MemAvailable, the browser's listing (folders
// first, HF folders and .gguf files recognised, filter, hidden entries left out, ".." row), and
// the recent models list (most recent first, once, bounded).
#include "gui/model-info.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/model/model-loader.h"
#include "tests/support/default-model.h"

namespace impress::gui {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("impress-model-info-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void WriteBytes(const fs::path& p, size_t n, const std::string& text = {}) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  for (size_t i = text.size(); i < n; ++i) out.put('\0');
}

TEST(ModelInfo, GgufEstimateMatchesTheLoadersConfigAndTheFileSize) {
  const std::string path = test_support::DefaultModel();
  if (!fs::exists(path)) GTEST_SKIP() << "the default model is missing: " << path;
  auto e = EstimateModel(path);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_TRUE(e->gguf);
  EXPECT_EQ(e->n_layer, c.n_layer);
  EXPECT_EQ(e->n_head_kv, c.n_head_kv);
  EXPECT_EQ(e->head_dim, c.head_dim);
  EXPECT_EQ(e->n_ctx, c.n_ctx_train);
  EXPECT_EQ(e->weight_bytes, fs::file_size(path));
  EXPECT_EQ(e->kv_bytes_per_token(), uint64_t(2) * c.n_layer * c.n_head_kv * c.head_dim * 2);
  EXPECT_EQ(e->total_bytes(), fs::file_size(path) + e->kv_bytes_per_token() * uint64_t(c.n_ctx_train));
}

TEST(ModelInfo, HfFolderEstimateCountsFp16WeightsAsFp32) {
  const fs::path d = TempDir("hf");
  std::ofstream(d / "config.json") << R"({"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
    "num_hidden_layers": 4, "max_position_embeddings": 1024, "torch_dtype": "bfloat16"})";
  WriteBytes(d / "model.safetensors", 1000);
  auto e = EstimateModel(d.string());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->gguf);
  EXPECT_EQ(e->weight_bytes, 2000u);
  EXPECT_EQ(e->head_dim, 32);
  EXPECT_EQ(e->kv_bytes_per_token(), 2u * 4 * 2 * 32 * 2);
  EXPECT_EQ(e->kv_bytes(), e->kv_bytes_per_token() * 1024);
  fs::remove(d / "model.safetensors");
  EXPECT_FALSE(EstimateModel(d.string()).ok());  // no weights
  fs::remove_all(d);
  EXPECT_EQ(EstimateModel((d / "nope.gguf").string()).status().code(), Status::Code::kNotFound);
}

TEST(ModelInfo, FitCountsWhatTheCurrentModelFrees) {
  ModelEstimate e;
  e.name = "m";
  e.n_layer = 2;
  e.n_head_kv = 1;
  e.head_dim = 64;
  e.n_ctx = 1024;                 // KV: 2 x 2 x 1 x 64 x 2 = 512 B/token -> 512 KiB
  e.weight_bytes = 100ull << 20;  // 100 MiB
  const uint64_t need = (100ull << 20) + (512ull << 10);
  EXPECT_TRUE(CheckFit(e, need, 0).fits);
  EXPECT_FALSE(CheckFit(e, need - 1, 0).fits);
  EXPECT_TRUE(CheckFit(e, need - 1, 1).fits);
  const FitCheck f = CheckFit(e, 64ull << 20, 0);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.summary.find("needs 100.5 MiB"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("KV 512.0 KiB for 1024 tokens"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("64.0 MiB available"), std::string::npos) << f.summary;
}

TEST(ModelInfo, MemAvailableIsFakedByTheEnvironment) {
  ASSERT_EQ(setenv("IMPRESS_MEM_AVAILABLE_MB", "12.5", 1), 0);
  auto a = MemAvailableBytes();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, uint64_t(12.5 * (1 << 20)));
  ASSERT_EQ(setenv("IMPRESS_MEM_AVAILABLE_MB", "lots", 1), 0);
  EXPECT_FALSE(MemAvailableBytes().ok());
  ASSERT_EQ(unsetenv("IMPRESS_MEM_AVAILABLE_MB"), 0);
  auto real = MemAvailableBytes();
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  EXPECT_GT(*real, 0u);
}

TEST(ModelInfo, ListingShowsFoldersModelsAndGgufFilesFiltered) {
  const fs::path d = TempDir("list");
  fs::create_directories(d / "zeta");
  fs::create_directories(d / "Llama-hf");
  std::ofstream(d / "Llama-hf" / "config.json") << "{}";
  fs::create_directories(d / ".hidden");
  WriteBytes(d / "b-model.GGUF", 10);
  WriteBytes(d / "a-model.gguf", 20);
  WriteBytes(d / "notes.txt", 5);
  auto l = ListModelDirectory(d.string(), "");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  using K = BrowserEntry::Kind;
  ASSERT_EQ(l->size(), 5u);
  EXPECT_EQ((*l)[0].kind, K::kParent);
  EXPECT_EQ((*l)[0].path, d.parent_path().string());
  EXPECT_EQ((*l)[1].name, "Llama-hf");
  EXPECT_EQ((*l)[1].kind, K::kHfFolder);
  EXPECT_EQ((*l)[2].name, "zeta");
  EXPECT_EQ((*l)[2].kind, K::kDirectory);
  EXPECT_EQ((*l)[3].name, "a-model.gguf");
  EXPECT_EQ((*l)[3].bytes, 20u);
  EXPECT_EQ((*l)[4].name, "b-model.GGUF");
  auto f = ListModelDirectory(d.string(), "LLAMA");
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 2u);  // ".." and the match
  EXPECT_EQ((*f)[1].name, "Llama-hf");
  EXPECT_FALSE(ListModelDirectory((d / "missing").string(), "").ok());
  auto root = ListModelDirectory("/", "");
  ASSERT_TRUE(root.ok());
  for (const BrowserEntry& b : *root) EXPECT_NE(b.kind, K::kParent);
  fs::remove_all(d);
}

TEST(ModelInfo, RecentModelsMostRecentFirstOnceAndBounded) {
  const fs::path d = TempDir("recent");
  const std::string file = (d / "cfg" / "models.json").string();
  EXPECT_TRUE(LoadRecentModels(file).empty());
  ASSERT_TRUE(RememberModel(file, "/m/a.gguf").ok());
  ASSERT_TRUE(RememberModel(file, "/m/b.gguf").ok());
  ASSERT_TRUE(RememberModel(file, "/m/a.gguf").ok());
  EXPECT_EQ(LoadRecentModels(file), (std::vector<std::string>{"/m/a.gguf", "/m/b.gguf"}));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(RememberModel(file, "/m/" + std::to_string(i)).ok());
  const auto r = LoadRecentModels(file);
  ASSERT_EQ(r.size(), kMaxRecentModels);
  EXPECT_EQ(r.front(), "/m/19");
  std::ofstream(file) << "not json";
  EXPECT_TRUE(LoadRecentModels(file).empty());
  fs::remove_all(d);
}

}  // namespace
}  // namespace impress::gui
