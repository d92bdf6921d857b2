// GgufWriter: writes a GGUF (version 3) file: metadata key/values, tensor infos, then each
// tensor's bytes at 32-byte aligned offsets, the layout engine/model/gguf.h and the `gguf` Python
// package read.
//
// Metadata is serialized as it is set (a later Set of the same key replaces the earlier value).
// Tensor bytes are asked for one tensor at a time, in the order the tensors were added, while
// the file is written, so a model larger than memory can be streamed through. The file appears
// under its name only when complete (written to "<path>.tmp", then renamed).
//
// Thread contract: one thread uses a writer; Write calls `fill` on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/model/gguf.h"

namespace impress {

class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetI32(const std::string& key, int32_t value);
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& values);
  void SetF32Array(const std::string& key, const std::vector<float>& values);
  // A value as another GGUF file holds it (any type, arrays of arrays included).
  void SetValue(const std::string& key, const GgufValue& value);
  bool Has(const std::string& key) const;

  // Adds a tensor of `type_id` whose PyTorch-order `shape` (slowest dimension first) is written
  // in ggml order. Errors: kInvalidArgument for an empty or duplicate name, 0 or > 4 dimensions,
  // a non-positive dimension, or a row that is not whole blocks of the type.
  Status AddTensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type_id);
  size_t n_tensors() const { return tensors_.size(); }
  uint64_t DataBytes() const;  // the tensor data section's size, padding included

  // Writes the file. fill(i, &bytes) must set bytes to tensor i's exact byte size (checked).
  // Progress is reported after each tensor (done and total in tensors, the tensor's name);
  // returning false cancels (kCancelled, nothing left behind). Errors from fill are returned
  // as they are; I/O errors name the path.
  Status Write(const std::string& path, const std::function<Status(size_t, std::vector<uint8_t>*)>& fill,
               const ProgressFn& progress = {}) const;

 private:
  struct TensorRec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    uint32_t type_id = 0;
    uint64_t n_bytes = 0;
    uint64_t offset = 0;
  };
  void Put(const std::string& key, std::vector<uint8_t> bytes);

  std::vector<std::pair<std::string, std::vector<uint8_t>>> kvs_;  // key, serialized type + value
  std::vector<TensorRec> tensors_;
  uint64_t next_offset_ = 0;
};

}  // namespace impress
