#include "gui/app-window.h"

#define GLFW_INCLUDE_NONE
#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "gui/frame-profile.h"
#include "gui/panels.h"
#include "gui/png-image.h"
#include "gui/redraw-pacer.h"
#include "gui/script.h"
#include "gui/snapshot-math.h"
#include "gui/texture-cache.h"

namespace impress::gui {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kIdleRedrawHz = 60;  // frames follow input at most this often while the worker waits

bool WorkerBusy(WorkerPhase p) { return p != WorkerPhase::kIdle && p != WorkerPhase::kFailed; }

void OnGlfwError(int code, const char* what) { spdlog::warn("glfw error {}: {}", code, what); }

// State the GLFW callbacks reach through the window's user pointer.
struct WindowEvents {
  std::vector<std::string> dropped;  // paths dropped on the window since the last frame
  bool input = false;                // any input since the last frame
};

WindowEvents* Events(GLFWwindow* w) { return static_cast<WindowEvents*>(glfwGetWindowUserPointer(w)); }
// Installed before ImGui's backend, which chains to them: they only note that input arrived.
void OnCursor(GLFWwindow* w, double, double) { Events(w)->input = true; }
void OnMouseButton(GLFWwindow* w, int, int, int) { Events(w)->input = true; }
void OnScroll(GLFWwindow* w, double, double) { Events(w)->input = true; }
void OnKey(GLFWwindow* w, int, int, int, int) { Events(w)->input = true; }
void OnChar(GLFWwindow* w, unsigned) { Events(w)->input = true; }
void OnFocus(GLFWwindow* w, int) { Events(w)->input = true; }
void OnEnter(GLFWwindow* w, int) { Events(w)->input = true; }
void OnResize(GLFWwindow* w, int, int) { Events(w)->input = true; }

void OnDrop(GLFWwindow* w, int n, const char** paths) {
  for (int i = 0; i < n; ++i) Events(w)->dropped.emplace_back(paths[i]);
  Events(w)->input = true;
}

void LoadFonts() {
  ImGuiIO& io = ImGui::GetIO();
  // DejaVu Sans from Debian's fonts-dejavu-core; ImGui's built-in font otherwise.
  for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"}) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && io.Fonts->AddFontFromFileTTF(path, 15.0f)) return;
  }
  io.Fonts->AddFontDefault();
}

Result<RgbaImage> CaptureFrame(int w, int h) {
  RgbaImage im;
  im.width = w;
  im.height = h;
  im.pixels.resize(size_t(w) * h * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, im.pixels.data());
  if (glGetError() != GL_NO_ERROR) return Status::Internal("glReadPixels failed");
  // OpenGL's rows go bottom to top.
  const size_t row = size_t(w) * 4;
  std::vector<uint8_t> tmp(row);
  for (int y = 0; y < h / 2; ++y) {
    uint8_t* a = &im.pixels[size_t(y) * row];
    uint8_t* b = &im.pixels[size_t(h - 1 - y) * row];
    std::copy(a, a + row, tmp.data());
    std::copy(b, b + row, a);
    std::copy(tmp.data(), tmp.data() + row, b);
  }
  for (size_t i = 3; i < im.pixels.size(); i += 4) im.pixels[i] = 255;
  return im;
}

class Host : public ScriptHost {
 public:
  explicit Host(Worker& w) : worker_(w) {}
  uint64_t commands_sent() const override { return worker_.commands_sent(); }
  void RequestScreenshot(const std::string& path) override { pending = path; }
  std::optional<std::string> pending;

 private:
  Worker& worker_;
};

// Frame intervals (start to start) while frames were wanted back to back, all of them and those
// while a prefill ran; and the work of each frame (poll to swap: how long input waits at worst).
struct FrameTimes {
  std::vector<double> all_ms, prefill_ms, busy_ms, work_ms, prefill_work_ms;
  std::vector<FrameSample> samples;  // per-stage breakdown of each drawn frame
  void Print(std::FILE* out) const {
    PrintFrameProfile(samples, out);
    const FrameStats a = ComputeFrameStats(all_ms), p = ComputeFrameStats(prefill_ms), b = ComputeFrameStats(busy_ms);
    const FrameStats w = ComputeFrameStats(work_ms), pw = ComputeFrameStats(prefill_work_ms);
    std::fprintf(
        out,
        "frame work (poll to swap): max %.1f ms, p99 %.1f ms, mean %.1f ms; during prefill: max %.1f ms, p99 %.1f ms\n",
        w.max_ms, w.p99_ms, w.mean_ms, pw.max_ms, pw.p99_ms);
    std::fprintf(out, "frame time: %zu frames, max %.1f ms, p99 %.1f ms, mean %.1f ms\n", a.n, a.max_ms, a.p99_ms,
                 a.mean_ms);
    std::fprintf(out, "frame time during prefill: %zu frames, max %.1f ms, p99 %.1f ms, mean %.1f ms\n", p.n, p.max_ms,
                 p.p99_ms, p.mean_ms);
    std::fprintf(out, "frame time while the worker was busy: %zu frames, max %.1f ms, p99 %.1f ms\n", b.n, b.max_ms,
                 b.p99_ms);
    std::fflush(out);
  }
};

}  // namespace

bool DisplayAvailable(std::string* why) {
  const char* x = std::getenv("DISPLAY");
  const char* wl = std::getenv("WAYLAND_DISPLAY");
  if ((!x || !*x) && (!wl || !*wl)) {
    *why = "no display: neither DISPLAY nor WAYLAND_DISPLAY is set";
    return false;
  }
  glfwSetErrorCallback(OnGlfwError);
  if (!glfwInit()) {
    *why = "no display: GLFW could not initialise (is the X server reachable?)";
    return false;
  }
  glfwTerminate();
  return true;
}

Result<int> RunGui(const GuiOptions& o) {
  std::optional<ScriptRunner> script;
  if (!o.script_path.empty()) {
    std::ifstream in(o.script_path);
    if (!in) return Status::NotFound("cannot read script " + o.script_path);
    std::stringstream ss;
    ss << in.rdbuf();
    IMPRESS_ASSIGN_OR_RETURN(auto lines, ParseScript(ss.str(), o.script_path));
    script.emplace(std::move(lines), stdout);
  }
  const char* x = std::getenv("DISPLAY");
  const char* wl = std::getenv("WAYLAND_DISPLAY");
  if ((!x || !*x) && (!wl || !*wl))
    return Status::Unsupported(
        "no display: neither DISPLAY nor WAYLAND_DISPLAY is set; use `impress chat` for the terminal chat");
  // One glfwInit only: an X server with no clients may reset between a probe and a second init.
  glfwSetErrorCallback(OnGlfwError);
  if (!glfwInit())
    return Status::Unsupported(
        "no display: GLFW could not initialise (is the X server reachable?); use `impress chat`");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  GLFWwindow* window = glfwCreateWindow(o.width, o.height, "IMPRESS desktop", nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    return Status::Unsupported(
        "cannot open an OpenGL 3.0 window (is an OpenGL driver installed? e.g. libgl1-mesa-dri)");
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  WindowEvents events;
  glfwSetWindowUserPointer(window, &events);
  glfwSetDropCallback(window, OnDrop);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  std::error_code ec;
  std::filesystem::create_directories(o.config_dir, ec);
  const std::string ini_path = o.config_dir + "/imgui.ini";             // outlives the context
  io.IniFilename = o.script_path.empty() ? ini_path.c_str() : nullptr;  // scripts get the default layout
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 3;
  LoadFonts();
  // Our callbacks note that input arrived (to wake the idle loop); ImGui's backend chains to them.
  glfwSetCursorPosCallback(window, OnCursor);
  glfwSetMouseButtonCallback(window, OnMouseButton);
  glfwSetScrollCallback(window, OnScroll);
  glfwSetKeyCallback(window, OnKey);
  glfwSetCharCallback(window, OnChar);
  glfwSetWindowFocusCallback(window, OnFocus);
  glfwSetCursorEnterCallback(window, OnEnter);
  glfwSetFramebufferSizeCallback(window, OnResize);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  int exit_code = 0;
  {
    GlTextureCache textures;  // the importance heatmap as one texture; deleted while the context lives
    SetCurrentTextures(&textures);
    Worker worker(o.worker);
    Host host(worker);
    UiState ui;
    ModelDownloads downloads(o.assets_dir, ModelsDir());
    if (auto catalog = LoadModelCatalog(CatalogPath(o.assets_dir)); catalog.ok()) {
      ui.model.catalog = std::move(*catalog);
    } else {
      ui.model.catalog_error = catalog.status().ToString();
    }
    ui.model.models_dir = downloads.models_dir();
    FrameTimes times;
    RedrawPacer pacer({.busy_hz = o.busy_redraw_hz, .idle_hz = kIdleRedrawHz, .idle_wait = 0.1});
    auto last = Clock::now();
    bool first = true;
    uint64_t drawn_version = 0;
    int settle_frames = 3;  // ImGui needs a few frames after input (hover, layout) to settle
    while (!glfwWindowShouldClose(window)) {
      // Draw only when something changed (input, a new snapshot, ImGui settling, a running
      // script), at most busy_redraw_hz while the worker computes; otherwise wait for events
      // (which input ends early) and leave the cores to the model.
      const auto now = Clock::now();
      const std::shared_ptr<const AppSnapshot> peek = worker.Snapshot();
      ui.model.download = downloads.Status();
      // A download redraws like a busy worker: its progress bar moves without input.
      const bool busy_now = WorkerBusy(peek->phase) || ui.model.download.active;
      pacer.Observe(now, busy_now);
      const bool wanted = script || settle_frames > 0 || events.input || peek->version != drawn_version;
      if (const double wait = pacer.WaitSeconds(now, busy_now, wanted); wait > 0) {
        glfwWaitEventsTimeout(wait);
        if (!wanted) first = true;  // an idle gap is not a frame time (one held back by the cap is)
        if (events.input) settle_frames = 3;
        continue;
      }
      const auto frame_start = Clock::now();
      const double cpu_start = ThreadCpuMs();
      FrameSample sample;
      auto stage_t = frame_start;
      auto mark = [&](FrameStage st) {
        const auto now = Clock::now();
        sample.stage_ms[size_t(st)] = std::chrono::duration<double, std::milli>(now - stage_t).count();
        stage_t = now;
      };
      const auto snap = peek;
      const bool prefill = snap->phase == WorkerPhase::kPrefill;
      pacer.FrameDrawn(frame_start, busy_now);
      if (!first) {
        const double ms = std::chrono::duration<double, std::milli>(frame_start - last).count();
        times.all_ms.push_back(ms);
        if (prefill) times.prefill_ms.push_back(ms);
        if (busy_now) times.busy_ms.push_back(ms);
      }
      first = false;
      last = frame_start;
      glfwPollEvents();
      if (events.input) settle_frames = 3;
      else if (settle_frames > 0) --settle_frames;
      events.input = false;
      mark(FrameStage::kPoll);
      drawn_version = snap->version;
      UiActions actions;
      for (std::string& path : events.dropped)
        actions.commands.push_back(MakeCommand(Command::Kind::kAddDocument, path));
      events.dropped.clear();

      // New frame, panels.
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      TakeSections();
      DrawAllPanels(*snap, ui, actions);
      bool keep_running = true;
      if (script) keep_running = script->Tick(*snap, ui, actions, host);
      mark(FrameStage::kPanels);
      sample.stage_ms[size_t(FrameStage::kImportance)] = TakeSections().importance_ms;
      ImGui::Render();
      mark(FrameStage::kImGuiRender);

      // Render.
      int w = 0, h = 0;
      glfwGetFramebufferSize(window, &w, &h);
      glViewport(0, 0, w, h);
      glClearColor(0.08f, 0.08f, 0.10f, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      sample.n_vertices = ImGui::GetDrawData()->TotalVtxCount;
      sample.n_draw_lists = ImGui::GetDrawData()->CmdListsCount;
      mark(FrameStage::kGlDraw);
      if (host.pending) {
        auto im = CaptureFrame(w, h);
        Status st = im.ok() ? WritePng(*host.pending, *im) : im.status();
        if (!st.ok()) {
          std::fprintf(stderr, "screenshot failed: %s\n", st.ToString().c_str());
          exit_code = 1;
        } else {
          std::fprintf(stdout, "screenshot: %s (%dx%d)\n", host.pending->c_str(), w, h);
        }
        host.pending.reset();
        stage_t = Clock::now();  // the screenshot's readback is no stage of a frame
      }
      glfwSwapBuffers(window);
      mark(FrameStage::kSwap);
      textures.EndFrame();
      const double work = std::chrono::duration<double, std::milli>(Clock::now() - frame_start).count();
      times.work_ms.push_back(work);
      if (prefill) times.prefill_work_ms.push_back(work);
      sample.work_ms = work;
      sample.cpu_ms = ThreadCpuMs() - cpu_start;
      sample.prefill = prefill;
      sample.busy = busy_now;
      times.samples.push_back(sample);

      // Send what the panels asked for.
      if (actions.stop) worker.Stop();
      if (!actions.pull_model.empty()) downloads.Start(actions.pull_model);
      if (actions.cancel_pull) downloads.Cancel();
      for (Command& c : actions.commands) worker.Send(std::move(c));
      if (!keep_running) break;
    }
    if (script && script->failed()) {
      std::fprintf(stderr, "%s\n", script->error().c_str());
      exit_code = 1;
    }
    if (script || o.print_frame_stats) {
      times.Print(stdout);
      std::fprintf(
          stdout,
          "redraw: %llu frames; %llu while the worker was busy for %.1f s in %d span(s) (cap %.0f Hz: at most %.0f)\n",
          static_cast<unsigned long long>(pacer.frames()), static_cast<unsigned long long>(pacer.busy_frames()),
          pacer.busy_seconds(), pacer.busy_spans(), pacer.options().busy_hz, pacer.busy_frame_bound());
      std::fprintf(stdout, "textures: %llu uploads, %.1f ms building and uploading in all\n",
                   static_cast<unsigned long long>(textures.uploads()), textures.upload_ms());
    }
    SetCurrentTextures(nullptr);
    // The worker's destructor cancels and joins here, while the window still shows.
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}

}  // namespace impress::gui
