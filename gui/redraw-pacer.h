// RedrawPacer: when the frame loop may draw a frame. While the worker computes (loading,
// prefill, decoding, storing), frames are drawn at most busy_hz times a second, however often
// snapshots or input arrive: with software OpenGL every frame's rasterization runs on the cores
// the model needs. Otherwise frames follow input and new snapshots up to idle_hz, and the loop
// sleeps in the window system's event wait when nothing changed. It also counts the frames
// drawn while busy against the busy time it observed, so the cap can be checked from outside
// (frames <= busy_hz x busy seconds + one per busy span).
//
// Thread contract: UI thread only; plain value type, time is passed in (testable without a window).
#pragma once

#include <chrono>
#include <cstdint>

namespace impress::gui {

class RedrawPacer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    double busy_hz = 10;     // frames per second at most while the worker is busy
    double idle_hz = 60;     // frames per second at most otherwise
    double idle_wait = 0.1;  // seconds the loop waits for events when no frame is wanted
  };

  explicit RedrawPacer(Options o) : o_(o) {}

  // Seconds to wait (for events) before drawing; 0 = draw now. `wanted`: there is something new
  // to show (input, a new snapshot, a running script). Without it the answer is idle_wait.
  double WaitSeconds(Clock::time_point now, bool busy, bool wanted) const;
  // The worker's phase as seen at `now` (call every loop turn): totals the busy time.
  void Observe(Clock::time_point now, bool busy);
  // A frame was drawn at `now` while the worker was (not) busy.
  void FrameDrawn(Clock::time_point now, bool busy);

  const Options& options() const { return o_; }
  uint64_t frames() const { return frames_; }
  uint64_t busy_frames() const { return busy_frames_; }
  int busy_spans() const { return busy_spans_; }
  double busy_seconds() const;  // observed busy time, the open span up to the last Observe
  // The most frames the cap allows over the observed busy time: busy_hz x busy_seconds + spans.
  double busy_frame_bound() const { return o_.busy_hz * busy_seconds() + busy_spans_; }

 private:
  Options o_;
  bool drawn_ = false;
  Clock::time_point last_frame_{};
  bool busy_ = false;
  Clock::time_point span_start_{}, last_seen_{};
  double busy_closed_s_ = 0;  // closed spans
  int busy_spans_ = 0;
  uint64_t frames_ = 0, busy_frames_ = 0;
};

}  // namespace impress::gui
