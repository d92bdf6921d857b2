// What the model picker knows before loading a model: its shape read from the file's header
// (GGUF metadata, or a Hugging Face folder's config.json), the RAM it will need (weights as
// loaded + fp16 KV for its whole context), the RAM available now, and whether it fits; a
// directory listing for the picker's own file browser; the recently loaded models.
//
// Thread contract: free functions, any thread; the recent list's file is written by one
// thread at a time (the worker).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress::gui {

struct ModelEstimate {
  std::string path;
  std::string name;  // general.name / the folder's name
  bool gguf = false;
  int n_layer = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
  uint64_t weight_bytes = 0;  // in memory once loaded (GGUF: the file, mapped; HF: fp32 weights)
  uint64_t kv_bytes_per_token() const { return 2ull * n_layer * n_head_kv * head_dim * 2; }  // K and V, fp16
  uint64_t kv_bytes() const { return kv_bytes_per_token() * uint64_t(n_ctx); }
  uint64_t total_bytes() const { return weight_bytes + kv_bytes(); }
};

// The shape and size of the model at `path` (a .gguf file or a Hugging Face folder) from its
// metadata only (no weights read). NotFound / InvalidArgument naming the path otherwise.
Result<ModelEstimate> EstimateModel(const std::string& path);

// Bytes the system can give a new program now: MemAvailable from /proc/meminfo, or
// $IMPRESS_MEM_AVAILABLE_MB when set (tests fake a small machine with it).
Result<uint64_t> MemAvailableBytes();

struct FitCheck {
  bool fits = false;
  std::string summary;  // "needs 278 MiB (weights 98 MiB + KV 180 MiB for 8192 tokens); 3.2 GiB available"
};
// Whether the model fits in `available` bytes plus `released` (the model loaded now, which is
// unloaded first).
FitCheck CheckFit(const ModelEstimate& e, uint64_t available, uint64_t released);

// One row of the picker's file browser.
struct BrowserEntry {
  enum class Kind { kParent, kDirectory, kGguf, kHfFolder };
  Kind kind = Kind::kDirectory;
  std::string name, path;
  uint64_t bytes = 0;  // GGUF files
};
// `dir`'s subdirectories (a folder with config.json is a Hugging Face model) and .gguf files
// whose names contain `filter` (case-insensitive), directories first, each group by name; a
// ".." row first unless dir is the root. Hidden entries are left out. IOError when unreadable.
Result<std::vector<BrowserEntry>> ListModelDirectory(const std::string& dir, const std::string& filter);

// Recently loaded models, most recent first, in a JSON file ({"recent": [paths]}).
inline constexpr size_t kMaxRecentModels = 10;
std::vector<std::string> LoadRecentModels(const std::string& file);  // missing or bad file: empty
// Puts `path` first (once), keeps kMaxRecentModels, writes the file atomically.
Status RememberModel(const std::string& file, const std::string& path);

}  // namespace impress::gui
