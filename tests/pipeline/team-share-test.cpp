// Two desktops, one document, one team tier: desktop A computes a document's KV and stores it
// (published to a redis-server of the test's own); desktop B, with a store of its own that
// never saw the document, fills its prefix from the team tier and answers a question with
// exactly A's first-token logits, with every selection: the team tier carries A's write order, so
// B's chunks and read groups are A's. Runs the default model (skips without it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "chat/conversation.h"
#include "chat/document.h"
#include "pipeline/impress-pipeline.h"
#include "tests/store/redis-test-util.h"
#include "tests/support/default-model.h"
#include "tests/support/shared-model.h"

namespace impress {
namespace {

using ::impress::test_support::DefaultModel;

struct Desktop {
  std::unique_ptr<store::PrefixStore> store;
  std::unique_ptr<ImpressPipeline> pipe;
};

TEST(TeamShare, SecondDesktopAnswersFromTheTeamTierWithTheFirstsLogits) {
  Status load_status;
  ModelContext* ctx = test_support::SharedDefaultModel(&load_status);
  ASSERT_TRUE(load_status.ok()) << load_status.ToString();
  if (!ctx) GTEST_SKIP() << "default model not found: " << DefaultModel();
  auto server = store::testing::RedisServer::Start({});
  ASSERT_NE(server, nullptr);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("impress-team-share-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);

  Conversation conv;
  auto doc = LoadDocument(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  doc->text.resize(5000);  // ~1,100 tokens
  conv.AddDocument(std::move(*doc));
  // The team tier holds whole spans (the store's chunks) of a prefix: the prompts' reusable part
  // is the document's first whole spans, then come the question's own tokens.
  const int span = StoreOptionsFor(ctx->config(), 3).chunk_tokens;
  const int prefix = conv.Build("", ctx->tokenizer(), ctx->chat_template()).n_prefix / span * span;
  ASSERT_GE(prefix, 2 * span);
  auto prompt = [&](const std::string& q) {
    const PromptTokens p = conv.Build(q, ctx->tokenizer(), ctx->chat_template());
    EXPECT_GE(p.n_prefix, prefix);
    std::vector<int32_t> t(p.tokens.begin(), p.tokens.begin() + prefix);
    t.insert(t.end(), p.tokens.begin() + p.n_prefix, p.tokens.end());
    return t;
  };
  auto open = [&](const std::string& name, bool selective = false, bool publisher_groups = false) {
    Desktop d;
    store::PrefixStoreOptions o = StoreOptionsFor(ctx->config(), 3);
    o.dir = (dir / name).string();
    o.reorder_interval = std::chrono::milliseconds(0);
    o.team.url = "redis://127.0.0.1:" + std::to_string(server->port());
    o.team.team = "team-share-test";
    o.team.selective = selective;
    o.team.publisher_groups = publisher_groups;
    auto st = store::PrefixStore::Open(o);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (st.ok()) d.store = std::move(*st);
    if (d.store) d.pipe = std::make_unique<ImpressPipeline>(*ctx, d.store.get());
    return d;
  };
  const std::vector<int32_t> q1 = prompt("Who may copy this license document?");
  const std::vector<int32_t> q2 = prompt("Summarise the preamble.");
  PipelineSettings s;

  // Desktop A: the first question computes and stores the document; the second reuses it.
  Desktop a = open("a");
  ASSERT_TRUE(a.pipe);
  std::vector<float> logits_a;
  {
    auto r = a.pipe->Prefill({q1, prefix}, s, 2, &logits_a);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->n_matched, 0);
    const int32_t tok = int32_t(std::max_element(logits_a.begin(), logits_a.end()) - logits_a.begin());
    ASSERT_TRUE(a.pipe->Decode(tok, &logits_a).ok());
    // The document's whole spans are the shared prefix (as the chat session marks its prompt's
    // documents): written in an order of their own, apart from the question and the answer.
    a.pipe->StoreAsync(0, nullptr, {.shared_prefix = uint64_t(prefix)});
    ASSERT_TRUE(a.pipe->WaitForStore().ok());
  }
  ASSERT_TRUE(a.store->WaitTeamPublished(std::chrono::seconds(60)));
  EXPECT_GE(a.store->Stats().team.spans_published, uint64_t(prefix / span));

  // Desktop B: an empty store of its own; the prefix comes from the team tier, not recomputed.
  Desktop b = open("b");
  ASSERT_TRUE(b.pipe);
  const store::TeamFill fill = b.store->FillFromTeam(std::span<const int32_t>(q2).subspan(0, prefix));
  EXPECT_TRUE(fill.status.ok()) << fill.status.ToString();
  EXPECT_EQ(fill.n_local, 0u);
  EXPECT_EQ(fill.n_team, uint64_t(prefix));
  EXPECT_EQ(b.store->Stats().team.tokens_filled, uint64_t(prefix));

  // B's layout of the prefix is A's: every layer's read groups are the same.
  {
    const auto pre = std::span<const int32_t>(q2).subspan(0, prefix);
    store::MatchHandle ha = a.store->Match(pre), hb = b.store->Match(pre);
    ASSERT_EQ(ha.n_matched, uint64_t(prefix));
    ASSERT_EQ(hb.n_matched, uint64_t(prefix));
    const uint32_t g = a.store->BlockGroupTokens();
    for (int il = 0; il < ctx->config().n_layer; ++il) {
      auto ga = a.store->ReadGroups(ha, il, g);
      auto gb = b.store->ReadGroups(hb, il, g);
      ASSERT_TRUE(ga.ok() && gb.ok());
      EXPECT_EQ(*ga, *gb) << "layer " << il << ": B's read groups are not A's";
    }
    ASSERT_TRUE(a.store->Release(ha).ok());
    ASSERT_TRUE(b.store->Release(hb).ok());
  }

  // The same question on both desktops, each from its own store: B's first-token logits are A's
  // bit for bit, whatever the selection. Token-level selection and AS-like depend on the KV
  // alone; block-group selection (the default) also on the chunk layout, which B took from A's
  // write order.
  PipelineSettings token_level;
  token_level.select_group = 0;
  PipelineSettings as_like;
  as_like.system = SystemKind::kAsLike;
  const std::pair<const char*, PipelineSettings> runs[] = {
      {"token-level", token_level}, {"as-like", as_like}, {"block groups", PipelineSettings{}}};
  for (const auto& [name, settings] : runs) {
    std::vector<float> logits_b;
    auto ra = a.pipe->Prefill({q2, prefix}, settings, 2, &logits_a);
    ASSERT_TRUE(ra.ok()) << ra.status().ToString();
    auto rb = b.pipe->Prefill({q2, prefix}, settings, 2, &logits_b);
    ASSERT_TRUE(rb.ok()) << rb.status().ToString();
    EXPECT_EQ(ra->n_matched, prefix) << name;
    EXPECT_EQ(rb->n_matched, prefix) << name;
    EXPECT_EQ(rb->n_new, ra->n_new) << name;
    ASSERT_EQ(logits_b.size(), logits_a.size());
    size_t differ = 0;
    for (size_t i = 0; i < logits_a.size(); ++i) differ += logits_a[i] != logits_b[i];
    std::fprintf(stderr, "%s: %zu of %zu first-token logits differ\n", name, differ, logits_a.size());
    EXPECT_EQ(differ, 0u) << name << ": B's first-token logits differ from A's";
    EXPECT_EQ(std::max_element(logits_a.begin(), logits_a.end()) - logits_a.begin(),
              std::max_element(logits_b.begin(), logits_b.end()) - logits_b.begin())
        << name;
  }
  EXPECT_EQ(b.store->Stats().team.tokens_filled, uint64_t(prefix)) << "B computed nothing of the prefix";

  // Desktops C, D, E, G read the prefix from the team tier layer by layer (selective reads): the
  // same logits as A for token-level selection (C), AS-like (D) and the block-group selection
  // with the publisher's groups (E: TeamOptions::publisher_groups); G's default groups (runs of
  // rows of each span's value, in A's slot order) receive the fewest bytes, and every block-group
  // read fewer than AS-like, which reads every row.
  const auto pre = std::span<const int32_t>(q2).subspan(0, prefix);
  auto remote_run = [&](Desktop& d, const PipelineSettings& settings, std::vector<float>* logits) -> RequestReport {
    const store::TeamFill f = d.store->FillFromTeam(pre);
    EXPECT_TRUE(f.status.ok()) << f.status.ToString();
    EXPECT_EQ(f.n_remote, uint64_t(prefix));
    EXPECT_EQ(f.n_team, 0u);
    auto r = d.pipe->Prefill({q2, prefix}, settings, 2, logits);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->team_remote);
    EXPECT_EQ(r->n_matched, prefix);
    EXPECT_EQ(r->n_recomputed, 0);
    EXPECT_GT(r->team_read_bytes, 0u);
    return *r;
  };
  auto same_logits = [&](const PipelineSettings& settings, const std::vector<float>& logits, const char* name) {
    std::vector<float> ref;
    ASSERT_TRUE(a.pipe->Prefill({q2, prefix}, settings, 2, &ref).ok());
    ASSERT_EQ(ref.size(), logits.size());
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) differ += ref[i] != logits[i];
    EXPECT_EQ(differ, 0u) << name << ": logits read from the team tier differ from A's";
  };
  Desktop c = open("c", true), d = open("d", true), e = open("e", true, true), g = open("g", true);
  ASSERT_TRUE(c.pipe && d.pipe && e.pipe && g.pipe);
  std::vector<float> logits_c, logits_d, logits_e, logits_g;
  const RequestReport rc = remote_run(c, token_level, &logits_c);
  same_logits(token_level, logits_c, "token-level");
  const RequestReport rd = remote_run(d, as_like, &logits_d);
  same_logits(as_like, logits_d, "as-like");
  const RequestReport re = remote_run(e, PipelineSettings{}, &logits_e);
  const RequestReport rg = remote_run(g, PipelineSettings{}, &logits_g);
  std::fprintf(stderr,
               "bytes from the team tier: token-level %llu, as-like %llu, publisher's block groups %llu, span block "
               "groups %llu\n",
               (unsigned long long)rc.team_read_bytes, (unsigned long long)rd.team_read_bytes,
               (unsigned long long)re.team_read_bytes, (unsigned long long)rg.team_read_bytes);
  EXPECT_LT(re.team_read_bytes, rd.team_read_bytes);
  EXPECT_LT(rg.team_read_bytes, rd.team_read_bytes);
  EXPECT_LE(rg.team_read_bytes, re.team_read_bytes);
  same_logits(PipelineSettings{}, logits_e, "the publisher's block groups");
  // Releasing C's match fills the whole prefix into C in the background; then C answers locally.
  ASSERT_TRUE(c.pipe->ReleaseMatch().ok());
  bool local = false;
  for (int i = 0; i < 600 && !local; ++i) {
    local = c.store->Residency(pre).n_matched >= uint64_t(prefix);
    if (!local) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(local) << "the background fill never brought the prefix";
  std::vector<float> logits_c2;
  EXPECT_EQ(c.store->FillFromTeam(pre).n_remote, 0u);
  auto again = c.pipe->Prefill({q2, prefix}, token_level, 2, &logits_c2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->team_remote);
  EXPECT_EQ(again->n_matched, prefix);
  EXPECT_EQ(logits_c2, logits_c);

  // Desktop F stages the prefix, then the server dies before the request reads it: the request
  // still answers, computing the prefix, with A's first token.
  Desktop f = open("f", true);
  ASSERT_TRUE(f.pipe);
  ASSERT_EQ(f.store->FillFromTeam(pre).n_remote, uint64_t(prefix));
  server->Kill();
  std::vector<float> logits_f, logits_ref;
  auto rf = f.pipe->Prefill({q2, prefix}, as_like, 2, &logits_f);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  EXPECT_FALSE(rf->team_remote);
  EXPECT_EQ(rf->n_matched, 0);
  EXPECT_EQ(rf->n_recomputed, prefix);
  ASSERT_TRUE(a.pipe->Prefill({q2, prefix}, as_like, 2, &logits_ref).ok());
  EXPECT_EQ(std::max_element(logits_f.begin(), logits_f.end()) - logits_f.begin(),
            std::max_element(logits_ref.begin(), logits_ref.end()) - logits_ref.begin());
  EXPECT_GE(f.store->Stats().team.errors, 1u);

  (void)a.pipe->ReleaseMatch();
  (void)b.pipe->ReleaseMatch();
  for (Desktop* x : {&c, &d, &e, &f, &g}) {
    (void)x->pipe->ReleaseMatch();
    x->pipe.reset();
    x->store.reset();
  }
  for (Desktop* d : {&a, &b}) {
    d->pipe.reset();
    d->store.reset();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace impress
