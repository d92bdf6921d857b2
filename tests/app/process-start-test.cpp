// How `impress` starts, run as users run it: OpenBLAS's workers are told to sleep as soon as they
// have no work (OPENBLAS_THREAD_TIMEOUT, set by the program restarting itself once, since the
// library reads it when it loads), unless the user chose a value, which stands. Checked on the
// environment of a running `impress chat` (/proc/PID/environ), read once the chat has started.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "tests/support/default-model.h"

namespace fs = std::filesystem;

namespace impress {
namespace {

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Starts `impress chat` with `timeout` as OPENBLAS_THREAD_TIMEOUT (nullptr: unset), waits for its
// greeting (the program has restarted, if it does, and loaded the model), and returns the
// variable's value in the running program's environment ("<unset>" if absent). `greeted` says
// whether the greeting came within the limit.
std::string TimeoutSeenByChat(const char* timeout, const fs::path& dir, bool* greeted) {
  *greeted = false;
  const fs::path out_path = dir / "output.txt";
  int in_pipe[2];
  if (::pipe(in_pipe) != 0) return "<pipe failed>";
  const std::string model = test_support::DefaultModel(), store = (dir / "store").string();
  const pid_t pid = ::fork();
  if (pid < 0) return "<fork failed>";
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(in_pipe[0], 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::close(in_pipe[1]);
    ::unsetenv("GOTO_THREAD_TIMEOUT");
    if (timeout) ::setenv("OPENBLAS_THREAD_TIMEOUT", timeout, 1);
    else ::unsetenv("OPENBLAS_THREAD_TIMEOUT");
    std::string bin = IMPRESS_BINARY, sub = "chat", m = "--model", s = "--store";
    std::string mv = model, sv = store;
    char* argv[] = {bin.data(), sub.data(), m.data(), mv.data(), s.data(), sv.data(), nullptr};
    ::execv(bin.c_str(), argv);
    _exit(127);
  }
  ::close(in_pipe[0]);
  // The greeting, within a generous limit (a loaded machine loads the model slowly).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ReadAll(out_path).find("IMPRESS chat:") != std::string::npos) {
      *greeted = true;
      break;
    }
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return "<exited early: " + ReadAll(out_path) + ">";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string environ = ReadAll("/proc/" + std::to_string(pid) + "/environ");
  ::close(in_pipe[1]);  // end of input: the chat leaves
  if (!*greeted) ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const std::string key = "OPENBLAS_THREAD_TIMEOUT=";
  for (size_t at = 0; at < environ.size();) {
    const size_t end = environ.find('\0', at);
    const std::string entry = environ.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.rfind(key, 0) == 0) return entry.substr(key.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "<unset>";
}

class ProcessStart : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test_support::DefaultModel()))
        << "the default model is missing; scripts/setup.sh downloads it";
    dir_ = fs::temp_directory_path() / ("impress-process-start-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(ProcessStart, OpenBlasWorkersSleepWhenIdle) {
  bool greeted = false;
  EXPECT_EQ(TimeoutSeenByChat(nullptr, dir_, &greeted), kBlasThreadTimeout);
  EXPECT_TRUE(greeted);
}

TEST_F(ProcessStart, TheUsersThreadTimeoutStands) {
  bool greeted = false;
  EXPECT_EQ(TimeoutSeenByChat("20", dir_, &greeted), "20");
  EXPECT_TRUE(greeted);
}

}  // namespace
}  // namespace impress
