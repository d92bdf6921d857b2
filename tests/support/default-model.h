// Where the tests find the default model (SmolLM2-135M-Instruct, Q4_1 GGUF): the same rule as
// scripts/env.sh, which CI sources: $IMPRESS_DEFAULT_MODEL, else the models folder under
// $IMPRESS_CACHE_DIR, else $XDG_CACHE_HOME/impress, else ~/.cache/impress. scripts/setup.sh puts
// the file there. Header-only; safe from any thread.
#pragma once

#include <cstdlib>
#include <string>

namespace impress::test_support {

inline std::string DefaultModel() {
  if (const char* e = std::getenv("IMPRESS_DEFAULT_MODEL"); e && *e) return e;
  std::string cache;
  if (const char* c = std::getenv("IMPRESS_CACHE_DIR"); c && *c) {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = std::string(x) + "/impress";
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home ? home : "/root") + "/.cache/impress";
  }
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace impress::test_support
