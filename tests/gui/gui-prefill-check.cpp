// The UI thread's frame time during a ~4,000-token prefill, measured in a scripted session under
// Xvfb: a small document and two questions (so the importance heatmap has a request to show),
// then a ~4,000-token slice of assets/docs/gpl-3.0.txt is attached and a third question runs a
// ~4,000-token prefill while the window keeps drawing. The frame-time statistics during that
// prefill (frames, max, p99, mean) and the per-stage frame profile are PRINTED: they are the
// evidence for the 50 ms target. Asserted: the session worked, the third request computed at
// least 3,500 tokens, frames were measured during the prefill, and no gross stall (p99 under
// 250 ms: CI runs other tests beside this one on 2 cores, so the 50 ms target is not a
// pass/fail line here). Skips when xvfb-run or the default model is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "tests/gui/script-check-util.h"

namespace impress::gui {
namespace {

namespace fs = std::filesystem;
using check::DefaultModel;
using check::OnPath;
using check::RunCommand;

// The first `bytes` bytes of the GPL text, cut at a paragraph end. 19,100 bytes are ~4,050
// SmolLM2 tokens (the app prints the count it tokenized; the test checks the prefill size).
std::string GplSlice(size_t bytes) {
  std::ifstream in(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str().substr(0, bytes);
  const size_t cut = text.rfind("\n\n");
  if (cut != std::string::npos) text.resize(cut + 1);
  return text;
}

TEST(GuiPrefill, FrameTimesDuringA4000TokenPrefillAreMeasuredAndPrinted) {
  if (!OnPath("xvfb-run")) GTEST_SKIP() << "xvfb-run is not installed";
  const std::string model = DefaultModel();
  if (!fs::exists(model)) GTEST_SKIP() << "the default model is missing: " << model;

  const fs::path dir = fs::temp_directory_path() / ("impress-gui-prefill-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string slice = GplSlice(19100);
  ASSERT_GT(slice.size(), 15000u) << "assets/docs/gpl-3.0.txt is missing or short";
  {
    std::ofstream f(dir / "gpl-4k.txt", std::ios::binary);
    f << slice;
  }
  const std::string sample = std::string(IMPRESS_SOURCE_DIR) + "/tests/gui/data/sample.md";
  {
    std::ofstream s(dir / "prefill.script");
    s << "doc " << sample << "\n"
      << "wait 120\n"
      << "ask Who built the lighthouse?\n"
      << "wait 240\n"
      << "ask When does the museum open?\n"  // reuses the prefix: the heatmap has a map to draw
      << "wait 240\n"
      << "doc " << (dir / "gpl-4k.txt").string() << "\n"
      << "wait 120\n"
      << "ask What does the license say about conveying verbatim copies?\n"  // the ~4,000-token prefill
      << "wait 400\n"
      << "expect-answer\n"
      << "quit\n";
  }
  const std::string cmd = "XDG_CONFIG_HOME='" + dir.string() + "/config' XDG_DATA_HOME='" + dir.string() +
                          "/data' xvfb-run -a -s '-screen 0 1600x900x24' '" + std::string(IMPRESS_BINARY) +
                          "' gui --model '" + model + "' --store '" + dir.string() + "/store' --config-dir '" +
                          dir.string() + "/config' --max-tokens 8 --width 1600 --height 900 --script '" +
                          (dir / "prefill.script").string() + "' 2>&1";
  int status = 0;
  const std::string out = RunCommand(cmd, &status);
  std::cout << out;
  ASSERT_EQ(status, 0) << out;

  // Three answers with text.
  for (int i = 1; i <= 3; ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("answer " + std::to_string(i) + ": (.*)\\n"))) << out;
    EXPECT_FALSE(m[1].str().empty()) << "answer " << i << " is empty";
  }
  // The third request computed ~4,000 tokens (prefix minus what it reused).
  const size_t a3 = out.find("answer 3:");
  ASSERT_NE(a3, std::string::npos);
  const std::string third = out.substr(a3);
  std::smatch rm;
  int computed = 0;
  if (std::regex_search(third, rm, std::regex("(\\d+) of (\\d+) prefix tokens reused")))
    computed = std::stoi(rm[2]) - std::stoi(rm[1]);
  else if (std::regex_search(third, rm, std::regex("computed (\\d+) tokens")))
    computed = std::stoi(rm[1]);
  std::cout << "third request: " << computed << " prefix tokens computed\n";
  EXPECT_GE(computed, 3500) << third;

  // The frame times during the prefill: measured, printed, and no gross stall.
  std::smatch fm;
  ASSERT_TRUE(std::regex_search(
      out, fm, std::regex("frame time during prefill: (\\d+) frames, max ([0-9.]+) ms, p99 ([0-9.]+) ms, mean ([0-9.]+) ms")))
      << out;
  const int n_frames = std::stoi(fm[1]);
  const double max_ms = std::stod(fm[2]), p99_ms = std::stod(fm[3]), mean_ms = std::stod(fm[4]);
  std::printf("UI frame time during the ~%d-token prefill: %d frames, max %.1f ms, p99 %.1f ms, mean %.1f ms (target: under 50 ms)\n",
              computed, n_frames, max_ms, p99_ms, mean_ms);
  std::smatch wm;
  if (std::regex_search(out, wm, std::regex("frame work \\(poll to swap\\):[^\\n]*during prefill: max ([0-9.]+) ms, p99 ([0-9.]+) ms")))
    std::printf("UI frame work (poll to swap) during the prefill: max %s ms, p99 %s ms\n", wm[1].str().c_str(),
                wm[2].str().c_str());
  EXPECT_GT(n_frames, 10) << "too few frames drawn during a ~4,000-token prefill";
  EXPECT_LT(p99_ms, 250.0) << "the UI thread stalled during the prefill";
  // The per-stage profile was printed for the prefill frames.
  EXPECT_NE(out.find("frame profile, during prefill"), std::string::npos) << out;
  // The heatmap was drawn as a texture (uploaded once per request/size), not rebuilt per frame.
  std::smatch tm;
  ASSERT_TRUE(std::regex_search(out, tm, std::regex("textures: (\\d+) uploads"))) << out;
  EXPECT_GE(std::stoi(tm[1]), 1);
  EXPECT_LT(std::stoi(tm[1]), 50);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace impress::gui
