// Weight jobs: the threaded part of loading a model. A loader (gguf-loader.cpp, hf-loader.cpp)
// plans one WeightJob per tensor (where its bytes are, the shape it must have, what to make of
// it), then RunJobs fills every tensor on a few threads: views of stored rows, rows put back in
// Hugging Face order, values converted to fp32 or re-encoded in another GGML type.
//
// Thread contract: RunJobs runs the jobs on the calling thread plus workers of its own, joined
// before it returns; the progress callback is called under a mutex, one call at a time. A job's
// sources (file mappings) must outlive RunJobs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"

namespace impress {

// One weight to fill: where it comes from and the (PyTorch-order) shape it must have.
struct WeightJob {
  std::string name;  // its name in the file, for errors and progress
  Tensor* dst = nullptr;
  std::vector<int64_t> shape;
  uint64_t n_elements = 0;
  const GgufFile* gguf_file = nullptr;
  const GgufTensorInfo* gguf = nullptr;   // GGUF source, or
  const SafetensorsTensor* st = nullptr;  // safetensors source
  const std::string* st_path = nullptr;
  int unpermute_heads = 0;   // > 0: undo llama.cpp's RoPE row permutation
  uint32_t convert_to = 0;   // != 0: the values are re-encoded in this GgmlType at load (LoadOptions::weights)
  bool keep_stored = false;  // the tensor views its stored rows (GGUF; F16/BF16 safetensors) instead of fp32 values
};

// "[2, 3]": a shape for messages.
std::string ShapeStr(const std::vector<int64_t>& shape);
// The product of the dimensions (bounded by the kMax* limits of gguf-config.h).
uint64_t NumElements(const std::vector<int64_t>& shape);

// Runs the jobs on n_threads threads (this one included), largest first. `first` (may be empty)
// runs before any job, concurrently with them on the other threads. Progress once per job;
// returning false cancels (kCancelled). The first error stops the others.
Status RunJobs(std::vector<WeightJob>& jobs, int n_threads, const ProgressFn& progress,
               const std::function<Status()>& first);

// LoadOptions::weights: every matrix whose rows are whole blocks of `type` is re-encoded in it
// (the others stay as they would otherwise load); 0 changes nothing. kInvalidArgument for a type
// the kernels lack.
Status PlanConversion(std::vector<WeightJob>& jobs, uint32_t type);

// Bytes the jobs' weights take in memory: stored bytes for views, the converted size for
// re-encoded matrices, 4 per value otherwise.
uint64_t JobsMemoryBytes(const std::vector<WeightJob>& jobs);

}  // namespace impress
