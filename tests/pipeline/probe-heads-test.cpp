// Probe heads that represent the layer under grouped-query attention: the spread choice puts a
// probe head in every KV group (checked by brute force over shapes), and on the default model over
// a real text its selection agrees better with the all-head (H2O) selection than the first heads'
// do, at the probe I/O the report shows (spread: every KV head's keys; first heads: KV head 0's).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/selection.h"
#include "tests/support/default-model.h"
#include "tests/support/shared-model.h"

namespace impress {
namespace {

using ::impress::test_support::DefaultModel;

ModelConfig Shape(int n_head, int n_head_kv) {
  ModelConfig c;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  return c;
}

TEST(ProbeHeads, SpreadHeadsForSmolLm2AreOnePerKvGroup) {
  const ModelConfig c = Shape(9, 3);
  EXPECT_EQ(ProbeQueryHeads(c, 3, true), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(ProbeKvHeads(c, 3, true), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ProbeQueryHeads(c, 3, false), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ProbeKvHeads(c, 3, false), (std::vector<int>{0}));
  EXPECT_EQ(ProbeQueryHeads(c, 1, true), (std::vector<int>{0}));
  EXPECT_EQ(ProbeQueryHeads(c, 40, true).size(), 9u) << "clamped to the heads there are";
}

TEST(ProbeHeads, SpreadCoversEveryKvGroupWhenThereAreEnoughProbeHeads) {
  for (int n_kv = 1; n_kv <= 16; ++n_kv)
    for (int group = 1; group <= 8; ++group)
      for (int p = 1; p <= n_kv * group; ++p) {
        const ModelConfig c = Shape(n_kv * group, n_kv);
        const std::vector<int> heads = ProbeQueryHeads(c, p, true);
        ASSERT_EQ(int(heads.size()), p);
        ASSERT_TRUE(std::is_sorted(heads.begin(), heads.end()));
        ASSERT_EQ(std::set<int>(heads.begin(), heads.end()).size(), heads.size()) << "distinct heads";
        std::set<int> groups;
        for (int h : heads) {
          ASSERT_GE(h, 0);
          ASSERT_LT(h, c.n_head);
          groups.insert(h / group);
        }
        EXPECT_EQ(int(groups.size()), std::min(p, n_kv))
            << "n_head " << c.n_head << " n_head_kv " << n_kv << " probes " << p;
        EXPECT_EQ(ProbeKvHeads(c, p, true), std::vector<int>(groups.begin(), groups.end()));
      }
}

// Recall of the all-head top-k by the probe's top-k, per layer, over a real text.
class ProbeAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    Status load_status;
    ctx_ = test_support::SharedDefaultModel(&load_status);
    ASSERT_TRUE(load_status.ok()) << load_status.ToString();
    if (!ctx_) GTEST_SKIP() << "default model not found: " << DefaultModel();
    dir_ = std::filesystem::temp_directory_path() / ("impress-probe-heads-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ModelContext* ctx_ = nullptr;
  std::filesystem::path dir_;
};

// Mean over layers of |TopK(probe score) ∩ TopK(all-head score)| / k.
double MeanRecall(const RequestReport& probe, const RequestReport& all, int n_layer, int n, int k) {
  double sum = 0;
  for (int il = 0; il < n_layer; ++il) {
    const std::span<const float> a(all.importance.data() + size_t(il) * n, size_t(n));
    const std::span<const float> p(probe.importance.data() + size_t(il) * n, size_t(n));
    const std::vector<int> ta = TopK(a, k), tp = TopK(p, k);
    std::vector<int> both;
    std::set_intersection(ta.begin(), ta.end(), tp.begin(), tp.end(), std::back_inserter(both));
    sum += double(both.size()) / double(k);
  }
  return sum / n_layer;
}

TEST_F(ProbeAgreement, SpreadProbeHeadsAgreeBetterWithAllHeadsThanTheFirstHeads) {
  const ModelConfig& c = ctx_->config();
  store::PrefixStoreOptions o = StoreOptionsFor(c, 3, /*spread=*/true);  // keys of every group
  o.dir = dir_.string();
  o.reorder_interval = std::chrono::milliseconds(0);
  o.device_bytes = o.host_bytes = 0;
  auto st = store::PrefixStore::Open(o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ImpressPipeline pipe(*ctx_, st->get());
  auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  doc->text.resize(6000);
  Conversation conv;
  conv.AddDocument(std::move(*doc));
  const std::vector<std::string> questions = {"Who may copy this license document?",
                                              "What does the license say about warranty?",
                                              "Summarise the preamble in one sentence."};
  double recall_first = 0, recall_spread = 0;
  uint64_t probe_bytes_first = 0, probe_bytes_spread = 0;
  std::vector<float> logits;
  for (size_t qi = 0; qi < questions.size(); ++qi) {
    const PromptTokens p = conv.Build(questions[qi], ctx_->tokenizer(), ctx_->chat_template());
    if (qi == 0) {  // ingest
      PipelineSettings s;
      s.system = SystemKind::kRecomp;
      ASSERT_TRUE(pipe.Prefill({p.tokens, p.n_prefix}, s, 0, &logits).ok());
      pipe.StoreAsync(size_t(p.n_prefix));
      ASSERT_TRUE(pipe.WaitForStore().ok());
    }
    PipelineSettings s;
    s.record_importance = true;
    s.report_importance = false;  // the store's statistics stay as they are between the runs
    s.keep = 0.25f;
    s.select_group = 0;                // top-k sets of exactly k tokens, compared by recall
    s.system = SystemKind::kAsH2oLfu;  // every head scored: the reference
    auto all = pipe.Prefill({p.tokens, p.n_prefix}, s, 0, &logits);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    const int n = all->n_matched;
    ASSERT_GT(n, 1000);
    const int k = KeepCount(n, s.keep);
    s.system = SystemKind::kImpress;
    s.alpha = 50.0f;  // every layer passes: the probe alone selects
    for (bool spread : {false, true}) {
      s.probe_spread = spread;
      auto r = pipe.Prefill({p.tokens, p.n_prefix}, s, 0, &logits);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->n_matched, n);
      const double recall = MeanRecall(*r, *all, c.n_layer, n, k);
      uint64_t probe_bytes = 0;
      for (const LayerReport& lr : r->layers) {
        ASSERT_TRUE(lr.passed);
        // This store's probe keys are every KV head's, as fp16: the selected tokens' keys are
        // gathered from them, not read again.
        EXPECT_EQ(lr.key_bytes, uint64_t(n) * c.n_head_kv * c.head_dim * 2);
        probe_bytes += lr.key_bytes;
      }
      (spread ? recall_spread : recall_first) += recall / double(questions.size());
      if (spread) probe_bytes_spread += probe_bytes;
      // The probe keys a store opened for these probe heads keeps (this store keeps all groups').
      probe_bytes_first += spread ? 0 : uint64_t(c.n_layer) * n * ProbeKvHeads(c, 3, false).size() * c.head_dim * 2;
    }
  }
  spdlog::info(
      "recall of the all-head top-k (keep 25%): first heads {:.3f}, spread {:.3f}; probe keys read {} / {} bytes",
      recall_first, recall_spread, probe_bytes_first, probe_bytes_spread);
  EXPECT_GT(recall_spread, recall_first);
  // The probe I/O it costs: every KV head's keys instead of one of three.
  EXPECT_EQ(probe_bytes_spread, 3 * probe_bytes_first);
  EXPECT_EQ(ProbeKvHeads(c, 3, true).size(), size_t(c.n_head_kv));
}

}  // namespace
}  // namespace impress
