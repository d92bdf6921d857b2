// Test helper: calls something that must refuse a FIFO rather than block on it, and turns a
// hang into a failure instead of a stuck test. Header-only; one call per thread.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>

namespace impress::test {

// Makes a FIFO at `path` (replacing nothing: the path must be free). False on failure.
inline bool MakeFifo(const std::string& path) { return ::mkfifo(path.c_str(), 0600) == 0; }

// Runs fn() on another thread. If it has not returned after `seconds` it is blocked on the FIFO
// at `fifo`: the guard opens and closes the FIFO's write end (the reader sees end of file), so
// fn returns and the test can go on; *hung says it happened.
template <class Fn>
auto CallGuardingFifo(const std::string& fifo, Fn fn, bool* hung, int seconds = 10) {
  auto result = std::async(std::launch::async, fn);
  *hung = result.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready;
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

}  // namespace impress::test
