// A model file truncated or rewritten on disk while it is mapped: reading past its new end gives
// zeros instead of a SIGBUS that kills the process, the mapping reports that it changed (with the
// file's sizes), a mapping left alone reports nothing, and a SIGBUS anywhere else still reaches
// the action installed before the guard (a real bug still crashes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model/mapped-file.h"

namespace impress {
namespace {

namespace fs = std::filesystem;

const size_t kPage = size_t(::sysconf(_SC_PAGESIZE));

class SigbusGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("impress-sigbus-guard-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file of n_pages pages, every byte `fill`.
  std::string Write(const std::string& name, size_t n_pages, char fill) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f << std::string(n_pages * kPage, fill);
    return path;
  }

  fs::path dir_;
};

// A volatile read, so the load happens here (and faults here) whatever the optimizer knows.
uint8_t ReadByte(const uint8_t* p) { return *static_cast<const volatile uint8_t*>(p); }

TEST_F(SigbusGuardTest, ReadPastTheNewEndGivesZerosAndReportsTheChange) {
  const std::string path = Write("model.gguf", 4, '\xab');
  auto f = MappedFile::Open(path, "GGUF model");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->CheckUnchanged().ok());
  EXPECT_FALSE(f->poisoned());

  const uint64_t new_size = kPage + kPage / 2;
  ASSERT_EQ(::truncate(path.c_str(), off_t(new_size)), 0);
  // Before the new end: the file's bytes; after it in the same page: zeros (the kernel's, no
  // signal); whole pages past it: zeros from the guard, where the read would have raised SIGBUS.
  EXPECT_EQ(ReadByte(f->data()), 0xab);
  EXPECT_EQ(ReadByte(f->data() + new_size - 1), 0xab);
  EXPECT_EQ(ReadByte(f->data() + 3 * kPage + 7), 0);
  EXPECT_TRUE(f->poisoned());
  EXPECT_EQ(ReadByte(f->data() + 2 * kPage), 0);  // a page before the one that faulted
  EXPECT_EQ(ReadByte(f->data() + new_size), 0);
  EXPECT_EQ(ReadByte(f->data() + f->size() - 1), 0);

  const Status s = f->CheckUnchanged();
  EXPECT_EQ(s.code(), Status::Code::kDataLoss) << s.ToString();
  const std::string want = path + ": the model file changed on disk while in use (it is now " +
                           std::to_string(new_size) + " bytes, was " + std::to_string(4 * kPage) + "); load it again";
  EXPECT_EQ(s.message(), want);
}

TEST_F(SigbusGuardTest, OnlyTheTruncatedMappingIsPoisoned) {
  const std::string a_path = Write("a.gguf", 3, 'a');
  const std::string b_path = Write("b.gguf", 3, 'b');
  auto a = MappedFile::Open(a_path, "GGUF model");
  auto b = MappedFile::Open(b_path, "GGUF model");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(::truncate(a_path.c_str(), 0), 0);
  EXPECT_EQ(ReadByte(a->data() + kPage), 0);
  EXPECT_EQ(ReadByte(b->data() + 2 * kPage), 'b');
  EXPECT_TRUE(a->poisoned());
  EXPECT_FALSE(b->poisoned());
  EXPECT_FALSE(a->CheckUnchanged().ok());
  EXPECT_TRUE(b->CheckUnchanged().ok());
  // A range that is no longer mapped is no longer guarded: the slot goes back unpoisoned.
  *a = MappedFile();
  auto c = MappedFile::Open(b_path, "GGUF model");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->poisoned());
  EXPECT_TRUE(c->CheckUnchanged().ok());
}

TEST_F(SigbusGuardTest, RewriteInPlaceIsReportedAndReplacementByRenameIsNot) {
  const std::string path = Write("model.gguf", 2, 'x');
  auto f = MappedFile::Open(path, "GGUF model");
  ASSERT_TRUE(f.ok());
  // Rewritten in place, same size: the mapping reads the new bytes, so it has changed. The
  // modification time is set explicitly: a rewrite within one clock tick may not move it.
  {
    std::fstream w(path, std::ios::in | std::ios::out | std::ios::binary);
    w.write("y", 1);
  }
  const struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  const Status s = f->CheckUnchanged();
  EXPECT_EQ(s.code(), Status::Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(path + ": the model file changed on disk while in use"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(f->poisoned());

  // A new file renamed over the path: this mapping's file is untouched (only unlinked).
  const std::string other = Write("model-2.gguf", 2, 'x');
  auto g = MappedFile::Open(other, "GGUF model");
  ASSERT_TRUE(g.ok());
  fs::rename(Write("download.part", 1, 'z'), other);
  EXPECT_TRUE(g->CheckUnchanged().ok());
  EXPECT_EQ(ReadByte(g->data() + kPage), 'x');
}

// A borrowed image is not a file: nothing to check.
TEST(SigbusGuard, BorrowedImageIsAlwaysUnchanged) {
  static const uint8_t bytes[16] = {};
  const MappedFile f = MappedFile::Borrow(bytes, sizeof(bytes));
  EXPECT_TRUE(f.CheckUnchanged().ok());
  EXPECT_FALSE(f.poisoned());
}

// Files of the death tests' children, which end in _exit (no TearDown): each is unlinked as soon
// as it is mapped (the mapping keeps the file), so nothing is left behind.
std::string ChildFile(const char* what) {
  return (fs::temp_directory_path() / ("impress-sigbus-guard-test-" + std::to_string(::getpid()) + "-" + what))
      .string();
}

// A SIGBUS for a file mapping nobody registered: ::mmap directly, the file truncated, one read.
void FaultOutsideTheGuard() {
  const std::string path = ChildFile("foreign.bin");
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(2 * kPage, 'q');
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, 2 * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
  ::unlink(path.c_str());
  if (p == MAP_FAILED || ::ftruncate(fd, 0) != 0) _exit(3);
  ReadByte(static_cast<const uint8_t*>(p) + kPage);
  _exit(4);  // not reached: the read faults
}

// A guarded mapping exists in the process (the guard's handler is installed), as in the app.
MappedFile OpenGuarded() {
  const std::string path = ChildFile("guarded.gguf");
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(kPage, 'm');
  }
  auto f = MappedFile::Open(path, "GGUF model");
  ::unlink(path.c_str());
  if (!f.ok()) _exit(2);
  return std::move(*f);
}

void ExitFromHandler(int, siginfo_t*, void*) { _exit(42); }

// A SIGBUS handler of the program's own, installed before the guard's (which keeps it as the
// previous action): exits with 42.
void InstallExitFromHandler() {
  struct sigaction act = {};
  act.sa_sigaction = ExitFromHandler;
  act.sa_flags = SA_SIGINFO;
  ::sigaction(SIGBUS, &act, nullptr);
}

TEST(SigbusGuardDeathTest, ForeignFaultReachesTheHandlerInstalledBefore) {
  // "threadsafe": the child re-runs this test alone in a fresh process, so the handler below is
  // installed before the guard's (which then keeps it as the previous action).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallExitFromHandler();
        MappedFile m = OpenGuarded();
        FaultOutsideTheGuard();
      },
      ::testing::ExitedWithCode(42), "");
}

#if defined(__SANITIZE_ADDRESS__)
#define IMPRESS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IMPRESS_ASAN 1
#endif
#endif

TEST(SigbusGuardDeathTest, ForeignFaultStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto fault = []() {
    MappedFile m = OpenGuarded();
    FaultOutsideTheGuard();
  };
#ifdef IMPRESS_ASAN
  // The previous action is AddressSanitizer's, which reports the fault and exits.
  EXPECT_EXIT(fault(), ::testing::ExitedWithCode(1), "AddressSanitizer.*BUS");
#else
  EXPECT_EXIT(fault(), ::testing::KilledBySignal(SIGBUS), "");
#endif
}

TEST(SigbusGuardDeathTest, SentSigbusStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallExitFromHandler();
        MappedFile m = OpenGuarded();
        ::raise(SIGBUS);  // kill/raise: not a fault, whatever si_addr's bytes say
        _exit(4);
      },
      ::testing::ExitedWithCode(42), "");
}

}  // namespace
}  // namespace impress
