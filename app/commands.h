// The `impress` subcommands. Each Register* adds one subcommand to the CLI and sets its
// callback; the callback's exit status is written to *exit_code. Main thread only.
#pragma once

#include <CLI/CLI.hpp>

#include "app/app-options.h"

namespace impress::app {

void RegisterTokenizeCommand(CLI::App& app, CommonOptions* common, int* exit_code);
void RegisterGenerateCommands(CLI::App& app, CommonOptions* common, int* exit_code);  // generate, chat
void RegisterBenchCommands(CLI::App& app, CommonOptions* common, int* exit_code);     // bench engine|store|...
// bench workload (app/bench-workload-command.cpp), added by RegisterBenchCommands
void RegisterWorkloadBench(CLI::App* bench, CommonOptions* common, int* exit_code);
void RegisterGuiCommand(CLI::App& app, CommonOptions* common, int* exit_code);       // gui (also the default)
void RegisterServeCommand(CLI::App& app, CommonOptions* common, int* exit_code);     // serve (OpenAI-compatible)
void RegisterQuantizeCommand(CLI::App& app, CommonOptions* common, int* exit_code);  // quantize (GGUF writer)
void RegisterModelsCommand(CLI::App& app, CommonOptions* common, int* exit_code);    // models [pull|rm NAME]

}  // namespace impress::app
