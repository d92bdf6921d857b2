// A one-line progress bar on stderr for long work (model load, document ingestion, prefill).
// Draws only when stderr is a terminal (otherwise logs a line at 0% and 100%). Rate-limited
// to ~20 redraws per second. Not thread-safe: one bar per thread of work.
#pragma once

#include "base/progress.h"

#include <chrono>
#include <string>

namespace impress::app {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();  // finishes the line if drawn

  // Usable as a ProgressFn; never asks to cancel.
  bool Update(uint64_t done, uint64_t total, std::string_view what);
  ProgressFn AsFn() {
    return [this](uint64_t d, uint64_t t, std::string_view w) { return Update(d, t, w); };
  }
  void Finish();

 private:
  std::string label_;
  bool tty_;
  bool drawn_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace impress::app
