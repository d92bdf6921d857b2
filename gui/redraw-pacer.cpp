#include "gui/redraw-pacer.h"

#include <algorithm>

namespace impress::gui {

namespace {
double Seconds(RedrawPacer::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

double RedrawPacer::WaitSeconds(Clock::time_point now, bool busy, bool wanted) const {
  if (!wanted) return o_.idle_wait;
  if (!drawn_) return 0;
  const double hz = busy ? o_.busy_hz : o_.idle_hz;
  if (hz <= 0) return 0;
  return std::max(0.0, 1.0 / hz - Seconds(now - last_frame_));
}

void RedrawPacer::Observe(Clock::time_point now, bool busy) {
  if (busy && !busy_) {
    span_start_ = now;
    ++busy_spans_;
  } else if (!busy && busy_) {
    busy_closed_s_ += Seconds(now - span_start_);
  }
  busy_ = busy;
  last_seen_ = now;
}

void RedrawPacer::FrameDrawn(Clock::time_point now, bool busy) {
  drawn_ = true;
  last_frame_ = now;
  ++frames_;
  if (busy) ++busy_frames_;
}

double RedrawPacer::busy_seconds() const { return busy_closed_s_ + (busy_ ? Seconds(last_seen_ - span_start_) : 0.0); }

}  // namespace impress::gui
