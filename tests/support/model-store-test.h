// A GoogleTest fixture base for tests that run the default model over a prefix store: the shared
// model (SharedDefaultModel: skip without the file, fail on a broken one), an empty temporary
// folder for the store, removed afterwards, and the ingest of a document's prefix. Header-only;
// used from the test thread.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "tests/support/default-model.h"
#include "tests/support/shared-model.h"

namespace impress::test_support {

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status load_status;
    ctx_ = SharedDefaultModel(&load_status);
    ASSERT_TRUE(load_status.ok()) << load_status.ToString();
    if (!ctx_) GTEST_SKIP() << "default model not found: " << DefaultModel();
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("impress-" + std::string(t->test_suite_name()) + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The prompt of the first `chars` characters of the GPL text as a document and `question`;
  // its prefix is computed (ReComp) and stored through `pipe`.
  void StoreGplPrompt(ImpressPipeline& pipe, size_t chars, const std::string& question, PromptTokens* out) {
    auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    doc->text.resize(chars);
    Conversation conv;
    conv.AddDocument(std::move(*doc));
    *out = conv.Build(question, ctx_->tokenizer(), ctx_->chat_template());
    PipelineSettings s;
    s.system = SystemKind::kRecomp;
    std::vector<float> logits;
    ASSERT_TRUE(pipe.Prefill({out->tokens, out->n_prefix}, s, 0, &logits).ok());
    pipe.StoreAsync(size_t(out->n_prefix));
    ASSERT_TRUE(pipe.WaitForStore().ok());
  }

  ModelContext* ctx_ = nullptr;
  std::filesystem::path dir_;
};

}  // namespace impress::test_support
