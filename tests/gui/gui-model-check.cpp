// The model picker's path under Xvfb (`impress gui --script`, `model PATH` = the picker's Load):
// a second, tiny random-weight model made for the test (tests/gui/make-tiny-model.py, the
// default model's tokenizer) is loaded in the running app and answers; its KV is kept apart
// from the default model's (nothing reused), and back on the default model the document's
// cached prefix is reused again; the recent models list remembers both. A second run fakes a
// small machine (IMPRESS_MEM_AVAILABLE_MB): the default model is refused with the numbers,
// before the loaded one is unloaded, and the app goes on answering with it; the picker's
// dialog, opened on that model, draws (a screenshot that is a real picture).
// Skips without xvfb-run, the default model or the reference Python (the gguf package).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "gui/model-info.h"
#include "gui/png-image.h"
#include "tests/gui/script-check-util.h"

namespace impress::gui {
namespace {

namespace fs = std::filesystem;
using check::AnswerReport;
using check::DefaultModel;
using check::OnPath;
using check::RunCommand;

std::string Python() {
  if (const char* p = std::getenv("IMPRESS_PYTHON"); p && *p) return p;
  return IMPRESS_PYTHON_DEFAULT;
}

class GuiModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPath("xvfb-run")) GTEST_SKIP() << "xvfb-run is not installed";
    model_ = DefaultModel();
    if (!fs::exists(model_)) GTEST_SKIP() << "the default model is missing: " << model_;
    dir_ = fs::temp_directory_path() / ("impress-gui-model-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tiny_ = (dir_ / "tiny.gguf").string();
    int status = 0;
    const std::string out = RunCommand("'" + Python() + "' '" + std::string(IMPRESS_SOURCE_DIR) +
                                           "/tests/gui/make-tiny-model.py' '" + model_ + "' '" + tiny_ + "' 2>&1",
                                       &status);
    if (status != 0 && out.find("No module named") != std::string::npos)
      GTEST_SKIP() << "the reference Python lacks the gguf package: " << out;
    ASSERT_EQ(status, 0) << out;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string Run(const std::string& start_model, const std::string& script, const std::string& env, int* status) {
    const fs::path path = dir_ / "session.script";
    std::ofstream(path) << script;
    const std::string cmd = env + " XDG_CONFIG_HOME='" + dir_.string() +
                            "/config' xvfb-run -a -s '-screen 0 1280x800x24' '" + std::string(IMPRESS_BINARY) +
                            "' gui --model '" + start_model + "' --store '" + dir_.string() + "/store' --config-dir '" +
                            dir_.string() + "/config' --no-save --max-tokens 8 --width 1280 --height 800 --script '" +
                            path.string() + "' 2>&1";
    const std::string out = RunCommand(cmd, status);
    std::cout << out;
    return out;
  }

  std::string model_, tiny_;
  fs::path dir_;
};

TEST_F(GuiModel, PickerLoadsASecondModelWhoseKvIsKeptApartAndSwitchesBack) {
  const std::string doc = std::string(IMPRESS_SOURCE_DIR) + "/tests/gui/data/sample.md";
  int status = 0;
  const std::string out = Run(model_,
                              "doc " + doc + "\nwait\nask Who built the lighthouse?\nwait\n" +  //
                                  "model " + tiny_ + "\nwait\nask Who built the lighthouse?\nwait\n" + "model " +
                                  model_ + "\nwait\nask Who built the lighthouse?\nwait\nexpect-answer\nquit\n",
                              "", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("message: loaded tiny random llama"), std::string::npos) << out;
  const std::string r1 = AnswerReport(out, 1), r2 = AnswerReport(out, 2), r3 = AnswerReport(out, 3);
  for (const std::string* r : {&r1, &r2, &r3}) ASSERT_NE(r->find("TTFT"), std::string::npos) << out;
  EXPECT_NE(r1.find("nothing reused"), std::string::npos) << r1;
  // The tiny model never saw the document: the default model's cached KV is not its own.
  EXPECT_NE(r2.find("nothing reused"), std::string::npos) << r2;
  // Back on the default model, the document's prefix cached by answer 1 is found again.
  EXPECT_NE(r3.find("prefix tokens reused"), std::string::npos) << r3;
  // The document came along both times (attached again under each model).
  EXPECT_EQ(out.find("cannot add document"), std::string::npos) << out;
  const auto recent = LoadRecentModels((dir_ / "config" / "models.json").string());
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0], model_);
  EXPECT_EQ(recent[1], tiny_);
}

TEST_F(GuiModel, AModelThatWillNotFitIsRefusedBeforeUnloading) {
  auto big = EstimateModel(model_);
  auto small = EstimateModel(tiny_);
  ASSERT_TRUE(big.ok() && small.ok());
  // Room for the tiny model, far from the default one even with the tiny one's memory freed.
  const uint64_t fake_mb = (big->total_bytes() / 2) >> 20;
  ASSERT_GT(fake_mb << 20, small->total_bytes());
  ASSERT_LT((fake_mb << 20) + small->total_bytes(), big->total_bytes());
  int status = 0;
  const std::string shot = (dir_ / "picker.png").string();
  const std::string out = Run(tiny_,
                              "model " + model_ + "\nwait\nask Hello?\nwait\nexpect-answer\npicker " + model_ +
                                  "\nscreenshot " + shot + "\nquit\n",
                              "IMPRESS_MEM_AVAILABLE_MB=" + std::to_string(fake_mb), &status);
  ASSERT_EQ(status, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("message: (.*) will not fit in memory, not loaded: needs (.*)\\n")))
      << out;
  EXPECT_NE(m[2].str().find(std::to_string(fake_mb) + ".0 MiB available"), std::string::npos) << m[0];
  EXPECT_EQ(out.find("message: loaded"), std::string::npos) << out;
  // Still the tiny model, answering.
  EXPECT_NE(AnswerReport(out, 1).find("TTFT"), std::string::npos) << out;
  EXPECT_TRUE(LoadRecentModels((dir_ / "config" / "models.json").string()).empty());
  // The picker's dialog drew over the window (its listing, the estimate and the refusal).
  auto im = ReadPng(shot);
  ASSERT_TRUE(im.ok()) << im.status().ToString();
  const ImageContent c = MeasureContent(*im);
  EXPECT_GT(c.distinct_colours, 50u);
  EXPECT_GT(c.non_background, 0.1);
}

}  // namespace
}  // namespace impress::gui
