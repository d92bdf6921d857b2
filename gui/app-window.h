// RunGui: the desktop window (GLFW + OpenGL 3 + Dear ImGui). Starts the worker, then runs the
// frame loop on the calling thread: wait for input or a new snapshot, new frame, panels, render
// (gui/redraw-pacer.h says how often). Optionally runs a
// script (gui/script.h) and reports UI frame times.
//
// Thread contract: call from the main thread (GLFW requires it); returns when the window closes
// or the script ends.
#pragma once

#include <string>

#include "base/status.h"
#include "gui/worker.h"

namespace impress::gui {

struct GuiOptions {
  WorkerOptions worker;
  std::string config_dir;   // imgui.ini lives here (gui.json: worker.settings_path)
  std::string script_path;  // empty: interactive
  std::string assets_dir;   // the model library's catalog and fetch script (assets/models)
  int width = 1600, height = 900;
  bool print_frame_stats = false;  // also without a script
  // Frames per second at most while the worker computes (software OpenGL draws on the model's
  // cores); input and new snapshots are shown at the next allowed frame.
  double busy_redraw_hz = 10;
};

// Whether a window can be opened here ($DISPLAY / $WAYLAND_DISPLAY set and glfwInit works).
// On false, *why says what is missing.
bool DisplayAvailable(std::string* why);

// Runs the app. Returns the process exit status: 0, or 1 when the script failed (the reason is
// printed). A Status error when no window can be opened or the script does not parse.
Result<int> RunGui(const GuiOptions& options);

}  // namespace impress::gui
