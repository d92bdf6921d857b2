// JSON files of a model folder (config.json, tokenizer.json, tokenizer_config.json, ...), read
// as hostile input: only regular files (a FIFO or symlink loop is an error, never a hang or an
// exception), bounded in size, and a key that appears twice in one object is refused (naming
// it) rather than silently resolved "last wins". Stateless functions; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace impress {

// Larger than any real tokenizer.json (Llama-3's is ~9 MB).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t(256) << 20;

// The whole regular file at `path` (see OpenRegularFile); ResourceExhausted above max_bytes.
Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes);

// Parses `text` without exceptions. Corruption naming `source` when it is not valid JSON or an
// object holds a key twice (at any depth; the key is named).
Result<nlohmann::json> ParseJsonStrict(std::string_view text, const std::string& source);

// ReadRegularFile + ParseJsonStrict.
Result<nlohmann::json> ReadJsonFile(const std::string& path, uint64_t max_bytes = kMaxJsonFileBytes);

}  // namespace impress
