// Progress reporting for long work (model load, ingestion, prefill). A callback receives
// (done, total, what); it may be called from a worker thread and must be cheap. Returning
// false asks the work to stop (it then ends with Status::Cancelled).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace impress {

using ProgressFn = std::function<bool(uint64_t done, uint64_t total, std::string_view what)>;

inline bool ReportProgress(const ProgressFn& fn, uint64_t done, uint64_t total, std::string_view what) {
  return fn ? fn(done, total, what) : true;
}

}  // namespace impress
