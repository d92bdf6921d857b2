#include "engine/runtime/model-context.h"

#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/cuda/cuda-backend.h"
#include "engine/compute/forward.h"
#include "engine/model/model-loader.h"

namespace impress {

ModelContext::ModelContext(Model model, Tokenizer tokenizer, ChatTemplate chat, std::unique_ptr<Backend> backend) :
    model_(std::move(model)),
    tokenizer_(std::move(tokenizer)),
    template_(std::move(chat)),
    backend_(std::move(backend)) {
  stop_tokens_ = template_.StopTokens(tokenizer_);
}

Result<std::unique_ptr<ModelContext>> ModelContext::Load(const std::string& path, const ModelContextOptions& options,
                                                         const ProgressFn& progress) {
  IMPRESS_ASSIGN_OR_RETURN(const uint32_t weights, ParseWeightsOption(options.weights));
  std::unique_ptr<Backend> backend;
  if (options.backend == "cpu") {
    backend = MakeCpuBackend(CpuBackendOptions{.n_threads = options.n_threads});
  } else if (options.backend == "cuda") {
    IMPRESS_ASSIGN_OR_RETURN(backend, MakeCudaBackend(CudaBackendOptions{}));
  } else {
    return Status::Unsupported(
        fmt::format("backend '{}' is not available in this build (use --backend cpu)", options.backend));
  }
  // The tokenizer's tables (a vocabulary and merges of ~150K entries each for Qwen2) build on a
  // thread of their own while the weights load; its error, if any, is reported first.
  std::optional<Result<Tokenizer>> loaded_tokenizer;
  std::thread tokenizer_thread([&] { loaded_tokenizer.emplace(Tokenizer::Load(path)); });
  // Refuses a model that cannot fit in memory (with the numbers) before reading its weights.
  Result<Model> loaded_model = LoadModel(
      path, progress,
      LoadOptions{
          .n_threads = options.n_threads, .dequantize = options.dequantize, .check_memory = true, .weights = weights});
  tokenizer_thread.join();
  IMPRESS_ASSIGN_OR_RETURN(Tokenizer tokenizer, std::move(*loaded_tokenizer));
  IMPRESS_ASSIGN_OR_RETURN(Model model, std::move(loaded_model));
  IMPRESS_RETURN_IF_ERROR(ValidateModel(model));
  if (tokenizer.n_vocab() > model.config.n_vocab) {
    return Status::Corruption(fmt::format("{}: the tokenizer has {} tokens but the model's embedding only {}", path,
                                          tokenizer.n_vocab(), model.config.n_vocab));
  }
  ChatTemplate chat = ChatTemplate::ForTokenizer(tokenizer);
  spdlog::info("loaded {} ({} layers, {} hidden, {}/{} heads, vocab {}, chat format {})", model.config.name,
               model.config.n_layer, model.config.n_embd, model.config.n_head, model.config.n_head_kv,
               model.config.n_vocab, ChatFormatName(chat.format()));
  return std::unique_ptr<ModelContext>(
      new ModelContext(std::move(model), std::move(tokenizer), std::move(chat), std::move(backend)));
}

}  // namespace impress
