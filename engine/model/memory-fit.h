// The memory-fit check of LoadOptions::check_memory: refuse, before any weight is read, a model
// whose weights plus the fp16 KV of LoadOptions::kv_tokens tokens exceed the memory available.
// Pure functions (reading /proc/meminfo at most); safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/model/model-loader.h"
#include "engine/model/model.h"

namespace impress {

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t MemAvailableBytes();

// Ok when opt.check_memory is off, the memory available is unknown, or `weights` bytes of
// weights plus the KV fit; else kResourceExhausted naming `path` and the numbers.
Status CheckFitsMemory(const std::string& path, const ModelConfig& c, uint64_t weights, const LoadOptions& opt);

}  // namespace impress
