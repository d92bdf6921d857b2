// The Hugging Face folder loader: config.json + model.safetensors (or shards with
// model.safetensors.index.json) -> Model, for the architectures whose table (arch.h) names HF
// classes. LoadModel (model-loader.h) calls it and states the contract: the hyper-parameters read
// under the table's config keys and range-checked (hf-config.h), every tensor of the table found
// and shape-checked, F16/BF16 matrices kept as views into the mappings where the table allows,
// the fingerprint over config, weights and tokenizer files. Loads share no state; safe from any
// thread.
#pragma once

#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/model-loader.h"
#include "engine/model/model.h"

namespace impress {

Result<Model> LoadHfFolder(const std::string& dir, const ProgressFn& progress, const LoadOptions& opt);

}  // namespace impress
