// FrameProfile: where one UI frame's time goes, stage by stage (poll, panels, the importance
// panel inside them, ImGui::Render, the OpenGL draw calls, SwapBuffers), plus the UI thread's
// own CPU time (wall - CPU = time it waited: preempted by the worker's compute threads, or
// blocked on llvmpipe's rasterizer threads in the swap). The frame loop (gui/app-window.cpp)
// records one FrameSample per drawn frame and prints a summary with the frame-time stats.
//
// Thread contract: UI thread only. Sections (ScopedSection) accumulate into a per-thread
// accumulator that the frame loop reads and resets once a frame (TakeSections).
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace impress::gui {

enum class FrameStage { kPoll, kPanels, kImportance, kImGuiRender, kGlDraw, kSwap, kCount };
constexpr int kFrameStages = int(FrameStage::kCount);
const char* FrameStageName(FrameStage s);

// Time spent inside a panel during the current frame (milliseconds, per thread).
struct SectionTimes {
  double importance_ms = 0;
};
// Returns this frame's section times and resets them.
SectionTimes TakeSections();
// Adds the scope's wall time to one section (only kImportance is a section today).
class ScopedSection {
 public:
  explicit ScopedSection(FrameStage s) : stage_(s), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedSection();
  ScopedSection(const ScopedSection&) = delete;
  ScopedSection& operator=(const ScopedSection&) = delete;

 private:
  FrameStage stage_;
  std::chrono::steady_clock::time_point t0_;
};

// This thread's CPU time in milliseconds (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuMs();

struct FrameSample {
  std::array<double, kFrameStages> stage_ms{};
  double work_ms = 0;  // poll to swap, wall clock
  double cpu_ms = 0;   // the UI thread's CPU time over the same span
  int n_vertices = 0;  // ImGui draw data
  int n_draw_lists = 0;
  bool prefill = false;
  bool busy = false;  // the worker was doing anything
};

// Per-stage mean / p99 / max over the frames that match `filter` (all, prefill, idle), one line
// per stage; frames with no match print nothing.
void PrintFrameProfile(const std::vector<FrameSample>& frames, std::FILE* out);

}  // namespace impress::gui
