// A conversation in one running process never goes back to the SSD for the KV it just computed:
// the first question over a document computes and stores its KV, which lands in the device and
// host tiers while they have room; follow-up questions (IMPRESS and AS-like) then read nothing
// from the SSD, asserted from the store's own counters. Control: with fresh admission off, the
// same follow-up reads from the SSD. Runs the default model (skips without it).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "tests/support/default-model.h"
#include "tests/support/shared-model.h"

namespace impress {
namespace {

using ::impress::test_support::DefaultModel;

class FollowUpTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    Status load_status;
    ctx_ = test_support::SharedDefaultModel(&load_status);
    ASSERT_TRUE(load_status.ok()) << load_status.ToString();
    if (!ctx_) GTEST_SKIP() << "default model not found: " << DefaultModel();
    dir_ = std::filesystem::temp_directory_path() / ("impress-follow-up-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    doc->text.resize(5000);  // ~1,100 tokens, 18 chunks per layer: ~25 MB of KV, far below the budgets
    conv_.AddDocument(std::move(*doc));
  }
  void TearDown() override {
    pipe_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A fresh store (in its own folder) and pipeline; ssd_only: no memory tiers.
  void Open(bool admit, bool ssd_only = false) {
    pipe_.reset();
    store_.reset();
    store::PrefixStoreOptions o = StoreOptionsFor(ctx_->config(), 3);
    o.dir = (dir_ / std::to_string(++n_stores_)).string();
    o.reorder_interval = std::chrono::milliseconds(0);
    o.device_bytes = ssd_only ? 0 : 256ull << 20;  // the GUI's defaults
    o.host_bytes = ssd_only ? 0 : 1ull << 30;
    o.admit_on_insert = admit;
    auto st = store::PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(*st);
    pipe_ = std::make_unique<ImpressPipeline>(*ctx_, store_.get());
  }
  PromptTokens Prompt(const std::string& q) { return conv_.Build(q, ctx_->tokenizer(), ctx_->chat_template()); }
  // The first question: nothing cached, the prompt is computed; two greedy tokens; everything stored.
  void FirstQuestion(const std::string& q, bool write_order = true) {
    const PromptTokens p = Prompt(q);
    std::vector<float> logits;
    PipelineSettings s;
    s.write_order = write_order;
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 2, &logits);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->n_matched, 0);
    const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_TRUE(pipe_->Decode(tok, &logits).ok());
    pipe_->StoreAsync();
    auto w = pipe_->WaitForStore();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  struct FollowUp {
    RequestReport report;
    uint64_t ssd_bytes = 0;  // the store's counter, before and after
    uint64_t accesses = 0, fast_hits = 0;
  };
  FollowUp Ask(const std::string& q, SystemKind sys, std::vector<float>* logits_out = nullptr,
               GroupBudget budget = PipelineSettings{}.select_budget) {
    const PromptTokens p = Prompt(q);
    const store::StoreStats before = store_->Stats();
    PipelineSettings s;
    s.system = sys;
    s.select_budget = budget;
    std::vector<float> logits;
    auto r = pipe_->Prefill({p.tokens, p.n_prefix}, s, 2, &logits);
    if (logits_out) *logits_out = logits;
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    const store::StoreStats after = store_->Stats();
    FollowUp f;
    if (r.ok()) f.report = *r;
    f.ssd_bytes = after.ssd_bytes_read - before.ssd_bytes_read;
    f.accesses = after.tiers.n_accesses - before.tiers.n_accesses;
    f.fast_hits =
        (after.tiers.device.hits + after.tiers.host.hits) - (before.tiers.device.hits + before.tiers.host.hits);
    EXPECT_EQ(f.report.n_matched, p.n_prefix) << "the document's KV is reused";
    spdlog::info("{}: {} SSD bytes, {} of {} chunk accesses in device/host", SystemName(sys), f.ssd_bytes, f.fast_hits,
                 f.accesses);
    return f;
  }

  ModelContext* ctx_ = nullptr;
  std::filesystem::path dir_;
  Conversation conv_;
  std::unique_ptr<store::PrefixStore> store_;
  std::unique_ptr<ImpressPipeline> pipe_;
  int n_stores_ = 0;
};

TEST_F(FollowUpTiers, FollowUpQuestionsReadNothingFromTheSsd) {
  ASSERT_NO_FATAL_FAILURE(Open(/*admit=*/true));
  ASSERT_NO_FATAL_FAILURE(FirstQuestion("Who may copy this license document?"));
  for (SystemKind sys : {SystemKind::kImpress, SystemKind::kAsLike, SystemKind::kImpress}) {
    const FollowUp f = Ask(sys == SystemKind::kAsLike ? "What is free software?" : "Summarise the preamble.", sys);
    EXPECT_EQ(f.ssd_bytes, 0u) << SystemName(sys);
    EXPECT_EQ(f.report.ssd_bytes_read, 0u) << SystemName(sys);
    EXPECT_EQ(f.report.chunks_ssd, 0u) << SystemName(sys);
    ASSERT_GT(f.accesses, 0u);
    EXPECT_GE(double(f.fast_hits), 0.99 * double(f.accesses)) << SystemName(sys) << ": fast-tier hit rate";
  }
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(FollowUpTiers, WithoutFreshAdmissionTheFollowUpGoesBackToTheSsd) {
  ASSERT_NO_FATAL_FAILURE(Open(/*admit=*/false));
  ASSERT_NO_FATAL_FAILURE(FirstQuestion("Who may copy this license document?"));
  const FollowUp f = Ask("Summarise the preamble.", SystemKind::kImpress);
  EXPECT_GT(f.ssd_bytes, 0u);
  EXPECT_LT(double(f.fast_hits), 0.5 * double(f.accesses));
}

}  // namespace
}  // namespace impress

namespace impress {
namespace {

// The first question after a document is stored reads the important tokens packed: the store
// wrote each layer's chunks in the order the ingest's attention gave (write_order), so fewer SSD
// blocks hold them than in the original order. Kept up to the importance mass of token-level
// selection (GroupBudget::kMass), the question then reads fewer bytes; kept up to the keep
// ratio's tokens (the default), it reads the same number of rows either way, in fewer read
// requests (longer runs of selected blocks). Asserted from the reports' counters.
TEST_F(FollowUpTiers, WriteOrderedChunksMakeTheFirstQuestionReadFewerSsdBytes) {
  const std::string q = "What does the license say about warranty?";
  uint64_t bytes[2] = {0, 0}, reads[2] = {0, 0}, rows[2] = {0, 0};
  uint64_t as_like = 0;
  for (int ordered = 0; ordered < 2; ++ordered) {
    ASSERT_NO_FATAL_FAILURE(Open(/*admit=*/true, /*ssd_only=*/true));
    ASSERT_NO_FATAL_FAILURE(FirstQuestion("Who may copy this license document?", ordered == 1));
    const FollowUp f = Ask(q, SystemKind::kImpress, nullptr, GroupBudget::kMass);
    EXPECT_EQ(f.report.ssd_bytes_read, f.ssd_bytes);
    bytes[ordered] = f.ssd_bytes;
    const FollowUp t = Ask(q, SystemKind::kImpress, nullptr, GroupBudget::kTokens);
    reads[ordered] = t.report.ssd_reads;
    for (const LayerReport& lr : t.report.layers) rows[ordered] += uint64_t(lr.k);
    if (ordered) as_like = Ask(q, SystemKind::kAsLike).ssd_bytes;
  }
  spdlog::info(
      "first question, IMPRESS keep 25%: {} SSD bytes in the original order, {} write-ordered; AS-like {} "
      "({:.2f}x -> {:.2f}x); keeping the ratio's tokens: {} -> {} read requests for {} -> {} rows",
      bytes[0], bytes[1], as_like, double(bytes[0]) / double(as_like), double(bytes[1]) / double(as_like), reads[0],
      reads[1], rows[0], rows[1]);
  EXPECT_GT(bytes[1], 0u);
  EXPECT_LT(bytes[1], bytes[0]);
  // The same rows up to a group per layer (whole groups reach k), in fewer requests.
  const uint64_t slack = uint64_t(store_->BlockGroupTokens()) * ctx_->config().n_layer;
  EXPECT_LE(rows[1], rows[0] + slack);
  EXPECT_LE(rows[0], rows[1] + slack);
  EXPECT_LT(reads[1], reads[0]);
}

}  // namespace
}  // namespace impress
