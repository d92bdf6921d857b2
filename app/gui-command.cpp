// impress gui (and `impress` with no subcommand): the desktop app (gui/app-window.h).
// Options: the common ones, --doc FILE (repeatable), --script FILE (CI / demos), --config-dir,
// --width/--height, --frame-stats, --busy-fps (redraw cap while the model computes), --check-display (exit 0 if a
// window can open here),
// --conversations DB / --no-save (saved conversations).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "gui/app-window.h"
#include "gui/gui-config.h"

namespace impress::app {

namespace {

struct GuiArgs {
  std::vector<std::string> docs;
  std::string script, config_dir, conversations;
  bool no_save = false;
  int width = 1600, height = 900;
  int max_tokens = 256;
  double busy_fps = 10;
  bool frame_stats = false;
  bool check_display = false;
};

// Settings: the saved file, then whatever the command line gave explicitly.
Result<gui::TuningSettings> Settings(const CLI::App& cmd, const CommonOptions& c, const GuiArgs& a,
                                     const std::string& path) {
  IMPRESS_ASSIGN_OR_RETURN(gui::TuningSettings s, gui::LoadTuning(path, gui::TuningSettings{}));
  PipelineSettings& p = s.pipeline;
  if (cmd.count("--system")) ParseSystem(c.system, &p.system);
  if (cmd.count("--alpha")) p.alpha = c.alpha;
  if (cmd.count("--keep")) p.keep = c.keep;
  if (cmd.count("--probe-heads")) p.probe_heads = c.probe_heads;
  if (cmd.count("--sinks")) p.sinks = c.sinks;
  if (cmd.count("--recent")) p.recent = c.recent;
  if (cmd.count("--device-budget-mb")) s.device_budget_mb = c.device_budget_mb;
  if (cmd.count("--host-budget-mb")) s.host_budget_mb = c.host_budget_mb;
  if (cmd.count("--ssd-budget-mb")) s.ssd_budget_mb = c.ssd_budget_mb;
  // Sampling given on the command line is the user's choice for this run.
  auto set = [&s](const auto& cli, auto* knob) {
    if (!cli) return;
    *knob = *cli;
    s.sampling.user_set = true;
  };
  set(c.temperature, &s.sampling.temperature);
  set(c.top_k, &s.sampling.top_k);
  set(c.top_p, &s.sampling.top_p);
  set(c.min_p, &s.sampling.min_p);
  if (cmd.count("--max-tokens")) s.max_tokens = a.max_tokens;
  return s;
}

}  // namespace

void RegisterGuiCommand(CLI::App& app, CommonOptions* common, int* exit_code) {
  auto args = std::make_shared<GuiArgs>();
  CLI::App* cmd = app.add_subcommand("gui", "the desktop app (default when no subcommand is given)");
  AddCommonOptions(cmd, common);
  cmd->add_option("--doc", args->docs, "attach a text document at start (repeatable)");
  cmd->add_option("--script", args->script, "run a script of GUI commands, then quit (see gui/script.h)");
  cmd->add_option("--config-dir", args->config_dir, "settings and window layout (default: $XDG_CONFIG_HOME/impress)");
  cmd->add_option("--width", args->width, "window width")->check(CLI::Range(320, 16384));
  cmd->add_option("--height", args->height, "window height")->check(CLI::Range(240, 16384));
  cmd->add_option("--max-tokens", args->max_tokens, "most tokens per answer")->check(CLI::Range(1, 8192));
  cmd->add_option("--busy-fps", args->busy_fps, "most frames per second drawn while the model computes")
      ->check(CLI::Range(1.0, 240.0));
  cmd->add_flag("--frame-stats", args->frame_stats, "print UI frame-time statistics on exit");
  cmd->add_option("--conversations", args->conversations,
                  "saved conversations (SQLite; default: conversations.db beside the KV store directory)");
  cmd->add_flag("--no-save", args->no_save, "do not save or reopen conversations");
  cmd->add_flag("--check-display", args->check_display, "exit 0 if a window can be opened here, else 1");
  cmd->callback([=] {
    ConfigureLogging(*common);
    if (args->check_display) {
      std::string why;
      const bool ok = gui::DisplayAvailable(&why);
      if (!ok) std::cerr << why << "\n";
      *exit_code = ok ? 0 : 1;
      return;
    }
    gui::GuiOptions o;
    o.config_dir = args->config_dir.empty() ? gui::DefaultConfigDir() : args->config_dir;
    o.assets_dir = AssetsDir();
    o.script_path = args->script;
    o.width = args->width;
    o.height = args->height;
    o.print_frame_stats = args->frame_stats;
    o.busy_redraw_hz = args->busy_fps;
    o.worker.settings_path = o.config_dir + "/gui.json";
    o.worker.recent_models_path = o.config_dir + "/models.json";  // the model picker's recent models
    auto settings = Settings(*cmd, *common, *args, o.worker.settings_path);
    if (!settings.ok()) {
      spdlog::warn("{}; using the defaults", settings.status().ToString());
      settings = gui::TuningSettings{};
    }
    o.worker.settings = *settings;
    o.worker.documents = args->docs;
    ChatSessionOptions& so = o.worker.session;
    so.model_path = ResolveModelPath(*common);
    so.model =
        ModelContextOptions{.n_threads = common->threads, .backend = common->backend, .weights = common->weights};
    so.store_dir = common->no_store ? "" : (common->store_dir.empty() ? DefaultStoreDir() : common->store_dir);
    so.probe_heads_stored = common->probe_heads;
    so.probe_encoding = ProbeEncodingFor(*common);
    so.store_lock_wait = std::chrono::milliseconds(int64_t(common->store_wait_s * 1000));
    so.team = TeamOptionsFor(*common);
    // Saved conversations live beside the store ($XDG_DATA_HOME/impress/conversations.db).
    if (!args->no_save) {
      const std::string store_parent = so.store_dir.empty() ? DefaultStoreDir() : so.store_dir;
      o.worker.db_path = args->conversations.empty()
                             ? (std::filesystem::path(store_parent).parent_path() / "conversations.db").string()
                             : args->conversations;
    }
    auto r = gui::RunGui(o);
    if (!r.ok()) {
      spdlog::error("{}", r.status().ToString());
      *exit_code = 2;
      return;
    }
    *exit_code = *r;
  });
}

}  // namespace impress::app
