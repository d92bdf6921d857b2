// The default model loaded once per test executable, for fixtures that run it in many tests.
// SharedDefaultModel() loads it on the first call: nullptr when the file is absent (tests skip),
// and a failed load is kept in *status (tests fail, never skip: a broken file is a bug). Call it
// from the test thread only (GoogleTest runs tests one after another); the context lives until exit.
#pragma once

#include <filesystem>
#include <memory>

#include "base/status.h"
#include "engine/runtime/model-context.h"
#include "tests/support/default-model.h"

namespace impress::test_support {

inline ModelContext* SharedDefaultModel(Status* status) {
  static std::unique_ptr<ModelContext> ctx;
  static Status load_status;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (std::filesystem::exists(DefaultModel())) {
      auto c = ModelContext::Load(DefaultModel(), ModelContextOptions{});
      if (c.ok()) ctx = std::move(*c);
      else load_status = c.status();
    }
  }
  *status = load_status;
  return ctx.get();
}

}  // namespace impress::test_support
