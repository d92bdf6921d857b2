// What `impress generate` and `impress chat` do with bad input, run as users run them:
//  - `--prompt` with invalid UTF-8 is refused before the model loads, with the message
//    `--prompt-file` gives for the same bytes in a file (only the name of the source differs);
//  - `chat` refuses a line over 1 MiB, says so, and goes on with the next line;
//  - `chat` reading 48 MiB without a newline (as from /dev/zero) ends cleanly at the end of its
//    input without holding the line: its peak memory stays within 16 MiB of a run given a short
//    question, where std::getline would hold all 48 MiB;
//  - `chat`'s commands attach, list, detach and remove documents with the app's rules (a file that is not
//    text, or longer than the context, is refused or left unattached with a message), and an
//    unknown command is said to be one; none of them is sent to the model as a question.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/default-model.h"

namespace fs = std::filesystem;

namespace impress {
namespace {

struct ProcessRun {
  int rc = -1;
  std::string output;   // stdout and stderr
  long max_rss_kb = 0;  // peak resident memory of the process
};

// Runs the impress binary with `args`, `input` on stdin, in `dir`.
ProcessRun Impress(const std::vector<std::string>& args, const std::string& input, const fs::path& dir) {
  ProcessRun r;
  const std::string out_path = (dir / "output.txt").string();
  int in_pipe[2];
  if (::pipe(in_pipe) != 0) return r;
  const pid_t pid = ::fork();
  if (pid < 0) return r;
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(in_pipe[0], 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::close(in_pipe[1]);
    std::vector<char*> argv;
    std::string bin = IMPRESS_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    _exit(127);
  }
  ::close(in_pipe[0]);
  for (size_t done = 0; done < input.size();) {
    const ssize_t n = ::write(in_pipe[1], input.data() + done, input.size() - done);
    if (n <= 0) break;  // the program stopped reading (it exited)
    done += size_t(n);
  }
  ::close(in_pipe[1]);
  int status = 0;
  struct rusage ru {};
  if (::wait4(pid, &status, 0, &ru) != pid) return r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_kb = ru.ru_maxrss;
  std::ifstream in(out_path, std::ios::binary);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

class TerminalInput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test_support::DefaultModel();
    ASSERT_TRUE(fs::exists(model_)) << "the default model is missing (" << model_ << "); scripts/setup.sh downloads it";
    dir_ = fs::temp_directory_path() / ("impress-terminal-input-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> Chat() const {
    return {"chat", "--model", model_, "--store", (dir_ / "store").string(), "--max-tokens", "1"};
  }

  std::string model_;
  fs::path dir_;
};

// The message after "<source> ": what is wrong with the text, the same for both sources.
std::string AfterSource(const std::string& output, const std::string& source) {
  const size_t at = output.find(source + " is not valid UTF-8");
  return at == std::string::npos ? "" : output.substr(at + source.size(), output.find('\n', at) - at - source.size());
}

TEST_F(TerminalInput, InvalidUtf8PromptIsRefusedLikeAPromptFile) {
  const std::string bad = std::string("Is this ") + char(0xc3) + char(0x28) + " valid?";
  const std::string file = (dir_ / "prompt.txt").string();
  std::ofstream(file, std::ios::binary) << bad;
  const std::vector<std::string> common = {"generate", "--model", model_, "--store", (dir_ / "store").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return Impress(a, "", dir_);
  };
  const ProcessRun from_file = with({"--prompt-file", file});
  const ProcessRun from_arg = with({"--prompt", bad});
  EXPECT_EQ(from_file.rc, 1) << from_file.output;
  EXPECT_EQ(from_arg.rc, 1) << from_arg.output;
  const std::string file_msg = AfterSource(from_file.output, file), arg_msg = AfterSource(from_arg.output, "--prompt");
  EXPECT_NE(file_msg.find("bad byte 0xc3 at offset 8"), std::string::npos) << from_file.output;
  EXPECT_EQ(arg_msg, file_msg) << from_arg.output;
  EXPECT_EQ(from_arg.output.find("TTFT"), std::string::npos) << "an answer was generated";
}

TEST_F(TerminalInput, ChatRefusesAnOverlongLineAndAnswersTheNext) {
  const std::string input = std::string((1 << 20) + 1, 'x') + "\nHello\n/quit\n";
  const ProcessRun r = Impress(Chat(), input, dir_);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("input line longer than 1 MiB refused"), std::string::npos) << r.output.substr(0, 4000);
  EXPECT_NE(r.output.find("TTFT"), std::string::npos) << "the next line was not answered:\n"
                                                      << r.output.substr(0, 4000);
}

TEST_F(TerminalInput, ChatReadingAnEndlessLineKeepsItsMemory) {
  const ProcessRun small = Impress(Chat(), "Hello\n", dir_);
  ASSERT_EQ(small.rc, 0) << small.output;
  const ProcessRun zeros = Impress(Chat(), std::string(48 << 20, '\0'), dir_);
  EXPECT_EQ(zeros.rc, 0) << zeros.output.substr(0, 4000);
  EXPECT_NE(zeros.output.find("input line longer than 1 MiB refused"), std::string::npos)
      << zeros.output.substr(0, 4000);
  EXPECT_LT(zeros.max_rss_kb, small.max_rss_kb + 16 * 1024)
      << "peak memory " << zeros.max_rss_kb << " KiB with 48 MiB of zeros on stdin, " << small.max_rss_kb
      << " KiB with a short question";
}

TEST_F(TerminalInput, ChatCommandsAttachListAndRemoveDocuments) {
  const fs::path notes = dir_ / "notes.txt", huge = dir_ / "huge.txt", binary = dir_ / "binary.bin";
  std::ofstream(notes) << "The meeting is on Tuesday at noon in room 4.\n";
  {
    std::ofstream out(huge);
    for (int i = 0; i < 40000; ++i) out << "word" << i << " ";  // far beyond the test model's context
  }
  std::ofstream(binary, std::ios::binary) << std::string(
      "\x7f"
      "ELF\0\0\x01\x02",
      8);
  const std::string input = "/attach " + notes.string() + "\n/attach " + binary.string() + "\n/attach " +
                            huge.string() +
                            "\n/docs\n/frobnicate\n/remove 2\n/remove 9\n/detach 1\n/attach 1\n/docs\n/quit\n";
  const ProcessRun r = Impress(Chat(), input, dir_);
  EXPECT_EQ(r.rc, 0) << r.output;
  auto has = [&](const std::string& text) { return r.output.find(text) != std::string::npos; };
  EXPECT_TRUE(has("added notes.txt (")) << r.output;
  EXPECT_TRUE(has("its KV will take ")) << r.output;
  EXPECT_TRUE(has("cannot add document: invalid argument: " + binary.string())) << r.output;
  EXPECT_TRUE(has("longer than the model's context")) << r.output;
  EXPECT_FALSE(has("retrieval mode")) << "the terminal chat has no retrieval mode to offer:\n" << r.output;
  EXPECT_TRUE(has("2. huge.txt: ")) << r.output;
  EXPECT_TRUE(has("not attached")) << r.output;
  EXPECT_TRUE(has("unknown command /frobnicate")) << r.output;
  EXPECT_TRUE(has("removed huge.txt")) << r.output;
  EXPECT_TRUE(has("no document \"9\"")) << r.output;
  EXPECT_TRUE(has("notes.txt left out of the context (/attach 1 takes it back)")) << r.output;
  // The second listing: the notes alone, attached.
  const size_t second = r.output.rfind("1. notes.txt: ");
  ASSERT_NE(second, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("huge.txt: ", second), std::string::npos) << r.output;
  const std::string last = r.output.substr(second, r.output.find('\n', second) - second);
  EXPECT_NE(last.find(" tokens, attached"), std::string::npos) << "attached again by /attach 1: " << last;
  EXPECT_FALSE(has("TTFT")) << "a command was asked as a question:\n" << r.output;
}

}  // namespace
}  // namespace impress
