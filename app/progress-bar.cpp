#include "app/progress-bar.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace impress::app {

ProgressBar::ProgressBar(std::string label) :
    label_(std::move(label)), tty_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

bool ProgressBar::Update(uint64_t done, uint64_t total, std::string_view what) {
  const auto now = std::chrono::steady_clock::now();
  const bool last = total > 0 && done >= total;
  if (!tty_) {
    if (!drawn_) spdlog::info("{}: started", label_);
    drawn_ = true;
    return true;
  }
  if (drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(50)) return true;
  last_draw_ = now;
  drawn_ = true;
  const double frac = total ? double(done) / double(total) : 0.0;
  constexpr int kWidth = 30;
  const int filled = int(frac * kWidth + 0.5);
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  const double secs = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %.1fs %.*s", label_.c_str(), bar.c_str(), frac * 100.0, secs,
               int(std::min<size_t>(what.size(), 40)), what.data());
  std::fflush(stderr);
  return true;
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_ && drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  if (drawn_) spdlog::info("{}: done in {:.2f} s", label_, secs);
}

}  // namespace impress::app
