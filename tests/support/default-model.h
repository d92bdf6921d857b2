// Where the tests find the default model (SmolLM2-135M-Instruct, Q4_1 GGUF): the same rule as
// scripts/env.sh, which CI sources: $IMPRESS_DEFAULT_MODEL, else the models folder under
// $IMPRESS_CACHE_DIR, else $XDG_CACHE_HOME/impress, else ~/.cache/impress. scripts/setup.sh puts
// the file there. Header-only; safe from any thread.
#pragma once

#include <cstdlib>
#include <string>

namespace impress::test_support {

// The per-machine cache folder: $IMPRESS_CACHE_DIR, else $XDG_CACHE_HOME/impress, else
// ~/.cache/impress (the rule of scripts/env.sh).
inline std::string CacheDir() {
  std::string cache;
  if (const char* c = std::getenv("IMPRESS_CACHE_DIR"); c && *c) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = x;
    cache.append("/impress");
  } else {
    const char* home = std::getenv("HOME");
    cache = home ? home : "/root";
    cache.append("/.cache/impress");
  }
  return cache;
}

inline std::string DefaultModel() {
  if (const char* e = std::getenv("IMPRESS_DEFAULT_MODEL"); e && *e) return e;
  std::string path = CacheDir();
  path.append("/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  return path;
}

}  // namespace impress::test_support
