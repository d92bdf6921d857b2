// The default model's file truncated to half while it is loaded (a re-download over it): the next
// generation fails with an error naming the file instead of crashing or answering from zeros, no
// KV of that request is stored, the truncated file no longer loads, and loading a good model
// again works. Runs on a copy of the real default model (skipped when the file is absent; a file
// that fails to load fails the test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/compute/forward.h"
#include "engine/model/mapped-file.h"
#include "engine/runtime/model-context.h"
#include "pipeline/impress-pipeline.h"
#include "store/prefix-store.h"
#include "tests/support/default-model.h"

namespace impress {
namespace {

namespace fs = std::filesystem;
using ::impress::test_support::DefaultModel;

Result<GenerateResult> Generate(ModelContext& ctx, const std::vector<int32_t>& prompt) {
  IMPRESS_ASSIGN_OR_RETURN(auto gen, Generator::Create(ctx.model(), ctx.backend(), {.n_ctx = 64, .ubatch = 16}));
  GenerateOptions o;
  o.max_tokens = 4;
  o.sampling.temperature = 0.0f;
  return gen->Generate(prompt, o);
}

void ExpectChangedOnDisk(const Status& s, const std::string& path) {
  EXPECT_EQ(s.code(), Status::Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(path + ": the model file changed on disk while in use (it is now "), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("load it again"), std::string::npos) << s.ToString();
}

TEST(ModelFileChanged, TruncatedWhileLoadedFailsTheRequestAndAGoodModelLoadsAgain) {
  if (!fs::exists(DefaultModel())) GTEST_SKIP() << "default model not found at " << DefaultModel();
  const fs::path dir = fs::temp_directory_path() / ("impress-model-file-changed-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string copy = (dir / "model.gguf").string();
  fs::copy_file(DefaultModel(), copy);

  auto ctx = ModelContext::Load(copy, ModelContextOptions{});
  ASSERT_TRUE(ctx.ok()) << "the default model failed to load: " << ctx.status().ToString();
  ModelContext& c = **ctx;
  ASSERT_EQ(c.model().mapped_files.size(), 1u);  // the weights are read in place from the file
  const std::vector<int32_t> prompt = c.tokenizer().Encode("The capital of France is", true, false);
  ASSERT_TRUE(Generate(c, prompt).ok());

  store::PrefixStoreOptions so = StoreOptionsFor(c.config(), 3);
  so.dir = (dir / "store").string();
  auto st = store::PrefixStore::Open(so);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ImpressPipeline pipe(c, st->get());
  std::vector<float> logits;
  const PipelineRequest req{prompt, int(prompt.size()) - 1};
  ASSERT_TRUE(pipe.Prefill(req, PipelineSettings{}, 4, &logits).ok());

  fs::resize_file(copy, fs::file_size(copy) / 2);

  // Every step reads every weight, so the second half of the file is touched: zeros, not SIGBUS.
  auto gen = Generate(c, prompt);
  ASSERT_FALSE(gen.ok());
  ExpectChangedOnDisk(gen.status(), copy);
  EXPECT_TRUE(c.model().mapped_files[0]->poisoned());

  auto pre = pipe.Prefill(req, PipelineSettings{}, 4, &logits);
  ASSERT_FALSE(pre.ok());
  ExpectChangedOnDisk(pre.status(), copy);
  // Even when asked to, the pipeline keeps what it computed from the changed file out of the store.
  pipe.StoreAsync();
  auto stored = pipe.WaitForStore();
  ASSERT_FALSE(stored.ok());
  ExpectChangedOnDisk(stored.status(), copy);
  EXPECT_EQ((*st)->Stats().n_tokens, 0u);

  auto again = ModelContext::Load(copy, ModelContextOptions{});
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(copy), std::string::npos) << again.status().ToString();

  auto good = ModelContext::Load(DefaultModel(), ModelContextOptions{});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  auto answer = Generate(**good, prompt);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_FALSE(answer->tokens.empty());
  EXPECT_FALSE((*good)->model().mapped_files[0]->poisoned());

  (*st).reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace impress
