// impress quantize IN OUT --type T: a GGUF file or a Hugging Face Llama/Qwen2 folder -> a GGUF
// in the chosen weight type (engine/model/quantize-model.h). With --random SHAPE instead of IN,
// random weights of a known model's shape (llama-3.2-1b, qwen2.5-0.5b, llama-3.1-8b, ...), with
// --layers / --vocab to keep test models small (--seed picks the weights).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "engine/model/quantize-model.h"
#include "engine/model/random-model.h"

namespace impress::app {

void RegisterQuantizeCommand(CLI::App& app, CommonOptions* common, int* exit_code) {
  struct Args {
    std::string in, out, type = "q4_k_m", random, tokenizer;
    int layers = 0, vocab = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "write a model as a GGUF file of a chosen weight type");
  AddCommonOptions(cmd, common);
  cmd->add_option("input", args->in, "GGUF file or Hugging Face folder (omit with --random)");
  cmd->add_option("output", args->out, "GGUF file to write");
  cmd->add_option("--type", args->type, std::string("weight type: ") + QuantizeRecipes())->capture_default_str();
  cmd->add_option("--random", args->random,
                  std::string("random weights of a known shape instead of an input: ") + KnownModelShapeNames());
  cmd->add_option("--layers", args->layers, "with --random: this many layers (0: the shape's)");
  cmd->add_option("--vocab", args->vocab, "with --random: this vocabulary size (0: the shape's)");
  cmd->add_option("--tokenizer", args->tokenizer, "with --random: copy the tokenizer of this GGUF");
  cmd->callback([=] {
    ConfigureLogging(*common);
    *exit_code = 1;
    if (!args->random.empty() && args->out.empty()) std::swap(args->in, args->out);  // the one path is the output
    if (args->out.empty() || args->random.empty() == args->in.empty()) {
      spdlog::error("quantize: give either an input model or --random SHAPE");
      return;
    }
    const QuantizeOptions opt{.type = args->type, .n_threads = std::max(1, common->threads)};
    if (Status st = CheckRecipe(opt.type); !st.ok()) {
      spdlog::error("{}", st.ToString());
      return;
    }
    ProgressBar bar("writing " + std::filesystem::path(args->out).filename().string());
    Status st;
    if (!args->random.empty()) {
      auto shape = KnownModelShape(args->random);
      if (!shape.ok()) {
        spdlog::error("{}", shape.status().ToString());
        return;
      }
      ModelConfig c = *shape;
      if (args->layers > 0) c.n_layer = args->layers;
      if (args->vocab > 0) c.n_vocab = args->vocab;
      st = WriteRandomModel(c, args->out, opt, {.seed = common->seed, .tokenizer_from = args->tokenizer}, bar.AsFn());
    } else {
      st = QuantizeModel(args->in, args->out, opt, bar.AsFn());
    }
    bar.Finish();
    if (!st.ok()) {
      spdlog::error("{}", st.ToString());
      return;
    }
    std::error_code ec;
    spdlog::info("wrote {} ({:.1f} MiB, {})", args->out, double(std::filesystem::file_size(args->out, ec)) / (1 << 20),
                 opt.type);
    *exit_code = 0;
  });
}

}  // namespace impress::app
