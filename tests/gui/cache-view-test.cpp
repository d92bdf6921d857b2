// The documents and radix-tree panels' numbers (gui/cache-view.h) against hand-computed values
// and a naive recursive reference, and both panels (plus the conversation bar) drawn headless
// from a populated snapshot: no ImGui assertion, no command without input.
#include "gui/cache-view.h"

#include <gtest/gtest.h>
#include <imgui.h>

#include <functional>
#include <random>

#include "gui/panels.h"

namespace impress::gui {
namespace {

TEST(CacheView, DocumentResidencySharesSumToOneAndFollowTheCounts) {
  DocumentEntry d;
  EXPECT_FALSE(DocumentResidency(d).known) << "no span: unknown";
  d.span_begin = 100;
  d.span_end = 300;  // 200 tokens
  d.tokens_cached = 150;
  d.tokens_device = 50;
  d.tokens_host = 30;
  const ResidencyShares r = DocumentResidency(d);
  ASSERT_TRUE(r.known);
  EXPECT_DOUBLE_EQ(r.device, 0.25);
  EXPECT_DOUBLE_EQ(r.host, 0.15);
  EXPECT_DOUBLE_EQ(r.ssd, 0.35);
  EXPECT_DOUBLE_EQ(r.uncached, 0.25);
  // Inconsistent counts (a tier count above the cached count) are clamped, never negative.
  d.tokens_device = 500;
  const ResidencyShares c = DocumentResidency(d);
  EXPECT_DOUBLE_EQ(c.device, 0.75);
  EXPECT_DOUBLE_EQ(c.host, 0.0);
  EXPECT_DOUBLE_EQ(c.ssd, 0.0);
  EXPECT_NEAR(c.device + c.host + c.ssd + c.uncached, 1.0, 1e-12);
}

// A random forest in pre-order, as the store's snapshot gives it.
TreeView RandomTree(int n, std::mt19937& rng) {
  TreeView t;
  for (int i = 0; i < n; ++i) {
    TreeRow r;
    r.parent = i == 0 || rng() % 4 == 0 ? -1 : int(rng() % unsigned(i));
    r.n_tokens = 1 + rng() % 100;
    r.kv_bytes = r.n_tokens * 4096;
    r.hits = rng() % 7;
    r.pinned = rng() % 3 == 0;
    r.chunks_device = rng() % 3;
    r.chunks_host = rng() % 3;
    r.chunks_ssd = rng() % 5;
    t.rows.push_back(r);
  }
  return t;
}

TEST(CacheView, TreeChildrenAndTotalsMatchANaiveWalk) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const TreeView t = RandomTree(1 + int(rng() % 60), rng);
    const auto children = TreeChildren(t);
    ASSERT_EQ(children.size(), t.rows.size() + 1);
    // Reference: for every row, scan all rows for those naming it as parent.
    for (size_t p = 0; p <= t.rows.size(); ++p) {
      std::vector<int> want;
      for (size_t i = 0; i < t.rows.size(); ++i)
        if ((p == t.rows.size() && t.rows[i].parent < 0) || t.rows[i].parent == int(p)) want.push_back(int(i));
      EXPECT_EQ(children[p], want) << "parent " << p;
    }
    // Walking from the root reaches every row exactly once; totals equal a plain sum.
    std::vector<int> seen(t.rows.size(), 0);
    std::function<void(int)> walk = [&](int i) {
      ++seen[size_t(i)];
      for (int c : children[size_t(i)]) walk(c);
    };
    for (int r : children.back()) walk(r);
    for (int s : seen) EXPECT_EQ(s, 1);
    TreeTotals want;
    for (const TreeRow& r : t.rows) {
      want.n_tokens += r.n_tokens;
      want.kv_bytes += r.kv_bytes;
      want.hits += r.hits;
      want.pinned_tokens += r.pinned ? r.n_tokens : 0;
      want.chunks_ssd += r.chunks_ssd;
    }
    const TreeTotals got = SumTree(t);
    EXPECT_EQ(got.n_tokens, want.n_tokens);
    EXPECT_EQ(got.kv_bytes, want.kv_bytes);
    EXPECT_EQ(got.hits, want.hits);
    EXPECT_EQ(got.pinned_tokens, want.pinned_tokens);
    EXPECT_EQ(got.chunks_ssd, want.chunks_ssd);
  }
}

TEST(CacheView, FormatAge) {
  EXPECT_EQ(FormatAge(1000, 1010), "just now");
  EXPECT_EQ(FormatAge(1000, 1000 + 5 * 60), "5 min ago");
  EXPECT_EQ(FormatAge(1000, 1000 + 3 * 3600 + 5), "3 h ago");
  EXPECT_EQ(FormatAge(1000, 1000 + 2 * 86400), "2 d ago");
  EXPECT_EQ(FormatAge(2000, 1000), "just now") << "a clock that went back";
}

TEST(CacheView, DocumentsTreeAndConversationBarDrawHeadless) {
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.DisplaySize = ImVec2(1280, 800);
  io.DeltaTime = 1.0f / 60.0f;
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  std::mt19937 rng(3);
  AppSnapshot s;
  s.phase = WorkerPhase::kIdle;
  s.store_dir = "/tmp/store";
  s.db_path = "/tmp/conversations.db";
  s.conversations = {{1, "Who built the lighthouse?", 1000, 4, 2, false}, {2, "Ferry times", 900, 2, 1, true}};
  s.conversation_id = 1;
  s.conversation_title = "Who built the lighthouse?";
  for (int i = 0; i < 3; ++i) {
    DocumentEntry d;
    d.name = "doc" + std::to_string(i);
    d.n_tokens = 100;
    d.span_begin = i == 2 ? -1 : 30 + 110 * i;
    d.span_end = i == 2 ? -1 : d.span_begin + 105;
    d.tokens_cached = 80;
    d.tokens_device = 20;
    d.pinned = i == 0;
    d.attached = i != 2;
    s.documents.push_back(d);
  }
  s.tree = std::make_shared<TreeView>(RandomTree(40, rng));
  for (bool retrieval : {false, true}) {
    s.retrieval = retrieval;
    for (int tab = 0; tab < 3; ++tab) {
      UiState ui;
      ui.inspector_tab = 2;  // the radix tree
      for (int frame = 0; frame < 3; ++frame) {
        UiActions out;
        ImGui::NewFrame();
        DrawAllPanels(s, ui, out);
        ImGui::Render();
        EXPECT_GT(ImGui::GetDrawData()->TotalVtxCount, 0);
        EXPECT_TRUE(out.commands.empty()) << "no input, no command";
      }
    }
  }
  ImGui::DestroyContext();
}

}  // namespace
}  // namespace impress::gui
