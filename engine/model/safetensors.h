// Safetensors files and the weights of a Hugging Face model folder.
//
// SafetensorsFile maps one `.safetensors` file (mmap, read-only) and validates it completely
// before handing anything out: the 8-byte header length (in the file, at most 100 MB), the
// JSON header (an object; no duplicate names), each tensor's dtype, shape (product checked for
// overflow), and data_offsets (in range, end - begin == numel * dtype size, no two tensors
// overlapping). Errors name the file, the tensor and what was wrong.
//
// SafetensorsSet is the weights of a Hugging Face folder: `model.safetensors`, or the shards
// listed by `model.safetensors.index.json` (weight_map), with every tensor name resolved to
// its shard.
//
// Both own their mappings; pointers they hand out stay valid until they are destroyed. Immutable
// after opening; const methods may be called from any thread. Movable, not copyable.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/model/mapped-file.h"

namespace impress {

enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool, kF8E4M3, kF8E5M2 };
const char* StDtypeName(StDtype t);  // as written in files: "BF16"
uint32_t StDtypeSize(StDtype t);     // bytes per element

struct SafetensorsTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;     // PyTorch order: shape[0] slowest
  uint64_t begin = 0, end = 0;    // data_offsets, relative to the data section
  uint64_t n_elements = 0;        // product of shape (1 for a scalar)
  const uint8_t* data = nullptr;  // inside the mapping, end - begin bytes
  uint64_t n_bytes() const { return end - begin; }
  std::string ShapeString() const;  // "[49152, 576]"
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  static Result<SafetensorsFile> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzers); `data` must outlive the object.
  static Result<SafetensorsFile> OpenFromMemory(const void* data, size_t size, std::string name = "<memory>");

  // Defaulted moves keep tensors_' elements in place, so index_'s string_view keys stay valid.
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return image_.size(); }
  const uint8_t* file_data() const { return image_.data(); }
  const MappedFile& image() const { return image_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
  const SafetensorsTensor* FindTensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  Status Parse();

  std::string path_;
  MappedFile image_;  // the file's mapping, or the borrowed in-memory image
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> tensors_ index
  std::map<std::string, std::string> metadata_;
};

// Converts a F32, F16 or BF16 tensor to fp32 (n_elements values into dst). Other dtypes:
// kUnsupported naming the tensor, its dtype and `path`.
Status SafetensorsToF32(const SafetensorsTensor& t, const std::string& path, float* dst);

class SafetensorsSet {
 public:
  // `dir` is a Hugging Face model folder. Reads model.safetensors.index.json when present
  // (shard names must be plain file names inside dir), else model.safetensors.
  static Result<SafetensorsSet> OpenFolder(const std::string& dir);

  // The tensor and the path of the file it lives in; nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name, const std::string** file_path = nullptr) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  size_t n_tensors() const { return where_.size(); }

 private:
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> files_ index
};

}  // namespace impress
