// A stored chunk that fails its checksum costs recomputation, never the answer: with one byte of a
// stored chunk flipped on disk, the next request over that prefix answers as a fresh computation
// does, its report counts the recomputed tokens, and the store no longer holds the dropped
// segment. Runs on the real default model (skipped when the file is absent; a file that fails to
// load fails the test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "store/chunk-format.h"
#include "tests/support/default-model.h"

namespace impress {
namespace {

using ::impress::test_support::DefaultModel;

int Argmax(const std::vector<float>& v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

TEST(CorruptChunk, RequestRecomputesTheDroppedPrefixAndAnswers) {
  if (!std::filesystem::exists(DefaultModel())) GTEST_SKIP() << "default model not found: " << DefaultModel();
  auto ctx = ModelContext::Load(DefaultModel(), ModelContextOptions{});
  ASSERT_TRUE(ctx.ok()) << "the default model failed to load: " << ctx.status().ToString();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("impress-corrupt-chunk-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  store::PrefixStoreOptions o = StoreOptionsFor((*ctx)->config(), 3);
  o.dir = dir.string();
  o.reorder_interval = std::chrono::milliseconds(0);
  o.device_bytes = 0;  // every read goes to the data files
  o.host_bytes = 0;

  Conversation conv;
  auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  doc->text.resize(1600);
  conv.AddDocument(std::move(*doc));
  const PromptTokens p = conv.Build("Who may copy this license?", (*ctx)->tokenizer(), (*ctx)->chat_template());
  ASSERT_GT(p.n_prefix, 100);
  const PipelineRequest req{p.tokens, p.n_prefix};

  // A fresh computation, whose prefix is stored.
  std::vector<float> fresh;
  PipelineSettings recomp;
  recomp.system = SystemKind::kRecomp;
  {
    auto st = store::PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ImpressPipeline pipe(**ctx, st->get());
    auto r = pipe.Prefill(req, recomp, 8, &fresh);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pipe.StoreAsync(size_t(p.n_prefix));
    auto w = pipe.WaitForStore();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }

  // One byte flipped in the first K record of layer 0's first chunk (always read: token 0 is an
  // attention sink), which the first data file holds at its start.
  const std::string data = (dir / "data-000001.dat").string();
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << data;
    const std::streamoff at = std::streamoff(store::kBlockBytes) + 1;
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(at);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }

  auto st = store::PrefixStore::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ((*st)->Stats().n_segments, 1u);
  ImpressPipeline pipe(**ctx, st->get());
  std::vector<float> logits;
  auto r = pipe.Prefill(req, PipelineSettings{}, 8, &logits);
  ASSERT_TRUE(r.ok()) << "a corrupt chunk must not fail the answer: " << r.status().ToString();
  EXPECT_EQ(Argmax(logits), Argmax(fresh)) << "the recovered answer differs from a fresh computation";
  EXPECT_EQ(r->n_matched, 0);
  EXPECT_EQ(r->n_recomputed, std::min(p.n_prefix, int(p.tokens.size()) - 1));
  EXPECT_EQ(r->n_new, int(p.tokens.size()));
  const store::StoreStats ss = (*st)->Stats();
  EXPECT_GE(ss.chunks_dropped_corrupt, 1u);
  EXPECT_EQ(ss.n_segments, 0u) << "the segment holding the corrupt chunk is still listed";
  EXPECT_EQ(ss.n_nodes, 0u);
  EXPECT_EQ((*st)->Match(std::span<const int32_t>(p.tokens).subspan(0, size_t(p.n_prefix))).n_matched, 0u);
  EXPECT_TRUE((*st)->CheckConsistency().ok());

  // The recomputed prefix is stored again and served to the next request.
  pipe.StoreAsync(size_t(p.n_prefix));
  auto w = pipe.WaitForStore();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto again = pipe.Prefill(req, PipelineSettings{}, 8, &logits);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->n_matched, 0);
  EXPECT_EQ(again->n_recomputed, 0);
  ASSERT_TRUE(pipe.ReleaseMatch().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress
