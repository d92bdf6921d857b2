// impress: the one executable (DESIGN.md section 8). Subcommands are registered by the
// app/*-command.cpp files; this file only parses and dispatches.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  CLI::App app{"IMPRESS desktop: chat with a local LLM over long documents"};
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
