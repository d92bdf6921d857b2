// RedrawPacer with simulated time: the busy cap spaces frames by 1/busy_hz however often the
// loop asks, frames follow input/snapshots up to idle_hz when idle, nothing wanted waits
// idle_wait, and the busy-frame count stays within busy_hz x busy time + spans over a long run
// where a frame is wanted at every step (the check gui-script-check makes on the real window).
#include "gui/redraw-pacer.h"

#include <gtest/gtest.h>

namespace impress::gui {
namespace {

using Clock = RedrawPacer::Clock;
Clock::time_point At(double s) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
}

TEST(RedrawPacer, FirstFrameAtOnceThenBusyFramesSpacedByTheCap) {
  RedrawPacer p({.busy_hz = 10, .idle_hz = 60, .idle_wait = 0.1});
  EXPECT_EQ(p.WaitSeconds(At(1), true, true), 0);
  p.FrameDrawn(At(1), true);
  EXPECT_NEAR(p.WaitSeconds(At(1.02), true, true), 0.08, 1e-9);
  EXPECT_EQ(p.WaitSeconds(At(1.02), false, true), 0);  // 20 ms since the last frame: idle 60 Hz allows one
  EXPECT_EQ(p.WaitSeconds(At(1.10), true, true), 0);
  EXPECT_EQ(p.WaitSeconds(At(1.02), true, false), 0.1);  // nothing new: wait for events
}

TEST(RedrawPacer, IdleFramesFollowTheIdleRate) {
  RedrawPacer p({.busy_hz = 10, .idle_hz = 50, .idle_wait = 0.1});
  p.FrameDrawn(At(0), false);
  EXPECT_NEAR(p.WaitSeconds(At(0.005), false, true), 0.015, 1e-9);
  EXPECT_EQ(p.WaitSeconds(At(0.02), false, true), 0);
}

TEST(RedrawPacer, BusyFramesStayWithinCapTimesBusyTimePlusSpans) {
  RedrawPacer p({.busy_hz = 10, .idle_hz = 60, .idle_wait = 0.1});
  // 30 s in 1 ms steps; busy in [2, 12) and [15, 27.5); a frame wanted at every step.
  int busy_drawn = 0;
  for (int ms = 0; ms < 30000; ++ms) {
    const double t = ms / 1000.0;
    const bool busy = (t >= 2 && t < 12) || (t >= 15 && t < 27.5);
    p.Observe(At(t), busy);
    if (p.WaitSeconds(At(t), busy, true) == 0) {
      p.FrameDrawn(At(t), busy);
      busy_drawn += busy;
    }
  }
  EXPECT_EQ(p.busy_spans(), 2);
  EXPECT_NEAR(p.busy_seconds(), 22.5, 1e-6);
  EXPECT_EQ(p.busy_frames(), uint64_t(busy_drawn));
  EXPECT_LE(double(p.busy_frames()), p.busy_frame_bound());
  EXPECT_GE(p.busy_frames(), 220u);  // the cap is a ceiling the loop reaches when frames are wanted
  // Idle: 7.5 s at up to 60 Hz.
  EXPECT_GT(p.frames() - p.busy_frames(), 400u);
}

TEST(RedrawPacer, BusyTimeCountsTheOpenSpan) {
  RedrawPacer p({});
  p.Observe(At(1), true);
  p.Observe(At(3.5), true);
  EXPECT_NEAR(p.busy_seconds(), 2.5, 1e-9);
  EXPECT_EQ(p.busy_spans(), 1);
}

}  // namespace
}  // namespace impress::gui
