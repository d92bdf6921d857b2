// impress: the one executable (docs/design.md section 8). Subcommands live in app/*-command.cpp;
// this file only builds the parser and dispatches.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "app/app-options.h"
#include "app/commands.h"

int main(int argc, char** argv) {
  using namespace impress::app;
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
