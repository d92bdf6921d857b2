// ModelContext: everything a chat needs from one model file, loaded together: the weights,
// the tokenizer, the chat template and a compute backend. Immutable after Load except the
// backend, which requires external synchronization (one thread issues work at a time).
#pragma once

#include <memory>
#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "engine/tokenizer/chat-template.h"
#include "engine/tokenizer/tokenizer.h"

namespace impress {

struct ModelContextOptions {
  int n_threads = 2;
  std::string backend = "cpu";  // "cpu" (the CUDA backend registers "cuda" when built)
  // "" (matrices as stored), or q8_0 | q4_k | f16: matrices converted at load (ParseWeightsOption).
  std::string weights = {};
  // Every weight as owned fp32 values (LoadOptions::dequantize): the exact reference that
  // quantized runs, and other backends, are compared against.
  bool dequantize = false;
};

class ModelContext {
 public:
  // `path`: a GGUF file or a Hugging Face folder. Progress covers the weight load.
  static Result<std::unique_ptr<ModelContext>> Load(const std::string& path, const ModelContextOptions& options,
                                                    const ProgressFn& progress = {});

  const Model& model() const { return model_; }
  const ModelConfig& config() const { return model_.config; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat_template() const { return template_; }
  Backend& backend() { return *backend_; }
  // End-of-turn tokens of the template and tokenizer.
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }

 private:
  ModelContext(Model model, Tokenizer tokenizer, ChatTemplate chat, std::unique_ptr<Backend> backend);

  Model model_;
  Tokenizer tokenizer_;
  ChatTemplate template_;
  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> stop_tokens_;
};

}  // namespace impress
