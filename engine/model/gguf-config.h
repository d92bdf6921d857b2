// GGUF metadata -> ModelConfig for the architectures whose table (arch.h) has a GGUF name: which
// `general.architecture` names load, and their keys (`<arch>.embedding_length`, ...: llama.cpp
// spells them alike for every architecture). Also reads the per-dimension RoPE factors of
// Llama 3.1/3.2 files (`rope_freqs.weight`).
//
// Every value is range-checked; errors name the file and the key or tensor. Pure functions of a
// GgufFile (gguf-loader.cpp calls them); safe from any thread.
#pragma once

#include "base/status.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"

namespace impress {

// Sanity bounds for hyper-parameters read from files: far above any real model, low enough that
// products of them cannot overflow 64 bits.
inline constexpr int64_t kMaxEmbd = 1 << 18;
inline constexpr int64_t kMaxLayers = 1 << 12;
inline constexpr int64_t kMaxHeads = 1 << 12;
inline constexpr int64_t kMaxFf = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxCtx = 1 << 24;

// Reads the hyper-parameters of `f` into *config (arch, name, sizes, norm epsilon, RoPE base,
// scaling and factors, tied output) and returns the file's architecture. Errors: kUnsupported
// for an architecture without a GGUF name in the registry or a feature the engine lacks (partial
// RoPE, an unknown scaling type); kCorruption or kNotFound naming the key or tensor for a bad or
// missing value.
Result<const ArchSpec*> ReadGgufConfig(const GgufFile& f, ModelConfig* config);

}  // namespace impress
