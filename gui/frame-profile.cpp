#include "gui/frame-profile.h"

#include <time.h>

#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {
thread_local SectionTimes g_sections;
}  // namespace

const char* FrameStageName(FrameStage s) {
  switch (s) {
    case FrameStage::kPoll: return "poll events";
    case FrameStage::kPanels: return "panels (ImGui CPU)";
    case FrameStage::kImportance: return "  of which importance";
    case FrameStage::kImGuiRender: return "ImGui::Render";
    case FrameStage::kGlDraw: return "RenderDrawData (GL)";
    case FrameStage::kSwap: return "SwapBuffers";
    case FrameStage::kCount: break;
  }
  return "?";
}

SectionTimes TakeSections() {
  const SectionTimes t = g_sections;
  g_sections = {};
  return t;
}

ScopedSection::~ScopedSection() {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  if (stage_ == FrameStage::kImportance) g_sections.importance_ms += ms;
}

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

void PrintFrameProfile(const std::vector<FrameSample>& frames, std::FILE* out) {
  struct Group {
    const char* name;
    bool (*keep)(const FrameSample&);
  };
  const Group groups[] = {
      {"worker idle", [](const FrameSample& f) { return !f.busy; }},
      {"during prefill", [](const FrameSample& f) { return f.prefill; }},
  };
  for (const Group& g : groups) {
    std::vector<const FrameSample*> sel;
    for (const FrameSample& f : frames)
      if (g.keep(f)) sel.push_back(&f);
    if (sel.empty()) continue;
    auto stats = [&](auto get) {
      std::vector<double> v;
      v.reserve(sel.size());
      for (const FrameSample* f : sel) v.push_back(get(*f));
      return ComputeFrameStats(std::move(v));
    };
    std::fprintf(out, "frame profile, %s (%zu frames): stage mean / p99 / max ms\n", g.name, sel.size());
    for (int i = 0; i < kFrameStages; ++i) {
      const FrameStats s = stats([i](const FrameSample& f) { return f.stage_ms[size_t(i)]; });
      std::fprintf(out, "  %-24s %6.2f / %6.2f / %6.2f\n", FrameStageName(FrameStage(i)), s.mean_ms, s.p99_ms,
                   s.max_ms);
    }
    const FrameStats w = stats([](const FrameSample& f) { return f.work_ms; });
    const FrameStats c = stats([](const FrameSample& f) { return f.cpu_ms; });
    const FrameStats wait = stats([](const FrameSample& f) { return f.work_ms - f.cpu_ms; });
    const FrameStats vtx = stats([](const FrameSample& f) { return double(f.n_vertices); });
    std::fprintf(out, "  %-24s %6.2f / %6.2f / %6.2f\n", "work (poll to swap)", w.mean_ms, w.p99_ms, w.max_ms);
    std::fprintf(out, "  %-24s %6.2f / %6.2f / %6.2f\n", "UI thread CPU", c.mean_ms, c.p99_ms, c.max_ms);
    std::fprintf(out, "  %-24s %6.2f / %6.2f / %6.2f\n", "waiting (work - CPU)", wait.mean_ms, wait.p99_ms,
                 wait.max_ms);
    std::fprintf(out, "  %-24s %6.0f / %6.0f / %6.0f\n", "ImGui vertices", vtx.mean_ms, vtx.p99_ms, vtx.max_ms);
  }
  std::fflush(out);
}

}  // namespace impress::gui
