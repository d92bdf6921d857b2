// Saved conversations, document cache controls, retrieval mode and bad input, through the real
// app under Xvfb (`impress gui --script`), in two runs over the same store and database:
//   run 1: attach two documents, ask, pin the first document's cache, print residency and tree.
//   run 2 (a restart): the conversation reopens with its turns and documents; bad files give
//   messages and lose nothing; the next question reuses the cached prefix from the SSD; unpin,
//   drop the second document's cache (the first stays cached); retrieval mode answers from
//   FTS5-retrieved passages.
// Every `wait` waits for the worker to finish what was sent (its hang guard is an hour), so a
// loaded machine makes the runs slower, never failing. Skips when xvfb-run or the default model
// is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/gui/script-check-util.h"

namespace impress::gui {
namespace {

namespace fs = std::filesystem;
using check::DefaultModel;
using check::OnPath;
using check::RunCommand;

// The `docs` line of document n (the last one printed after position `from`).
struct DocLine {
  bool found = false;
  int n_tokens = 0, span_begin = -1, span_end = -1;
  long long cached = 0;
  bool pinned = false;
  std::string rest;
};
DocLine FindDoc(const std::string& out, int n, size_t from, size_t to = std::string::npos) {
  const std::string seg = out.substr(from, to == std::string::npos ? std::string::npos : to - from);
  const std::regex re(
      "document " + std::to_string(n) +
      R"(: [^|]+\| (\d+) tokens \| span (-?\d+)--?(\d+) \| cached (\d+) device \d+ host \d+ \| (.*)\n)");
  DocLine d;
  for (auto it = std::sregex_iterator(seg.begin(), seg.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    d.found = true;
    d.n_tokens = std::stoi(m[1]);
    d.span_begin = std::stoi(m[2]);
    d.span_end = std::stoi(m[3]);
    d.cached = std::stoll(m[4]);
    d.rest = m[5];
    d.pinned = d.rest.rfind("pinned | ", 0) == 0;
  }
  return d;
}

size_t Mark(const std::string& out, const std::string& what, size_t from = 0) {
  const size_t p = out.find(what, from);
  EXPECT_NE(p, std::string::npos) << "missing \"" << what << "\" in:\n" << out;
  return p == std::string::npos ? out.size() : p;
}

TEST(GuiSession, ConversationsReopenCacheControlsRetrievalAndBadInput) {
  if (!OnPath("xvfb-run")) GTEST_SKIP() << "xvfb-run is not installed";
  const std::string model = DefaultModel();
  if (!fs::exists(model)) GTEST_SKIP() << "the default model is missing: " << model;

  const fs::path dir = fs::temp_directory_path() / ("impress-gui-session-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string doc1 = std::string(IMPRESS_SOURCE_DIR) + "/tests/gui/data/sample.md";
  const std::string doc2 = (dir / "ferry.txt").string();
  std::ofstream(doc2) << "The ferry to Gull Rock leaves the harbour at seven every morning.\n\n"
                         "Tickets cost three pounds and are sold on the quay by Mrs Hale.\n";
  // Bad input for run 2.
  const std::string binary = (dir / "image.png").string(), bad_utf8 = (dir / "latin1.txt").string();
  const std::string huge = (dir / "huge.txt").string(), long_doc = (dir / "long.txt").string();
  {
    std::ofstream b(binary, std::ios::binary);
    for (int i = 0; i < 4096; ++i) b.put(char(i * 37 % 256));
    std::ofstream(bad_utf8, std::ios::binary) << "caf\xe9 cr\xe8me\n";
    std::ofstream h(huge, std::ios::binary);
    h.seekp((200ll << 20) - 1);
    h.put('\n');  // a sparse 200 MB file
    std::ifstream gpl(std::string(IMPRESS_SOURCE_DIR) + "/assets/docs/gpl-3.0.txt");
    const std::string text((std::istreambuf_iterator<char>(gpl)), std::istreambuf_iterator<char>());
    std::ofstream(long_doc) << text << text;  // ~15,000 tokens: longer than the 8,192-token context
  }
  auto run = [&](const std::string& name, const std::string& script) {
    const fs::path path = dir / (name + ".script");
    std::ofstream(path) << script;
    const std::string cmd = "XDG_CONFIG_HOME='" + dir.string() + "/config' xvfb-run -a -s '-screen 0 1280x800x24' '" +
                            std::string(IMPRESS_BINARY) + "' gui --model '" + model + "' --store '" + dir.string() +
                            "/store' --max-tokens 12 --width 1280 --height 800 --script '" + path.string() + "' 2>&1";
    int status = 0;
    std::string out = RunCommand(cmd, &status);
    std::cout << "----- " << name << " -----\n" << out;
    EXPECT_EQ(status, 0) << out;
    return out;
  };

  // Run 1.
  const std::string out1 = run("first", "doc " + doc1 + "\ndoc " + doc2 +
                                            "\nwait\n"
                                            "ask Who built the lighthouse?\nwait\n"
                                            "docs\ntree\n"
                                            "pin 1\nwait\n"
                                            "docs\ntree\nconversations\nquit\n");
  ASSERT_NE(out1.find("answer 1: "), std::string::npos) << out1;
  const size_t after_ask = Mark(out1, "answer 1: ");
  const size_t after_pin = Mark(out1, "message: pinned", after_ask);
  const DocLine d1 = FindDoc(out1, 1, after_ask, after_pin), d2 = FindDoc(out1, 2, after_ask, after_pin);
  ASSERT_TRUE(d1.found && d2.found) << out1;
  // Both documents were stored with the answer: every token of their spans is cached.
  EXPECT_GT(d1.span_end - d1.span_begin, d1.n_tokens - 1);
  EXPECT_EQ(d1.cached, d1.span_end - d1.span_begin) << d1.rest;
  EXPECT_EQ(d2.cached, d2.span_end - d2.span_begin) << d2.rest;
  EXPECT_GE(d2.span_begin, d1.span_end - 1) << "the second document follows the first";
  EXPECT_FALSE(d1.pinned);
  const DocLine p1 = FindDoc(out1, 1, after_pin);
  EXPECT_TRUE(p1.pinned) << p1.rest;
  std::smatch tm;
  const std::string tail1 = out1.substr(after_pin);
  ASSERT_TRUE(std::regex_search(tail1, tm, std::regex(R"(tree: (\d+) nodes, (\d+) tokens, (\d+) pinned tokens)")))
      << out1;
  EXPECT_GE(std::stoll(tm[3]), d1.span_end) << "the pinned path covers the first document";
  EXPECT_NE(out1.find("| 2 turns | 2 documents | open"), std::string::npos) << out1;

  // Run 2: a restart.
  const std::string out2 = run("second",
                               "wait\nconversations\ndocs\n"
                               "doc " +
                                   binary + "\ndoc " + bad_utf8 + "\ndoc " + huge + "\ndoc " + long_doc +
                                   "\nwait\n"
                                   "ask Who carried the stones?\nwait\n"
                                   "unpin 1\nwait\ndrop-doc 2\nwait\ndocs\ntree\n"
                                   "mode retrieval\nwait\n"
                                   "ask What time does the ferry leave?\nwait\n"
                                   "docs\nconversations\nquit\n");
  // The conversation came back with its turns and documents, and the pin.
  EXPECT_NE(out2.find("saved user: Who built the lighthouse?"), std::string::npos) << out2;
  EXPECT_NE(out2.find("saved assistant: "), std::string::npos) << out2;
  const size_t listed = Mark(out2, "| 2 turns | 2 documents | open");
  const DocLine r1 = FindDoc(out2, 1, listed, Mark(out2, "message: cannot add document"));
  EXPECT_TRUE(r1.pinned) << r1.rest;
  EXPECT_EQ(r1.cached, r1.span_end - r1.span_begin) << "reopened: the cache still holds the document";
  // Bad input: a message each, nothing lost.
  EXPECT_NE(out2.find("image.png"), std::string::npos) << out2;
  EXPECT_NE(out2.find("latin1.txt"), std::string::npos) << out2;
  EXPECT_NE(out2.find("huge.txt"), std::string::npos) << out2;
  EXPECT_NE(out2.find("long.txt has"), std::string::npos) << out2;
  EXPECT_NE(out2.find("longer than the model's context"), std::string::npos) << out2;
  // The question after the restart reused the stored prefix.
  const size_t a1 = Mark(out2, "answer 1: ");
  const std::string stats = out2.substr(a1, out2.find('\n', out2.find('\n', a1) + 1) - a1);
  std::smatch rm;
  ASSERT_TRUE(std::regex_search(stats, rm, std::regex(R"((\d+) of (\d+) prefix tokens reused)"))) << stats;
  EXPECT_GE(std::stoi(rm[1]), r1.span_end) << stats;
  // Dropping document 2's cache kept document 1's.
  const size_t dropped = Mark(out2, "message: dropped", a1);
  const size_t retrieval = Mark(out2, "message: retrieval mode", dropped);
  const DocLine k1 = FindDoc(out2, 1, dropped, retrieval), k2 = FindDoc(out2, 2, dropped, retrieval);
  ASSERT_TRUE(k1.found && k2.found) << out2;
  EXPECT_FALSE(k1.pinned);
  EXPECT_EQ(k1.cached, k1.span_end - k1.span_begin) << k1.rest;
  EXPECT_EQ(k2.cached, 0) << k2.rest;
  // Retrieval mode: the ferry question carried the ferry passage.
  const size_t a2 = Mark(out2, "answer 2: ", retrieval);
  const size_t pass = Mark(out2, "  passages: ", a2);
  EXPECT_NE(out2.substr(pass, out2.find('\n', pass) - pass).find("ferry.txt"), std::string::npos) << out2;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace impress::gui
