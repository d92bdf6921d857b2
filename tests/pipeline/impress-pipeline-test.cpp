// The IMPRESS pipeline on the real default model (skipped when the file is absent; a file that
// fails to load fails every test, never skips them): equivalences
// between systems at keep ratio 1, the threshold's extremes, the TTFT breakdown, storing and
// reusing, and the probe heads' KV heads under GQA. The pure selection math has its own tests
// (selection-test.cpp), as do the fidelity helpers (fidelity-test.cpp).
#include "pipeline/impress-pipeline.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/fidelity.h"

namespace impress {
namespace {

std::string DefaultModel() {
  if (const char* p = std::getenv("IMPRESS_DEFAULT_MODEL"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/impress/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// ---- probe heads under grouped-query attention -------------------------------------------

TEST(Selection, ProbeKvHeadsFollowGqaGroups) {
  ModelConfig c;
  c.n_head = 9;
  c.n_head_kv = 3;
  EXPECT_EQ(ProbeKvHeads(c, 3), (std::vector<int>{0}));
  EXPECT_EQ(ProbeKvHeads(c, 4), (std::vector<int>{0, 1}));
  c.n_head_kv = 9;
  EXPECT_EQ(ProbeKvHeads(c, 3), (std::vector<int>{0, 1, 2}));
}

// ---- on the real model --------------------------------------------------------------------

class PipelineOnModel : public ::testing::Test {
 protected:
  // A failed load is kept, not asserted here: GoogleTest reports a fatal failure in
  // SetUpTestSuite by skipping every test of the suite, and ctest counts skips as passes.
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(DefaultModel())) return;
    auto ctx = ModelContext::Load(DefaultModel(), ModelContextOptions{});
    if (!ctx.ok()) {
      load_status_ = ctx.status();
      return;
    }
    ctx_ = std::move(*ctx).release();
  }
  static void TearDownTestSuite() {
    delete ctx_;
    ctx_ = nullptr;
    load_status_ = Status::Ok();
  }
  void SetUp() override {
    ASSERT_TRUE(load_status_.ok()) << "the default model " << DefaultModel()
                                   << " failed to load: " << load_status_.ToString();
    if (!ctx_) GTEST_SKIP() << "default model not found: " << DefaultModel();
    dir_ = std::filesystem::temp_directory_path() / ("impress-pipeline-test-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store::PrefixStoreOptions o = StoreOptionsFor(ctx_->config(), 3);
    o.dir = dir_.string();
    o.reorder_interval = std::chrono::milliseconds(0);
    auto st = store::PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(*st);
    pipe_ = std::make_unique<ImpressPipeline>(*ctx_, store_.get());

    auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    doc->text.resize(2600);  // ~600 tokens: enough layers of selection, quick on 2 cores
    conv_.AddDocument(std::move(*doc));
  }
  void TearDown() override {
    pipe_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  PromptTokens Prompt(const std::string& q) { return conv_.Build(q, ctx_->tokenizer(), ctx_->chat_template()); }
  // Computes the prompt without reuse and stores its prefix.
  void Ingest(const PromptTokens& p) {
    std::vector<float> logits;
    PipelineSettings s;
    s.system = SystemKind::kRecomp;
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 0, &logits);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pipe_->StoreAsync(size_t(p.n_prefix));
    auto w = pipe_->WaitForStore();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(*w, uint64_t(p.n_prefix));
  }
  RequestReport Run(const PromptTokens& p, PipelineSettings s, std::vector<float>* logits) {
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 8, logits);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RequestReport{};
  }

  static ModelContext* ctx_;
  static Status load_status_;
  std::filesystem::path dir_;
  std::unique_ptr<store::PrefixStore> store_;
  std::unique_ptr<ImpressPipeline> pipe_;
  Conversation conv_;
};
ModelContext* PipelineOnModel::ctx_ = nullptr;
Status PipelineOnModel::load_status_;

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    mx = std::max(mx, double(std::fabs(b[i])));
  }
  return diff / mx;
}

TEST_F(PipelineOnModel, FullKeepImpressEqualsAsLikeAndAsLikeEqualsRecomp) {
  const PromptTokens p = Prompt("Who may copy this license document?");
  ASSERT_GT(p.n_prefix, 400);
  Ingest(p);
  std::vector<float> recomp, as, imp;
  PipelineSettings s;
  s.system = SystemKind::kRecomp;
  RequestReport r0 = Run(p, s, &recomp);
  EXPECT_EQ(r0.n_matched, 0);
  s.system = SystemKind::kAsLike;
  RequestReport r1 = Run(p, s, &as);
  EXPECT_EQ(r1.n_matched, p.n_prefix);
  s.system = SystemKind::kImpress;
  s.keep = 1.0f;
  RequestReport r2 = Run(p, s, &imp);
  EXPECT_EQ(r2.n_matched, p.n_prefix);
  for (const LayerReport& lr : r2.layers) {
    EXPECT_TRUE(lr.passed);  // every probe set is the whole prefix: s = t = 1
    EXPECT_EQ(lr.k, lr.n);
  }
  EXPECT_EQ(imp, as);  // same tokens, same order, same KV: bit-identical
  const double rel = MaxRelDiff(as, recomp);
  spdlog::info("AS-like vs ReComp: max |diff| / max |logit| = {:.3g}", rel);
  EXPECT_LT(rel, 1e-3);  // stored KV is the fp16 KV ReComp attended over; batching differs
  EXPECT_EQ(std::max_element(as.begin(), as.end()) - as.begin(),
            std::max_element(recomp.begin(), recomp.end()) - recomp.begin());
}

TEST_F(PipelineOnModel, AlphaZeroFallsBackWhereProbeSetsDifferAndLargeAlphaAlwaysPasses) {
  const PromptTokens p = Prompt("What does the license say about warranty?");
  Ingest(p);
  std::vector<float> logits;
  PipelineSettings s;
  s.keep = 0.25f;
  s.alpha = 0.0f;
  RequestReport r = Run(p, s, &logits);
  int n_fallback = 0;
  for (const LayerReport& lr : r.layers) {
    EXPECT_TRUE(lr.probed);
    EXPECT_DOUBLE_EQ(lr.t, 1.0);
    EXPECT_EQ(lr.passed, lr.s >= 1.0) << "layer " << lr.il;
    n_fallback += lr.passed ? 0 : 1;
    if (!lr.passed) {
      const uint64_t all_keys = uint64_t(lr.n) * ctx_->config().n_head_kv * ctx_->config().head_dim * 2;
      EXPECT_GE(lr.key_bytes, all_keys) << "fallback reads every key";
    }
  }
  EXPECT_GT(n_fallback, 0);
  s.alpha = 50.0f;
  r = Run(p, s, &logits);
  for (const LayerReport& lr : r.layers) {
    EXPECT_TRUE(lr.passed) << "layer " << lr.il << " s=" << lr.s << " t=" << lr.t;
    EXPECT_EQ(lr.k, int(std::ceil(0.25 * lr.n)));
    // Probe keys (KV head 0 of 3) + K and V of the selected tokens.
    const uint64_t row = uint64_t(ctx_->config().n_head_kv) * ctx_->config().head_dim * 2;
    EXPECT_EQ(lr.key_bytes, uint64_t(lr.n) * row / 3 + uint64_t(lr.k) * row);
    EXPECT_EQ(lr.value_bytes, uint64_t(lr.k) * row);
  }
}

TEST_F(PipelineOnModel, BreakdownAddsUpToTtftAndImpressReadsLessThanBaselines) {
  const PromptTokens p = Prompt("Summarise the preamble in one sentence.");
  Ingest(p);
  std::vector<float> logits;
  PipelineSettings s;
  auto bytes = [&](SystemKind sys) {
    s.system = sys;
    RequestReport r = Run(p, s, &logits);
    const double sum = r.breakdown.match_ms + r.breakdown.probe_io_ms + r.breakdown.probe_compute_ms +
                       r.breakdown.kv_io_ms + r.breakdown.copy_ms + r.breakdown.compute_ms;
    EXPECT_NEAR(sum, r.ttft_ms, 0.05 * r.ttft_ms) << SystemName(sys);
    uint64_t total = 0;
    for (const LayerReport& lr : r.layers) total += lr.key_bytes + lr.value_bytes;
    return total;
  };
  const uint64_t as = bytes(SystemKind::kAsLike);
  const uint64_t h2o = bytes(SystemKind::kAsH2oLfu);
  s.alpha = 2.0f;
  const uint64_t imp = bytes(SystemKind::kImpress);
  EXPECT_LT(h2o, as);
  EXPECT_LT(imp, h2o);
}

TEST_F(PipelineOnModel, AnswerIsStoredAndReusedByTheNextRequest) {
  const PromptTokens p = Prompt("Is this program free software?");
  std::vector<float> logits;
  PipelineSettings s;
  RequestReport r = Run(p, s, &logits);
  EXPECT_EQ(r.n_matched, 0);
  const int32_t first = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  ASSERT_TRUE(pipe_->Decode(first, &logits).ok());
  pipe_->StoreAsync();
  auto w = pipe_->WaitForStore();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, p.tokens.size() + 1);
  // The same prompt again: its whole prefix comes from the store.
  r = Run(p, s, &logits);
  EXPECT_EQ(r.n_matched, p.n_prefix);
  EXPECT_EQ(r.n_new, int(p.tokens.size()) - p.n_prefix);
}

TEST_F(PipelineOnModel, ReleaseMatchLetsTheStoreDropTheReusedPrefix) {
  const PromptTokens p = Prompt("Is this program free software?");
  Ingest(p);
  std::vector<float> logits;
  RequestReport r = Run(p, PipelineSettings{}, &logits);
  ASSERT_EQ(r.n_matched, p.n_prefix);
  const std::span<const store::Token> prefix(p.tokens.data(), size_t(p.n_prefix));
  // The request still holds its match: the store refuses to drop it.
  EXPECT_FALSE(store_->DropFrom(prefix, 0).ok());
  ASSERT_TRUE(pipe_->ReleaseMatch().ok());
  ASSERT_TRUE(pipe_->ReleaseMatch().ok()) << "releasing twice is harmless";
  // Decoding goes on without the store, and the prefix can now go.
  EXPECT_TRUE(pipe_->Decode(0, &logits).ok());
  auto dropped = store_->DropFrom(prefix, 0);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_GE(*dropped, uint64_t(p.n_prefix));
  EXPECT_EQ(store_->Match(prefix).n_matched, 0u);
}

TEST_F(PipelineOnModel, PromptLongerThanContextIsAClearError) {
  std::vector<int32_t> tokens(size_t(ctx_->config().n_ctx_train) + 10, 100);
  std::vector<float> logits;
  auto r = pipe_->Prefill({tokens, 0}, PipelineSettings{}, 0, &logits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kOutOfRange);
}

TEST_F(PipelineOnModel, FidelityAtFullKeepIsExact) {
  const PromptTokens p = Prompt("What is the GPL?");
  Ingest(p);
  PipelineSettings s;
  s.keep = 1.0f;
  auto f = CheckFidelity(*pipe_, {p.tokens, p.n_prefix}, s, 4);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->first_token_match);
  EXPECT_NEAR(f->kl_divergence, 0.0, 1e-9);
  EXPECT_EQ(f->n_continuation_match, 4);
}

}  // namespace
}  // namespace impress
