// A serving system is one policy object (pipeline/system-policy.h): this file adds one, "edges"
// (each layer keeps the first and the last tokens of the matched prefix, k in all), registers it
// the way any system joins the registry, and runs it through the real pipeline: the positions each
// layer used and the bytes it read are what the policy chose, and with a keep of 1 its first token
// equals AS-like's bit for bit (the same K/V in the same order). Also the registry itself: the
// built-in ids and names, the parts each built-in system is made of, refused registrations.
#include <gtest/gtest.h>
#include <algorithm>

#include "pipeline/impress-pipeline.h"
#include "pipeline/system-policy.h"
#include "tests/support/model-store-test.h"

namespace impress {
namespace {

// A system that chooses positions itself, with LRU caching and no reorder.
SystemTraits PositionsTraits(const char* name, const char* description) {
  return SystemTraits{.name = name,
                      .display = name,
                      .description = description,
                      .selection = LayerSelection::kPositions,
                      .cache = store::PolicyKind::kLru,
                      .reorders = false};
}

// The first ceil(k / 2) and the last floor(k / 2) prefix tokens.
class EdgesSystem : public SystemPolicy {
 public:
  EdgesSystem() : SystemPolicy(PositionsTraits("edges", "the first and the last tokens of the prefix, k in all")) {}

  Status ChoosePositions(int, int n, int k, const PipelineSettings&, std::vector<uint32_t>* out) const override {
    out->clear();
    const int head = (k + 1) / 2;
    for (int i = 0; i < n; ++i)
      if (i < head || i >= n - (k - head)) out->push_back(uint32_t(i));
    return Status::Ok();
  }
};

// Chooses positions in the wrong order: the pipeline must refuse them.
class BackwardsSystem : public SystemPolicy {
 public:
  BackwardsSystem() : SystemPolicy(PositionsTraits("backwards", "an invalid choice")) {}

  Status ChoosePositions(int, int n, int, const PipelineSettings&, std::vector<uint32_t>* out) const override {
    *out = {uint32_t(n - 1), 0u};
    return Status::Ok();
  }
};

SystemKind Registered(std::unique_ptr<SystemPolicy> (*make)()) {
  Result<SystemKind> id = RegisterSystem(make());
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : SystemKind::kRecomp;
}

SystemKind EdgesId() {
  static const SystemKind id =
      Registered([]() -> std::unique_ptr<SystemPolicy> { return std::make_unique<EdgesSystem>(); });
  return id;
}

SystemKind BackwardsId() {
  static const SystemKind id =
      Registered([]() -> std::unique_ptr<SystemPolicy> { return std::make_unique<BackwardsSystem>(); });
  return id;
}

TEST(SystemRegistry, BuiltInIdsNameTheirSystems) {
  const std::pair<SystemKind, const char*> named[] = {
      {SystemKind::kRecomp, "recomp"},          {SystemKind::kAsLike, "as"},
      {SystemKind::kAsH2oLru, "as-h2o-lru"},    {SystemKind::kAsH2oLfu, "as-h2o-lfu"},
      {SystemKind::kImpressItf, "impress-itf"}, {SystemKind::kImpressItfRo, "impress-itf-ro"},
      {SystemKind::kImpress, "impress"}};
  for (const auto& [id, name] : named) {
    EXPECT_STREQ(SystemName(id), name);
    SystemKind parsed = SystemKind::kRecomp;
    ASSERT_TRUE(ParseSystem(name, &parsed)) << name;
    EXPECT_EQ(parsed, id);
    EXPECT_EQ(System(id).name(), name);
  }
  SystemKind unused = SystemKind::kImpress;
  EXPECT_FALSE(ParseSystem("no-such-system", &unused));
  EXPECT_EQ(unused, SystemKind::kImpress);
  EXPECT_STREQ(SystemName(SystemKind(100000)), "?");
  EXPECT_EQ(SystemNames("|").rfind("recomp|as|as-h2o-lru|as-h2o-lfu|impress-itf|impress-itf-ro|impress", 0), 0u);
}

// The parts each built-in system is composed of (docs/design.md section 5).
TEST(SystemRegistry, BuiltInSystemsAreTheirParts) {
  struct Parts {
    SystemKind id;
    LayerSelection selection;
    store::PolicyKind cache;
    bool reorders;
  };
  const Parts parts[] = {
      {SystemKind::kRecomp, LayerSelection::kNone, store::PolicyKind::kLru, false},
      {SystemKind::kAsLike, LayerSelection::kWholeLayer, store::PolicyKind::kLru, false},
      {SystemKind::kAsH2oLru, LayerSelection::kAllHeads, store::PolicyKind::kLru, false},
      {SystemKind::kAsH2oLfu, LayerSelection::kAllHeads, store::PolicyKind::kLfu, false},
      {SystemKind::kImpressItf, LayerSelection::kProbe, store::PolicyKind::kLfu, false},
      {SystemKind::kImpressItfRo, LayerSelection::kProbe, store::PolicyKind::kLfu, true},
      {SystemKind::kImpress, LayerSelection::kProbe, store::PolicyKind::kImpress, true},
  };
  PipelineSettings dense;
  dense.dense_layers = 2;
  for (const Parts& p : parts) {
    const SystemPolicy& s = System(p.id);
    SCOPED_TRACE(s.name());
    EXPECT_EQ(s.traits().selection, p.selection);
    EXPECT_EQ(s.traits().cache, p.cache);
    EXPECT_EQ(s.traits().reorders, p.reorders);
    EXPECT_FALSE(s.traits().display.empty());
    EXPECT_FALSE(s.traits().description.empty());
    // The dense layers of a system that reuses load whole; ReComp reads nothing anywhere.
    EXPECT_EQ(s.SelectionFor(dense, 1), s.reuses() ? LayerSelection::kWholeLayer : LayerSelection::kNone);
    EXPECT_EQ(s.SelectionFor(dense, 2), p.selection);
  }
}

TEST(SystemRegistry, ARegisteredSystemIsNamedAndParsedLikeTheBuiltIns) {
  const SystemKind id = EdgesId();
  EXPECT_STREQ(SystemName(id), "edges");
  SystemKind parsed = SystemKind::kRecomp;
  ASSERT_TRUE(ParseSystem("edges", &parsed));
  EXPECT_EQ(parsed, id);
  EXPECT_NE(SystemNames(", ").find("edges"), std::string::npos);
  const std::vector<SystemKind> all = AllSystems();
  EXPECT_NE(std::find(all.begin(), all.end(), id), all.end());
  // A second system of the same name, or none, is refused.
  EXPECT_FALSE(RegisterSystem(std::make_unique<EdgesSystem>()).ok());
  EXPECT_FALSE(RegisterSystem(nullptr).ok());
}

class ToySystem : public test_support::ModelStoreTest {
 protected:
  void SetUp() override {
    ModelStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    store::PrefixStoreOptions o = StoreOptionsFor(ctx_->config(), 3);
    o.dir = dir_.string();
    o.reorder_interval = std::chrono::milliseconds(0);
    auto st = store::PrefixStore::Open(o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(*st);
    pipe_ = std::make_unique<ImpressPipeline>(*ctx_, store_.get());
    StoreGplPrompt(*pipe_, 3000, "What is this document?", &prompt_);
  }
  void TearDown() override {
    pipe_.reset();
    store_.reset();
    ModelStoreTest::TearDown();
  }

  std::unique_ptr<store::PrefixStore> store_;
  std::unique_ptr<ImpressPipeline> pipe_;
  PromptTokens prompt_;
};

TEST_F(ToySystem, EveryLayerUsesThePositionsThePolicyChoseAndReadsOnlyThose) {
  const ModelConfig& c = ctx_->config();
  PipelineSettings s;
  s.system = EdgesId();
  s.keep = 0.2f;
  s.record_importance = true;
  std::vector<float> logits;
  auto r = pipe_->Prefill({prompt_.tokens, prompt_.n_prefix}, s, 0, &logits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_STREQ(SystemName(r->system), "edges");
  const int n = r->n_matched;
  ASSERT_GT(n, 300);
  const int k = KeepCount(n, s.keep);
  const uint64_t row_bytes = uint64_t(c.n_head_kv) * c.head_dim * sizeof(f16_t);
  for (const LayerReport& lr : r->layers) {
    SCOPED_TRACE(lr.il);
    EXPECT_FALSE(lr.probed);
    EXPECT_EQ(lr.n, n);
    EXPECT_EQ(lr.k, k);
    EXPECT_EQ(lr.key_bytes, uint64_t(k) * row_bytes);
    EXPECT_EQ(lr.value_bytes, uint64_t(k) * row_bytes);
    for (int i = 0; i < n; ++i) {
      const bool edge = i < (k + 1) / 2 || i >= n - k / 2;
      ASSERT_EQ(r->selected[size_t(lr.il) * n + i], edge ? 1 : 0) << "token " << i;
    }
  }
  EXPECT_TRUE(r->selected_attention());
}

TEST_F(ToySystem, KeepingEveryTokenAnswersExactlyAsAsLike) {
  PipelineSettings s;
  s.system = SystemKind::kAsLike;
  std::vector<float> as_logits, edges_logits;
  ASSERT_TRUE(pipe_->Prefill({prompt_.tokens, prompt_.n_prefix}, s, 0, &as_logits).ok());
  s.system = EdgesId();
  s.keep = 1.0f;
  auto r = pipe_->Prefill({prompt_.tokens, prompt_.n_prefix}, s, 0, &edges_logits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->selected_attention());
  EXPECT_EQ(edges_logits, as_logits);
}

TEST_F(ToySystem, APolicyChoosingPositionsOutOfOrderFailsTheRequest) {
  PipelineSettings s;
  s.system = BackwardsId();
  std::vector<float> logits;
  auto r = pipe_->Prefill({prompt_.tokens, prompt_.n_prefix}, s, 0, &logits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("backwards"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace impress
