// The GGUF loader: a .gguf file -> Model, for the architectures whose table (arch.h) names GGUF
// tensors. LoadModel (model-loader.h) calls it and states the contract: config read and checked
// (gguf-config.h), every tensor of the table found and shape-checked, matrices kept in their
// stored type as views into the file mapping (rows llama.cpp permuted are put back), the file's
// fingerprint. Loads share no state; safe from any thread.
#pragma once

#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/model-loader.h"
#include "engine/model/model.h"

namespace impress {

Result<Model> LoadGguf(const std::string& path, const ProgressFn& progress, const LoadOptions& opt);

}  // namespace impress
