// Model fingerprints: a hex XXH3-128 digest of the bytes a model was made from, so KV computed
// with one model is never reused by another (ModelConfig::fingerprint). Pure functions; safe from
// any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress {

// The hex XXH3-128 digest of n bytes (a GGUF file, from its mapping).
std::string FingerprintBytes(const void* data, uint64_t n);

// A file for FingerprintFiles: its bytes in memory (a mapping) or, when data is null, on disk.
struct HashInput {
  std::string path;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// One digest over the files, in order: for each, its name (not the folder) and its bytes. Files
// read from disk are small (config, tokenizer) and read as hostile: a FIFO, a link loop or one
// over kMaxJsonFileBytes is an error naming it.
Result<std::string> FingerprintFiles(const std::vector<HashInput>& inputs);

}  // namespace impress
