// GgufFile: a read-only, validated view of a GGUF model file (versions 2 and 3).
//
// Open() maps the file (mmap, read-only) and parses the header, every metadata key/value and
// every tensor info; everything is checked before it is used (counts, string lengths, array
// sizes, dimensions and their products, byte sizes, offsets, alignment, duplicate names), so a
// GgufFile that opened is internally consistent and every pointer it hands out lies inside the
// mapping. Errors name the file, the key or tensor, and what was wrong. The memory the parsed
// metadata takes (key/value and tensor records, their indexes, string and nested-array
// element lists) is booked in real bytes before it is allocated and bounded by
// kGgufMaxMetadataBytes (ResourceExhausted beyond it), whatever counts the file declares.
//
// Owns the mapping: string views, array views and tensor data pointers stay valid until the
// GgufFile is destroyed (or moved from). Immutable after Open; const methods may be called
// from any thread at once. Movable, not copyable.
//
// Conventions follow ggml: a tensor's dims are ne[0..n_dims), ne[0] the fastest-varying (the
// row length); a 2-D weight of PyTorch shape (out, in) is stored with ne = {in, out}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/model/ggml-type.h"
#include "engine/model/mapped-file.h"

namespace impress {

// The most memory the parsed metadata of one file may take. A real model's is a few MiB (a
// 256k-token vocabulary: ~4 MiB of string views); this leaves a wide margin.
inline constexpr uint64_t kGgufMaxMetadataBytes = uint64_t(256) << 20;

// GGUF metadata value types (gguf.h: enum gguf_type).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* GgufTypeName(GgufType t);
// Byte size of a fixed-size metadata value type; 0 for string and array.
uint64_t GgufScalarSize(GgufType t);

// One metadata value. Scalars are decoded; arrays of numbers/bools are a view of the raw
// little-endian bytes in the mapping (possibly unaligned: read them through the getters);
// arrays of strings are string views; arrays of arrays are nested values.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars (type != kArray): exactly one of these is meaningful, by type.
  uint64_t u = 0;        // kU8/kU16/kU32/kU64/kBool
  int64_t i = 0;         // kI8/kI16/kI32/kI64
  double f = 0;          // kF32/kF64
  std::string_view str;  // kString (not NUL-terminated; may contain any bytes)
  // Arrays (type == kArray).
  GgufType elem_type = GgufType::kU8;
  uint64_t n_elems = 0;
  const uint8_t* raw = nullptr;        // numeric/bool elements, n_elems * elem size bytes
  std::vector<std::string_view> strs;  // elem_type == kString
  std::vector<GgufValue> items;        // elem_type == kArray

  bool is_integer() const;  // a scalar of an integer type (not bool)
  bool is_float() const;    // kF32 / kF64
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;           // 1..4
  int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is the row length
  uint32_t type_id = 0;          // the raw id in the file (== static_cast<uint32_t>(type))
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;            // relative to the data section, a multiple of alignment
  uint64_t n_elements = 0;        // product of ne
  uint64_t n_bytes = 0;           // bytes in the file for n_elements of type
  const uint8_t* data = nullptr;  // inside the mapping; n_bytes readable bytes

  int64_t n_rows() const { return n_elements / uint64_t(ne[0]); }  // product of ne[1..]
  std::string ShapeString() const;                                 // "[576, 49152]" (ggml order)
};

class GgufFile {
 public:
  // Maps and validates the file at `path`.
  static Result<GgufFile> Open(const std::string& path);
  // Parses an in-memory image (used by tests and the fuzzers). Does not copy: `data` must
  // outlive the GgufFile. `name` stands in for the path in error messages.
  static Result<GgufFile> OpenFromMemory(const void* data, size_t size, std::string name = "<memory>");

  // Moving the vectors keeps their elements in place, so the string_view keys of the indexes
  // (which point into those elements) stay valid through the defaulted moves.
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  uint64_t file_size() const { return image_.size(); }
  const uint8_t* file_data() const { return image_.data(); }  // the whole file image
  const MappedFile& image() const { return image_; }
  // Hint that [p, p + n) (inside the image) will not be read again: a mapped file drops those
  // pages from memory (they are re-read from the file if touched). No-op for in-memory images.
  void DiscardPages(const uint8_t* p, uint64_t n) const { image_.DiscardPages(p, n); }

  // --- metadata ---
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr when absent
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. NotFound when the key is absent; InvalidArgument (naming the key, the
  // expected and the actual type) when it has the wrong type; OutOfRange when an integer does
  // not fit the result.
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;   // any integer type (u64 must fit int64)
  Result<double> GetFloat(std::string_view key) const;  // f32/f64, or any integer type
  Result<bool> GetBool(std::string_view key) const;
  Result<uint64_t> GetArrayLength(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  // Views into the mapping: valid while this GgufFile lives. No copies of the strings.
  Result<std::vector<std::string_view>> GetStringViewArray(std::string_view key) const;
  Result<std::vector<int32_t>> GetIntArray(std::string_view key) const;    // any integer elems, each must fit int32
  Result<std::vector<int64_t>> GetInt64Array(std::string_view key) const;  // any integer elems (u64 must fit)
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;    // f32/f64 (or integer) elems
  Result<std::vector<bool>> GetBoolArray(std::string_view key) const;

  // --- tensors (in file order) ---
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;         // nullptr when absent
  Result<const GgufTensorInfo*> GetTensor(std::string_view name) const;  // NotFound names it

 private:
  GgufFile() = default;
  class Parser;

  std::string path_;
  MappedFile image_;  // the file's mapping, or the borrowed in-memory image
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string_view, size_t> kv_index_;  // key -> kvs_ index
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;  // name -> tensors_ index
};

}  // namespace impress
