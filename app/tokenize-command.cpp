// impress tokenize (--text TEXT | --file FILE) [--json]: the ids (and pieces) the model's
// tokenizer gives, so a prompt can be checked against another implementation.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "app/commands.h"
#include "chat/document.h"
#include "engine/tokenizer/tokenizer.h"

namespace impress::app {

void RegisterTokenizeCommand(CLI::App& app, CommonOptions* common, int* exit_code) {
  struct Args {
    std::string text, file;
    bool json = false, no_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  AddCommonOptions(cmd, common);
  auto* text_opt = cmd->add_option("--text", args->text, "text to tokenize");
  cmd->add_option("--file", args->file, "file to tokenize")->excludes(text_opt);
  cmd->add_flag("--json", args->json, "one JSON object: ids and pieces");
  cmd->add_flag("--no-special", args->no_special, "do not match special tokens such as <|im_start|> in the text");
  cmd->callback([=] {
    ConfigureLogging(*common);
    std::string text = args->text;
    if (!args->file.empty()) {
      auto doc = LoadDocument(args->file);
      if (!doc.ok()) {
        spdlog::error("{}", doc.status().ToString());
        *exit_code = 1;
        return;
      }
      text = std::move(doc->text);
    }
    auto tok = Tokenizer::Load(ResolveModelPath(*common));
    if (!tok.ok()) {
      spdlog::error("{}", tok.status().ToString());
      *exit_code = 1;
      return;
    }
    const bool add_bos = common->raw ? tok->add_bos_default() : false;
    const std::vector<int32_t> ids = tok->Encode(text, add_bos, !args->no_special);
    if (args->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(tok->TokenText(id));
      nlohmann::json j{{"ids", ids}, {"pieces", pieces}, {"n_tokens", ids.size()}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
      spdlog::info("{} tokens", ids.size());
    }
  });
}

}  // namespace impress::app
