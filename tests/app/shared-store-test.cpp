// One store, several programs and models, through the `impress` executable as users run it:
//  - two models alternating on one store (A, B, A, B) keep both caches: the third and fourth runs
//    reuse at least 95% of the document prefix their model stored before;
//  - two `impress generate` runs started at once on one store (with --store-wait) take turns
//    through the store's lock: both answer, and both prefixes are reused by a later run.
// Model B is the default model with one norm weight changed: another file (another fingerprint)
// and other weights, with the same tokenizer, so the two prompts tokenize the same.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "engine/model/gguf.h"
#include "tests/support/default-model.h"

namespace fs = std::filesystem;

namespace impress {
namespace {

struct GenerateRun {
  int rc = -1;
  nlohmann::json report;
  std::string output;
};

// Runs `impress generate ... --json` and parses its one JSON line.
GenerateRun Generate(const std::string& model, const std::string& store, const std::string& doc,
                     const std::string& question, const std::string& extra = "") {
  const std::string cmd = std::string(IMPRESS_BINARY) + " generate --model '" + model + "' --store '" + store +
                          "' --doc '" + doc + "' --prompt '" + question + "' --max-tokens 2 --json " + extra + " 2>&1";
  GenerateRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const size_t brace = r.output.rfind("\n{");
  const std::string line = r.output.substr(brace == std::string::npos ? 0 : brace + 1);
  r.report = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return r;
}

class SharedStore : public ::testing::Test {
 protected:
  void SetUp() override {
    model_a_ = test_support::DefaultModel();
    ASSERT_TRUE(fs::exists(model_a_)) << "the default model is missing (" << model_a_
                                      << "); scripts/setup.sh downloads it";
    dir_ = fs::temp_directory_path() / ("impress-shared-store-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Model B: the same file with output_norm.weight[0] scaled.
    model_b_ = (dir_ / "model-b.gguf").string();
    fs::copy_file(model_a_, model_b_);
    auto g = GgufFile::Open(model_a_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const GgufTensorInfo* norm = nullptr;
    for (const auto& t : g->tensors())
      if (t.name == "output_norm.weight") norm = &t;
    ASSERT_NE(norm, nullptr);
    ASSERT_EQ(norm->type, GgmlType::kF32);
    float w0;
    std::memcpy(&w0, norm->data, sizeof w0);
    w0 *= 1.25f;
    std::fstream f(model_b_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(norm->data - g->file_data()));
    f.write(reinterpret_cast<const char*>(&w0), sizeof w0);
    ASSERT_TRUE(f.good());
    // A document of about 700 tokens: the start of the GPL text the project ships.
    std::ifstream in(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(text.size(), 5000u);
    doc_ = (dir_ / "doc.txt").string();
    std::ofstream(doc_) << text.substr(0, 3000);
    store_ = (dir_ / "store").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string model_a_, model_b_, doc_, store_;
};

::testing::AssertionResult Answered(const GenerateRun& r) {
  if (r.rc != 0 || !r.report.is_object() || !r.report.contains("reused_tokens"))
    return ::testing::AssertionFailure() << "exit " << r.rc << ":\n" << r.output;
  return ::testing::AssertionSuccess();
}

double Reuse(const GenerateRun& r) {
  return r.report["reused_tokens"].get<double>() / std::max(1.0, r.report["n_prefix"].get<double>());
}

TEST_F(SharedStore, TwoModelsAlternatingKeepBothCaches) {
  const GenerateRun a1 = Generate(model_a_, store_, doc_, "Who may copy this license?");
  ASSERT_TRUE(Answered(a1));
  ASSERT_GT(a1.report["n_prefix"].get<int>(), 500);
  EXPECT_EQ(a1.report["reused_tokens"].get<int>(), 0);
  const GenerateRun b1 = Generate(model_b_, store_, doc_, "Who may copy this license?");
  ASSERT_TRUE(Answered(b1));
  EXPECT_EQ(b1.report["reused_tokens"].get<int>(), 0) << "model B must never reuse model A's KV";
  const GenerateRun a2 = Generate(model_a_, store_, doc_, "What does the license protect?");
  ASSERT_TRUE(Answered(a2));
  EXPECT_GE(Reuse(a2), 0.95) << a2.report.dump();
  const GenerateRun b2 = Generate(model_b_, store_, doc_, "What does the license protect?");
  ASSERT_TRUE(Answered(b2));
  EXPECT_GE(Reuse(b2), 0.95) << b2.report.dump();
  std::printf("[shared-store] reuse on the third run %.3f, fourth %.3f (prefix %d tokens)\n", Reuse(a2), Reuse(b2),
              a2.report["n_prefix"].get<int>());
}

TEST_F(SharedStore, TwoProgramsAtOnceTakeTurns) {
  // Two documents, so each run stores a prefix of its own.
  const std::string doc2 = (dir_ / "doc2.txt").string();
  {
    std::ifstream in(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(doc2) << text.substr(10000, 3000);
  }
  GenerateRun r1, r2;
  // --store-wait: the second waits for the first to close the store (an event, not a time bound;
  // the limit is far above any run).
  std::thread t1([&] { r1 = Generate(model_a_, store_, doc_, "Who may copy it?", "--store-wait 3600"); });
  std::thread t2([&] { r2 = Generate(model_a_, store_, doc2, "Who may copy it?", "--store-wait 3600"); });
  t1.join();
  t2.join();
  ASSERT_TRUE(Answered(r1));
  ASSERT_TRUE(Answered(r2));
  // Neither lost its cache to the other.
  const GenerateRun again1 = Generate(model_a_, store_, doc_, "Who may change it?");
  const GenerateRun again2 = Generate(model_a_, store_, doc2, "Who may change it?");
  ASSERT_TRUE(Answered(again1));
  ASSERT_TRUE(Answered(again2));
  EXPECT_GE(Reuse(again1), 0.95) << again1.report.dump();
  EXPECT_GE(Reuse(again2), 0.95) << again2.report.dump();
}

}  // namespace
}  // namespace impress
