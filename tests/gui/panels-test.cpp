// Every panel drawn in an ImGui context with no renderer (no window, no GL): from an empty
// snapshot, from a busy one, and from one with several requests (full reports with importance
// matrices), at a large and a tiny display size. Nothing may crash or trip an ImGui assertion,
// and a frame without user input sends no command.
#include <gtest/gtest.h>
#include <imgui.h>

#include <random>
#include <set>

#include <spdlog/fmt/fmt.h>

#include "gui/panels.h"
#include "gui/texture-cache.h"

namespace impress::gui {
namespace {

class HeadlessImGui : public ::testing::Test {
 protected:
  void SetUp() override {
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.DisplaySize = ImVec2(1600, 900);
    io.DeltaTime = 1.0f / 60.0f;
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);  // builds the font atlas
    ASSERT_GT(w, 0);
  }
  void TearDown() override { ImGui::DestroyContext(); }

  // One frame of the whole window; returns what the panels asked for.
  UiActions Frame(const AppSnapshot& s, UiState& ui) {
    UiActions out;
    ImGui::NewFrame();
    DrawAllPanels(s, ui, out);
    ImGui::Render();
    EXPECT_GT(ImGui::GetDrawData()->TotalVtxCount, 0);
    return out;
  }
};

std::shared_ptr<const RequestRecord> MakeRequest(int id, int n_layer, int n_tok, std::mt19937& rng) {
  auto r = std::make_shared<RequestRecord>();
  r->id = id;
  r->question = fmt::format("question {}", id);
  r->label = fmt::format("#{} impress", id);
  RequestReport& rep = r->report;
  rep.n_prompt = n_tok + 20;
  rep.n_prefix = n_tok;
  rep.n_matched = id == 1 ? 0 : n_tok;
  rep.n_new = rep.n_prompt - rep.n_matched;
  rep.ttft_ms = 100.0 * id;
  rep.breakdown.match_ms = 1;
  rep.breakdown.probe_io_ms = 5;
  rep.breakdown.compute_ms = 90.0 * id;
  rep.chunks_device = id;
  rep.chunks_host = 2;
  rep.chunks_ssd = 5;
  rep.ssd_bytes_read = 1000u * id;
  std::uniform_real_distribution<float> u(0, 1);
  for (int il = 0; il < n_layer; ++il) {
    LayerReport l;
    l.il = il;
    l.probed = rep.n_matched > 0;
    l.s = u(rng);
    l.t = 0.3;
    l.passed = l.s >= l.t;
    l.k = n_tok / 4;
    l.n = n_tok;
    rep.layers.push_back(l);
  }
  if (rep.n_matched > 0) {
    for (int i = 0; i < n_layer * rep.n_matched; ++i) {
      rep.importance.push_back(u(rng));
      rep.selected.push_back(u(rng) < 0.25f);
    }
    for (int t = 0; t < rep.n_matched; ++t) r->prefix_pieces.push_back(t % 7 ? " word" : "\n");
  }
  r->has_fidelity = id == 3;
  r->fidelity.n_continuation = 8;
  r->fidelity.n_continuation_match = 7;
  return r;
}

AppSnapshot RichSnapshot() {
  std::mt19937 rng(3);
  AppSnapshot s;
  s.version = 5;
  s.phase = WorkerPhase::kDecoding;
  s.status = "answering";
  s.progress = 0.4;
  s.model_name = "SmolLM2";
  s.n_ctx = 8192;
  s.n_layer = 30;
  s.store_dir = "/tmp/store";
  s.store.tiers.device.budget_bytes = 256 << 20;
  s.store.tiers.device.used_bytes = 10 << 20;
  s.store.tiers.device.hits = 40;
  s.store.tiers.host.hits = 3;
  s.store.tiers.ssd_reads = 9;
  s.store.ssd_cap_bytes = 1 << 30;
  s.store.n_nodes = 4;
  for (int id = 1; id <= 4; ++id) s.requests.push_back(MakeRequest(id, 30, 700, rng));
  s.chat.push_back({"user", "What is this?", nullptr});
  s.chat.push_back({"assistant", "A document.", s.requests[1]});
  s.chat.push_back({"error", "bad.bin: not text", nullptr});
  s.chat.push_back({"info", "asked again", nullptr});
  s.chat.push_back({"assistant", "Streaming", nullptr, true});
  s.documents.push_back({"/tmp/a.md", "a.md", 1234, 300, true, "reused"});
  s.documents.push_back({"/tmp/b.md", "b.md", 99999, 9000, false, "not cached"});
  s.messages = {"added a.md", "b.md is longer than the context"};
  return s;
}

TEST_F(HeadlessImGui, EmptySnapshotDrawsEveryPanel) {
  AppSnapshot s;
  UiState ui;
  for (int i = 0; i < 3; ++i) {
    const UiActions a = Frame(s, ui);
    EXPECT_TRUE(a.commands.empty());
    EXPECT_FALSE(a.stop);
  }
}

TEST_F(HeadlessImGui, RichSnapshotDrawsEveryPanelAndEveryInspectorTab) {
  const AppSnapshot s = RichSnapshot();
  UiState ui;
  for (int tab = 0; tab < int(InspectorTabNames().size()); ++tab) {
    ui.inspector_tab = tab;
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(Frame(s, ui).commands.empty());
  }
  // The settings panel took its values from the snapshot.
  EXPECT_FLOAT_EQ(ui.settings.edit.pipeline.alpha, s.settings.pipeline.alpha);
  // An earlier request picked in the importance and similarity panels, the one without reuse too.
  ui.importance.request = 0;
  ui.similarity.request = 0;
  Frame(s, ui);
  ui.importance.request = 2;
  ui.similarity.request = 2;
  Frame(s, ui);
}

TEST_F(HeadlessImGui, ImportanceCompareModeDrawsTwoRequests) {
  const AppSnapshot s = RichSnapshot();
  UiState ui;
  ui.importance.compare = true;
  for (int other : {-1, 0, 1, 2, 3, 99}) {  // previous, one without importance, valid ones, out of range
    ui.importance.compare_request = other;
    Frame(s, ui);
  }
  ui.importance.request = 1;  // the first request with importance: no earlier one to compare with
  ui.importance.compare_request = -1;
  Frame(s, ui);
}

// A provider that hands out fake texture ids and counts the pictures it was asked to build.
struct CountingTextures : TextureProvider {
  int made = 0;
  std::set<std::string> keys;
  void* Texture(const std::string& key, const std::function<RgbaImage()>& make) override {
    if (keys.insert(key).second) {
      const RgbaImage im = make();
      EXPECT_GT(im.width, 0);
      EXPECT_EQ(im.pixels.size(), size_t(im.width) * im.height * 4);
      ++made;
    }
    return reinterpret_cast<void*>(uintptr_t(1000 + keys.size()));
  }
};

TEST_F(HeadlessImGui, HeatmapIsOneTextureBuiltOncePerRequestAndSize) {
  const AppSnapshot s = RichSnapshot();
  UiState ui;
  auto vertices = [&] {
    UiActions out;
    ImGui::NewFrame();
    ImGui::SetNextWindowSize(ImVec2(600, 300));
    ImGui::Begin("importance only");
    DrawImportancePanel(s, ui.importance);
    ImGui::End();
    ImGui::Render();
    return ImGui::GetDrawData()->TotalVtxCount;
  };
  const int rects = vertices();  // no provider: one rectangle per cell
  CountingTextures tex;
  SetCurrentTextures(&tex);
  int textured = 0;
  for (int i = 0; i < 5; ++i) textured = vertices();
  EXPECT_EQ(tex.made, 1) << "the picture is built once, then drawn from the cache";
  EXPECT_LT(textured * 5, rects) << "one quad instead of a rectangle per cell";
  ui.importance.outline_selected = false;  // another option: another picture
  vertices();
  EXPECT_EQ(tex.made, 2);
  ui.importance.compare = true;  // the earlier request gets its own picture
  vertices();
  vertices();
  // The latest keeps its picture (the key holds the width, not the height: the quad stretches).
  EXPECT_EQ(tex.made, 3);
  SetCurrentTextures(nullptr);
}

TEST_F(HeadlessImGui, TinyDisplayAndHoverDoNotBreakPlots) {
  const AppSnapshot s = RichSnapshot();
  UiState ui;
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(330, 250);
  Frame(s, ui);
  // Sweep the mouse across the window so every plot's tooltip code runs.
  io.DisplaySize = ImVec2(1600, 900);
  for (float y = 5; y < 900; y += 37)
    for (float x = 5; x < 1600; x += 53) {
      io.MousePos = ImVec2(x, y);
      Frame(s, ui);
    }
}

TEST_F(HeadlessImGui, EachPanelAloneInItsOwnWindow) {
  const AppSnapshot s = RichSnapshot();
  UiState ui;
  UiActions out;
  ImGui::NewFrame();
  ImGui::Begin("test");
  DrawChatPanel(s, ui.chat, out);
  DrawDocumentsPanel(s, ui.documents, out);
  DrawImportancePanel(s, ui.importance);
  DrawSimilarityPanel(s, ui.similarity);
  DrawTiersPanel(s, ui.tiers, out);
  DrawTtftPanel(s, ui.ttft);
  DrawTreePanel(s, ui.tree);
  DrawSettingsPanel(s, ui.settings, out);
  ImGui::End();
  ImGui::Render();
  EXPECT_TRUE(out.commands.empty());
}

}  // namespace
}  // namespace impress::gui
