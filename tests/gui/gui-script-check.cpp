// The scripted session under Xvfb: `impress gui --script` adds a document (and a missing one:
// a clear message, nothing lost), asks two questions, changes alpha, asks again with the
// fidelity check, and saves screenshots. Checks: exit status 0, three non-empty answers, the
// second question's own report says it reused the cached prefix, frame times measured during
// the prefill (printed, not judged: bench/gui-prefill-bench.sh measures them), frames drawn
// while the worker computed within the redraw cap (counted), and screenshots
// that are real pictures (many colours, most pixels not background). Every `wait` waits for
// the worker to finish (its hang guard is an hour), so a loaded machine is slower, not failing.
// Skips when xvfb-run or the default model is missing.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gui/png-image.h"

#include "tests/gui/script-check-util.h"

namespace impress::gui {
namespace {

namespace fs = std::filesystem;
using check::AnswerReport;
using check::DefaultModel;
using check::OnPath;
using check::RunCommand;

TEST(GuiScript, SessionAnswersMeasuresFramesAndScreenshotsAreNotBlank) {
  if (!OnPath("xvfb-run")) GTEST_SKIP() << "xvfb-run is not installed";
  const std::string model = DefaultModel();
  if (!fs::exists(model)) GTEST_SKIP() << "the default model is missing: " << model;

  const fs::path dir = fs::temp_directory_path() / ("impress-gui-script-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string doc = std::string(IMPRESS_SOURCE_DIR) + "/tests/gui/data/sample.md";
  const std::string shot1 = (dir / "first.png").string(), shot2 = (dir / "again.png").string();
  {
    std::ofstream s(dir / "session.script");
    s << "doc " << doc << "\n"
      << "doc " << (dir / "missing.md").string() << "\n"
      << "wait\n"
      << "ask Who built the lighthouse?\n"
      << "wait\n"
      << "screenshot " << shot1 << "\n"
      << "ask When does the museum open?\n"
      << "wait\n"
      << "set alpha 1.2\n"
      << "again\n"
      << "wait\n"
      << "tab tiers\n"
      << "screenshot " << shot2 << "\n"
      << "expect-answer\n"
      << "quit\n";
  }
  const std::string cmd = "XDG_CONFIG_HOME='" + dir.string() + "/config' xvfb-run -a -s '-screen 0 1600x900x24' '" +
                          std::string(IMPRESS_BINARY) + "' gui --model '" + model + "' --store '" + dir.string() +
                          "/store' --max-tokens 24 --width 1600 --height 900 --script '" +
                          (dir / "session.script").string() + "' 2>&1";
  int status = 0;
  const std::string out = RunCommand(cmd, &status);
  std::cout << out;
  ASSERT_EQ(status, 0) << out;

  // Three answers, each with text.
  for (int i = 1; i <= 3; ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("answer " + std::to_string(i) + ": (.*)\\n"))) << out;
    EXPECT_FALSE(m[1].str().empty()) << "answer " << i << " is empty";
  }
  // The missing document gave a clear message naming it, and the session went on.
  EXPECT_NE(out.find("message: cannot add document"), std::string::npos) << out;
  EXPECT_NE(out.find("missing.md"), std::string::npos) << out;
  // Each answer's checks read that answer's own report (check::AnswerReport), never a later one.
  const std::string report1 = AnswerReport(out, 1), report2 = AnswerReport(out, 2), report3 = AnswerReport(out, 3);
  for (const std::string* r : {&report1, &report2, &report3}) {
    ASSERT_NE(r->find("TTFT"), std::string::npos) << "an answer without its report:\n" << out;
    // ... and says why it ended.
    EXPECT_TRUE(std::regex_search(*r, std::regex("stop (end|max_tokens|repetition|context|user)\\b"))) << *r;
  }
  // The first question found an empty store; the second reused the document's cached prefix
  // (answer 3's report always does).
  EXPECT_NE(report1.find("nothing reused"), std::string::npos) << report1;
  EXPECT_NE(report2.find("prefix tokens reused"), std::string::npos) << report2;
  // Only the third ran with the new alpha and the fidelity check.
  EXPECT_NE(report3.find("a=1.20"), std::string::npos) << report3;
  EXPECT_NE(report3.find("fidelity:"), std::string::npos) << report3;
  for (const std::string* r : {&report1, &report2}) {
    EXPECT_EQ(r->find("a=1.20"), std::string::npos) << *r;
    EXPECT_EQ(r->find("fidelity:"), std::string::npos) << *r;
  }

  // Frame times were measured while a prefill ran.
  std::smatch fm;
  ASSERT_TRUE(std::regex_search(
      out, fm, std::regex("frame time during prefill: (\\d+) frames, max ([0-9.]+) ms, p99 ([0-9.]+) ms")))
      << out;
  EXPECT_GT(std::stoi(fm[1]), 0);
  // Printed only: frame times depend on the machine's load (bench/gui-prefill-bench.sh measures them).
  std::cout << "UI frame time during prefill: max " << fm[2] << " ms, p99 " << fm[3] << " ms\n";

  // The redraw cap: frames drawn while the worker computed are at most cap x the busy time it
  // observed, plus one per busy span (frames counted, not timed: a loaded machine only draws fewer).
  std::smatch rm;
  ASSERT_TRUE(std::regex_search(out, rm,
                                std::regex("redraw: (\\d+) frames; (\\d+) while the worker was busy for ([0-9.]+) s in "
                                           "(\\d+) span\\(s\\) \\(cap ([0-9.]+) Hz")))
      << out;
  const int busy_frames = std::stoi(rm[2]), spans = std::stoi(rm[4]);
  const double busy_s = std::stod(rm[3]), cap_hz = std::stod(rm[5]);
  EXPECT_EQ(cap_hz, 10.0);  // the default
  EXPECT_GT(busy_frames, 0);
  EXPECT_GT(spans, 0);
  // +1 per span, and 0.1 s of rounding in the printed busy time.
  EXPECT_LE(busy_frames, cap_hz * (busy_s + 0.1) + spans) << rm[0];

  for (const std::string& path : {shot1, shot2}) {
    auto im = ReadPng(path);
    ASSERT_TRUE(im.ok()) << im.status().ToString();
    EXPECT_EQ(im->width, 1600);
    EXPECT_EQ(im->height, 900);
    const ImageContent c = MeasureContent(*im);
    std::cout << path << ": " << c.distinct_colours << " colours, " << 100 * c.non_background << "% not background\n";
    EXPECT_GT(c.distinct_colours, 50u) << path;
    EXPECT_GT(c.non_background, 0.1) << path;  // a blank frame has 0; real ones measured 0.23-0.40
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace impress::gui
