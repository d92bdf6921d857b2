// impress: the one executable (docs/design.md section 8). Subcommands live in app/*-command.cpp;
// this file only builds the parser and dispatches.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdlib>
#include <new>

#include "app/app-options.h"
#include "app/commands.h"
#include "engine/compute/cpu-backend.h"

int main(int argc, char** argv) {
  using namespace impress::app;
  // OpenBLAS chose its kernels and its workers' spin when it was loaded; where it fell back to
  // generic kernels on a CPU it does not know, or would spin a tenth of a second on a core the
  // model's load needs, run again with the settings this CPU should have
  // (engine/compute/cpu-backend.h). On failure exec returns and the program goes on as it is.
  // Once: IMPRESS_BLAS_RESTARTED marks the second run, whatever the checks then say.
  const bool restarted = std::getenv("IMPRESS_BLAS_RESTARTED") != nullptr;
  const char* core = restarted ? nullptr : impress::BlasCoreOverride();
  const char* timeout = restarted ? nullptr : impress::BlasThreadTimeoutToSet();
  if ((core || timeout) && argc > 0) {
    setenv("IMPRESS_BLAS_RESTARTED", "1", 1);
    if (core) {
      setenv("IMPRESS_BLAS_CORE_WAS", impress::BlasCoreName(), 1);
      setenv("OPENBLAS_CORETYPE", core, 1);
    }
    if (timeout) setenv("OPENBLAS_THREAD_TIMEOUT", timeout, 1);
    execv("/proc/self/exe", argv);
    // exec failed: this process keeps OpenBLAS's choices, and so do its children
    if (core) {
      unsetenv("OPENBLAS_CORETYPE");
      unsetenv("IMPRESS_BLAS_CORE_WAS");
    }
    if (timeout) unsetenv("OPENBLAS_THREAD_TIMEOUT");
    unsetenv("IMPRESS_BLAS_RESTARTED");
  }
  if (const char* was = std::getenv("IMPRESS_BLAS_CORE_WAS"))
    spdlog::debug("OpenBLAS chose its {} kernels on this CPU; running its {} ones (OPENBLAS_CORETYPE)", was,
                  impress::BlasCoreName());
  // `impress` alone starts the desktop app.
  char gui_arg[] = "gui";
  char* gui_argv[] = {argc > 0 ? argv[0] : gui_arg, gui_arg, nullptr};
  if (argc <= 1) {
    argc = 2;
    argv = gui_argv;
  }
  CLI::App app{"IMPRESS desktop: chat with a local LLM over long documents"};
  app.require_subcommand(1);
  CommonOptions common;
  int exit_code = 0;
  RegisterGenerateCommands(app, &common, &exit_code);
  RegisterTokenizeCommand(app, &common, &exit_code);
  RegisterBenchCommands(app, &common, &exit_code);
  RegisterGuiCommand(app, &common, &exit_code);
  RegisterServeCommand(app, &common, &exit_code);
  RegisterQuantizeCommand(app, &common, &exit_code);
  RegisterModelsCommand(app, &common, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    // The subcommands run inside parse(). Parsers bound what they allocate, but an input can
    // still ask for more memory than this machine has: say so instead of aborting.
    spdlog::error(
        "out of memory: the command needed more memory than is available (a damaged or oversized model "
        "or document can cause this)");
    return 1;
  }
  return exit_code;
}
