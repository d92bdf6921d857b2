#include "engine/model/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/model/quote.h"

namespace impress {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;            // nested arrays deeper than this are rejected
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;
// What the parsed metadata really costs in memory, beyond the mapping: the file-size limits in Parse()
// let a key/value of 13 file bytes through, but once parsed and indexed it costs ~150 bytes of
// record and ~70 of index.
// Index entries: a hash node (key view, value, next, cached hash) plus malloc overhead and a
// bucket pointer.
constexpr uint64_t kIndexEntryBytes = 72;
constexpr uint64_t kKvBytes = sizeof(GgufKv) + kIndexEntryBytes;
constexpr uint64_t kTensorBytes = sizeof(GgufTensorInfo) + kIndexEntryBytes + sizeof(void*);  // + by_offset
// A heap string (longer than the small-string buffer) costs its bytes, a NUL and malloc's header.
uint64_t HeapStringBytes(std::string_view s) { return s.size() < 16 ? 0 : s.size() + 1 + 16; }

bool IsValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

bool IsIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64: return true;
    default: return false;
  }
}

bool IsSignedType(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one fixed-size element at p into the u/i/f fields of `v` (v.type must be set).
void DecodeScalar(GgufValue& v, const uint8_t* p) {
  switch (v.type) {
    case GgufType::kU8: v.u = Load<uint8_t>(p); break;
    case GgufType::kI8: v.i = Load<int8_t>(p); break;
    case GgufType::kU16: v.u = Load<uint16_t>(p); break;
    case GgufType::kI16: v.i = Load<int16_t>(p); break;
    case GgufType::kU32: v.u = Load<uint32_t>(p); break;
    case GgufType::kI32: v.i = Load<int32_t>(p); break;
    case GgufType::kU64: v.u = Load<uint64_t>(p); break;
    case GgufType::kI64: v.i = Load<int64_t>(p); break;
    case GgufType::kF32: v.f = Load<float>(p); break;
    case GgufType::kF64: v.f = Load<double>(p); break;
    case GgufType::kBool: v.u = Load<uint8_t>(p); break;
    case GgufType::kString:
    case GgufType::kArray: break;
  }
}

// An integer element as int64, with `overflow` set for a u64 above INT64_MAX.
int64_t ElemAsInt64(GgufType t, const uint8_t* p, bool* overflow) {
  GgufValue v;
  v.type = t;
  DecodeScalar(v, p);
  *overflow = false;
  if (IsSignedType(t)) return v.i;
  if (v.u > uint64_t(std::numeric_limits<int64_t>::max())) *overflow = true;
  return int64_t(v.u);
}

}  // namespace

uint64_t GgufScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "invalid";
}

bool GgufValue::is_integer() const { return IsIntegerType(type); }
bool GgufValue::is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }

std::string GgufTensorInfo::ShapeString() const {
  std::string s = "[";
  for (uint32_t j = 0; j < n_dims; ++j) {
    if (j) s += ", ";
    s += std::to_string(ne[j]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------------------------
// Parser: a bounds-checked cursor over the file image. Every read checks the bytes remain.

class GgufFile::Parser {
 public:
  Parser(GgufFile& f) : f_(f), base_(f.image_.data()), size_(f.image_.size()) {}

  Status Parse() {
    uint32_t magic = 0;
    IMPRESS_RETURN_IF_ERROR(ReadU32(&magic, "the magic number"));
    if (magic != kGgufMagic) {
      char m[5] = {};
      std::memcpy(m, &magic, 4);
      for (char& c : m)
        if (c && (c < 0x20 || c >= 0x7f)) c = '?';
      return Bad(Status::Code::kCorruption,
                 "not a GGUF file: the magic is '" + std::string(m, 4) + "', expected 'GGUF'");
    }
    IMPRESS_RETURN_IF_ERROR(ReadU32(&f_.version_, "the version"));
    if (f_.version_ == 1) {
      return Bad(
          Status::Code::kUnsupported,
          "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model with a current llama.cpp");
    }
    if (f_.version_ != 2 && f_.version_ != 3) {
      if ((f_.version_ & 0xffff) == 0 && (f_.version_ >> 16) != 0) {
        return Bad(Status::Code::kUnsupported, "big-endian GGUF files are not supported");
      }
      return Bad(Status::Code::kUnsupported,
                 "GGUF version " + std::to_string(f_.version_) + " is not supported (only versions 2 and 3)");
    }
    uint64_t n_tensors = 0, n_kv = 0;
    IMPRESS_RETURN_IF_ERROR(ReadU64(&n_tensors, "the tensor count"));
    IMPRESS_RETURN_IF_ERROR(ReadU64(&n_kv, "the metadata key count"));
    // A key/value needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
    // 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset). Counts the rest of the
    // file cannot hold are rejected before anything is allocated for them.
    if (n_kv > Remaining() / 13) {
      return Bad(Status::Code::kCorruption, "metadata key count " + std::to_string(n_kv) + " is impossible: only " +
                                                std::to_string(Remaining()) + " bytes follow the header");
    }
    if (n_tensors > Remaining() / 32) {
      return Bad(Status::Code::kCorruption, "tensor count " + std::to_string(n_tensors) + " is impossible: only " +
                                                std::to_string(Remaining()) + " bytes follow the header");
    }
    IMPRESS_RETURN_IF_ERROR(Charge(n_kv, kKvBytes, "the " + std::to_string(n_kv) + " metadata keys"));
    IMPRESS_RETURN_IF_ERROR(Charge(n_tensors, kTensorBytes, "the " + std::to_string(n_tensors) + " tensor infos"));

    f_.kvs_.reserve(n_kv);
    for (uint64_t ik = 0; ik < n_kv; ++ik) {
      GgufKv kv;
      std::string_view key;
      IMPRESS_RETURN_IF_ERROR(ReadString(&key, "the name of metadata key #" + std::to_string(ik)));
      const std::string what = "metadata key " + Quote(key);
      IMPRESS_RETURN_IF_ERROR(Charge(1, HeapStringBytes(key), what));
      kv.key.assign(key);
      uint32_t type = 0;
      IMPRESS_RETURN_IF_ERROR(ReadU32(&type, "the type of " + what));
      IMPRESS_RETURN_IF_ERROR(ReadValue(type, &kv.value, what, 0));
      f_.kvs_.push_back(std::move(kv));
    }
    for (size_t ik = 0; ik < f_.kvs_.size(); ++ik) {
      if (!f_.kv_index_.emplace(f_.kvs_[ik].key, ik).second) {
        return Bad(Status::Code::kCorruption, "metadata key " + Quote(f_.kvs_[ik].key) + " appears more than once");
      }
    }

    if (const GgufValue* a = f_.Find("general.alignment")) {
      if (!a->is_integer() || IsSignedType(a->type)) {
        return Bad(Status::Code::kCorruption, std::string("metadata key 'general.alignment' has type ") +
                                                  GgufTypeName(a->type) + ", expected an unsigned integer");
      }
      if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > kMaxAlignment) {
        return Bad(Status::Code::kCorruption,
                   "general.alignment " + std::to_string(a->u) + " is not a power of two in [1, 2^30]");
      }
      f_.alignment_ = a->u;
    }

    f_.tensors_.reserve(n_tensors);
    for (uint64_t it = 0; it < n_tensors; ++it) {
      GgufTensorInfo t;
      IMPRESS_RETURN_IF_ERROR(ReadTensorInfo(it, &t));
      f_.tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment.
    const uint64_t end_of_infos = pos_;
    const uint64_t a = f_.alignment_;
    const uint64_t data_offset = (end_of_infos + a - 1) / a * a;  // no overflow: end <= size < 2^63
    f_.data_offset_ = data_offset;
    const uint64_t data_size = data_offset <= size_ ? size_ - data_offset : 0;
    if (!f_.tensors_.empty() && data_offset > size_) {
      return Bad(Status::Code::kCorruption, "the tensor data section would start at offset " +
                                                std::to_string(data_offset) + ", past the end of the file (" +
                                                std::to_string(size_) + " bytes)");
    }

    for (size_t it = 0; it < f_.tensors_.size(); ++it) {
      GgufTensorInfo& t = f_.tensors_[it];
      const std::string what = "tensor " + Quote(t.name);
      if (!f_.tensor_index_.emplace(t.name, it).second) {
        return Bad(Status::Code::kCorruption, what + " appears more than once");
      }
      if (t.offset % a != 0) {
        return Bad(Status::Code::kCorruption, what + ": data offset " + std::to_string(t.offset) +
                                                  " is not a multiple of the alignment " + std::to_string(a));
      }
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return Bad(Status::Code::kCorruption,
                   what + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                       " bytes) runs past the end of the data section (" + std::to_string(data_size) + " bytes)");
      }
      t.data = base_ + data_offset + t.offset;
    }
    // No two tensors may share bytes.
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(f_.tensors_.size());
    for (const GgufTensorInfo& t : f_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* x, const GgufTensorInfo* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensorInfo* prev = by_offset[i - 1];
      if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
        return Bad(Status::Code::kCorruption, "tensors " + Quote(prev->name) + " and " + Quote(by_offset[i]->name) +
                                                  " overlap in the data section");
      }
    }
    return Status::Ok();
  }

 private:
  uint64_t Remaining() const { return size_ - pos_; }

  // Books n items of item_bytes each against the metadata memory budget, before they are
  // allocated: ResourceExhausted naming `what` when the budget would be exceeded.
  Status Charge(uint64_t n, uint64_t item_bytes, const std::string& what) {
    const uint64_t left = kGgufMaxMetadataBytes - mem_;
    if (item_bytes != 0 && n > left / item_bytes) {
      return Bad(Status::Code::kResourceExhausted,
                 what + " would need more than the " + std::to_string(kGgufMaxMetadataBytes >> 20) +
                     " MiB of memory allowed for GGUF metadata (" + std::to_string(n) + " x " +
                     std::to_string(item_bytes) + " bytes; " + std::to_string(mem_) + " bytes used so far)");
    }
    mem_ += n * item_bytes;
    return Status::Ok();
  }

  Status Bad(Status::Code code, const std::string& msg) const { return Status(code, f_.path_ + ": " + msg); }

  Status Truncated(uint64_t need, const std::string& what) const {
    return Bad(Status::Code::kCorruption, "truncated file: reading " + what + " needs " + std::to_string(need) +
                                              " bytes at offset " + std::to_string(pos_) + ", but the file has " +
                                              std::to_string(size_) + " bytes");
  }

  Status Need(uint64_t n, const std::string& what) const {
    return n <= Remaining() ? Status::Ok() : Truncated(n, what);
  }

  Status ReadU32(uint32_t* v, const std::string& what) {
    IMPRESS_RETURN_IF_ERROR(Need(4, what));
    *v = Load<uint32_t>(base_ + pos_);
    pos_ += 4;
    return Status::Ok();
  }

  Status ReadU64(uint64_t* v, const std::string& what) {
    IMPRESS_RETURN_IF_ERROR(Need(8, what));
    *v = Load<uint64_t>(base_ + pos_);
    pos_ += 8;
    return Status::Ok();
  }

  Status ReadString(std::string_view* s, const std::string& what) {
    return ReadString(s, [&] { return what; });
  }

  // The same with the name made only for an error (what() returns it): a vocabulary's 150K
  // strings would otherwise each build two messages, much of a model's start-up.
  template <class What>
  Status ReadString(std::string_view* s, const What& what) {
    if (Remaining() < 8) return Truncated(8, "the length of " + what());
    const uint64_t len = Load<uint64_t>(base_ + pos_);
    pos_ += 8;
    if (len > Remaining()) {
      return Bad(Status::Code::kCorruption, what() + ": string length " + std::to_string(len) + " at offset " +
                                                std::to_string(pos_ - 8) + " exceeds the " +
                                                std::to_string(Remaining()) + " bytes left in the file");
    }
    *s = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  Status ReadValue(uint32_t type, GgufValue* v, const std::string& what, int depth) {
    if (!IsValidType(type)) {
      return Bad(Status::Code::kCorruption, what + ": unknown value type " + std::to_string(type));
    }
    v->type = static_cast<GgufType>(type);
    if (v->type == GgufType::kString) return ReadString(&v->str, what);
    if (v->type != GgufType::kArray) {
      const uint64_t n = GgufScalarSize(v->type);
      IMPRESS_RETURN_IF_ERROR(Need(n, what));
      DecodeScalar(*v, base_ + pos_);
      pos_ += n;
      if (v->type == GgufType::kBool && v->u > 1) {
        return Bad(Status::Code::kCorruption, what + ": bool value " + std::to_string(v->u) + " is neither 0 nor 1");
      }
      return Status::Ok();
    }
    // Array: element type, count, elements.
    if (depth >= kMaxArrayDepth) {
      return Bad(Status::Code::kCorruption,
                 what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    uint32_t elem_type = 0;
    IMPRESS_RETURN_IF_ERROR(ReadU32(&elem_type, "the element type of " + what));
    if (!IsValidType(elem_type)) {
      return Bad(Status::Code::kCorruption, what + ": unknown array element type " + std::to_string(elem_type));
    }
    v->elem_type = static_cast<GgufType>(elem_type);
    IMPRESS_RETURN_IF_ERROR(ReadU64(&v->n_elems, "the length of " + what));
    const uint64_t n = v->n_elems;
    // Minimum bytes per element: fixed size, 8 for a string (its length), 12 for an array.
    const uint64_t min_elem = v->elem_type == GgufType::kString  ? 8
                              : v->elem_type == GgufType::kArray ? 12
                                                                 : GgufScalarSize(v->elem_type);
    if (n > Remaining() / min_elem) {
      return Bad(Status::Code::kCorruption, what + ": array of " + std::to_string(n) + " " +
                                                GgufTypeName(v->elem_type) + " elements cannot fit in the " +
                                                std::to_string(Remaining()) + " bytes left in the file");
    }
    if (v->elem_type == GgufType::kString) {
      IMPRESS_RETURN_IF_ERROR(Charge(n, sizeof(std::string_view), what));
      v->strs.resize(n);
      for (uint64_t j = 0; j < n; ++j) {
        IMPRESS_RETURN_IF_ERROR(ReadString(&v->strs[j], [&] { return what + " element " + std::to_string(j); }));
      }
    } else if (v->elem_type == GgufType::kArray) {
      IMPRESS_RETURN_IF_ERROR(Charge(n, sizeof(GgufValue), what));
      v->items.resize(n);
      for (uint64_t j = 0; j < n; ++j) {
        IMPRESS_RETURN_IF_ERROR(ReadValue(elem_type, &v->items[j], what + " element " + std::to_string(j), depth + 1));
      }
    } else {
      v->raw = base_ + pos_;
      pos_ += n * min_elem;
      if (v->elem_type == GgufType::kBool) {
        for (uint64_t j = 0; j < n; ++j) {
          if (v->raw[j] > 1) {
            return Bad(Status::Code::kCorruption, what + ": bool element " + std::to_string(j) + " is " +
                                                      std::to_string(v->raw[j]) + ", neither 0 nor 1");
          }
        }
      }
    }
    return Status::Ok();
  }

  Status ReadTensorInfo(uint64_t it, GgufTensorInfo* t) {
    std::string_view name;
    IMPRESS_RETURN_IF_ERROR(ReadString(&name, "the name of tensor #" + std::to_string(it)));
    const std::string what = "tensor " + Quote(name);
    IMPRESS_RETURN_IF_ERROR(Charge(1, HeapStringBytes(name), what));
    t->name.assign(name);
    IMPRESS_RETURN_IF_ERROR(ReadU32(&t->n_dims, "the dimension count of " + what));
    if (t->n_dims < 1 || t->n_dims > 4) {
      return Bad(Status::Code::kCorruption, what + ": " + std::to_string(t->n_dims) + " dimensions (must be 1 to 4)");
    }
    uint64_t n_elements = 1;
    for (uint32_t j = 0; j < t->n_dims; ++j) {
      uint64_t d = 0;
      IMPRESS_RETURN_IF_ERROR(ReadU64(&d, "dimension " + std::to_string(j) + " of " + what));
      if (d == 0 || d > uint64_t(std::numeric_limits<int64_t>::max())) {
        return Bad(Status::Code::kCorruption, what + ": dimension " + std::to_string(j) + " is " +
                                                  std::to_string(int64_t(d)) + " (must be positive)");
      }
      t->ne[j] = int64_t(d);
      if (__builtin_mul_overflow(n_elements, d, &n_elements) ||
          n_elements > uint64_t(std::numeric_limits<int64_t>::max())) {
        return Bad(Status::Code::kCorruption, what + ": the element count of its dimensions overflows 64 bits");
      }
    }
    t->n_elements = n_elements;
    IMPRESS_RETURN_IF_ERROR(ReadU32(&t->type_id, "the type of " + what));
    const GgmlTypeTraits* traits = GgmlTypeInfo(t->type_id);
    if (!traits) {
      return Bad(Status::Code::kUnsupported, what + ": unknown tensor type id " + std::to_string(t->type_id));
    }
    t->type = static_cast<GgmlType>(t->type_id);
    if (t->ne[0] % traits->block_size != 0) {
      return Bad(Status::Code::kCorruption, what + ": row length " + std::to_string(t->ne[0]) +
                                                " is not a multiple of the " + traits->name + " block size " +
                                                std::to_string(traits->block_size));
    }
    if (__builtin_mul_overflow(n_elements / traits->block_size, uint64_t(traits->type_size), &t->n_bytes)) {
      return Bad(Status::Code::kCorruption, what + ": its byte size overflows 64 bits");
    }
    IMPRESS_RETURN_IF_ERROR(ReadU64(&t->offset, "the data offset of " + what));
    return Status::Ok();
  }

  GgufFile& f_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t mem_ = 0;  // bytes booked by Charge
};

// ---------------------------------------------------------------------------------------------

Result<GgufFile> GgufFile::Open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  IMPRESS_ASSIGN_OR_RETURN(f.image_, MappedFile::Open(path, "GGUF model"));
  Parser parser(f);
  IMPRESS_RETURN_IF_ERROR(parser.Parse());
  return f;
}

Result<GgufFile> GgufFile::OpenFromMemory(const void* data, size_t size, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  if (size > uint64_t(std::numeric_limits<int64_t>::max()))
    return Status::InvalidArgument(f.path_ + ": image too large");
  if (data == nullptr && size != 0) return Status::InvalidArgument(f.path_ + ": null image");
  f.image_ = MappedFile::Borrow(data, size);
  Parser parser(f);
  IMPRESS_RETURN_IF_ERROR(parser.Parse());
  return f;
}

// ---------------------------------------------------------------------------------------------
// Metadata getters.

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

namespace {

std::string TypeDesc(const GgufValue& v) {
  if (v.type != GgufType::kArray) return GgufTypeName(v.type);
  return std::string("array of ") + GgufTypeName(v.elem_type);
}

}  // namespace

#define IMPRESS_GGUF_FIND(v, key) \
  const GgufValue* v = Find(key); \
  if (!v) return Status::NotFound(path_ + ": metadata key " + Quote(key) + " is missing")

#define IMPRESS_GGUF_WRONG_TYPE(v, key, expected)                                                                \
  Status::InvalidArgument(path_ + ": metadata key " + Quote(key) + " has type " + TypeDesc(*v) + ", expected " + \
                          (expected))

Result<std::string> GgufFile::GetString(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kString) return IMPRESS_GGUF_WRONG_TYPE(v, key, "string");
  return std::string(v->str);
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (!v->is_integer()) return IMPRESS_GGUF_WRONG_TYPE(v, key, "an integer");
  if (IsSignedType(v->type)) return v->i;
  if (v->u > uint64_t(std::numeric_limits<int64_t>::max())) {
    return Status::OutOfRange(path_ + ": metadata key " + Quote(key) + " value " + std::to_string(v->u) +
                              " is too large");
  }
  return int64_t(v->u);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->is_float()) return v->f;
  if (v->is_integer()) return IsSignedType(v->type) ? double(v->i) : double(v->u);
  return IMPRESS_GGUF_WRONG_TYPE(v, key, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kBool) return IMPRESS_GGUF_WRONG_TYPE(v, key, "bool");
  return v->u != 0;
}

Result<uint64_t> GgufFile::GetArrayLength(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray) return IMPRESS_GGUF_WRONG_TYPE(v, key, "an array");
  return v->n_elems;
}

Result<std::vector<std::string_view>> GgufFile::GetStringViewArray(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of string");
  }
  return v->strs;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v->strs.size());
  for (std::string_view s : v->strs) out.emplace_back(s);
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetInt64Array(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray || !IsIntegerType(v->elem_type)) {
    return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of integers");
  }
  const uint64_t es = GgufScalarSize(v->elem_type);
  std::vector<int64_t> out(v->n_elems);
  for (uint64_t j = 0; j < v->n_elems; ++j) {
    bool overflow = false;
    out[j] = ElemAsInt64(v->elem_type, v->raw + j * es, &overflow);
    if (overflow) {
      return Status::OutOfRange(path_ + ": metadata key " + Quote(key) + " element " + std::to_string(j) +
                                " is too large");
    }
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::GetIntArray(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray || !IsIntegerType(v->elem_type)) {
    return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of integers");
  }
  std::vector<int32_t> out(v->n_elems);
  if (v->elem_type == GgufType::kI32) {  // the common case (token types): one copy
    if (v->n_elems) std::memcpy(out.data(), v->raw, v->n_elems * 4);
    return out;
  }
  const uint64_t es = GgufScalarSize(v->elem_type);
  for (uint64_t j = 0; j < v->n_elems; ++j) {
    bool overflow = false;
    const int64_t x = ElemAsInt64(v->elem_type, v->raw + j * es, &overflow);
    if (overflow || x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      return Status::OutOfRange(path_ + ": metadata key " + Quote(key) + " element " + std::to_string(j) +
                                " does not fit in 32 bits");
    }
    out[j] = int32_t(x);
  }
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  const bool ok_type = v->type == GgufType::kArray && (v->elem_type == GgufType::kF32 ||
                                                       v->elem_type == GgufType::kF64 || IsIntegerType(v->elem_type));
  if (!ok_type) return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of numbers");
  std::vector<float> out(v->n_elems);
  if (v->elem_type == GgufType::kF32) {  // the common case (token scores): one copy
    if (v->n_elems) std::memcpy(out.data(), v->raw, v->n_elems * 4);
    return out;
  }
  const uint64_t es = GgufScalarSize(v->elem_type);
  for (uint64_t j = 0; j < v->n_elems; ++j) {
    GgufValue e;
    e.type = v->elem_type;
    DecodeScalar(e, v->raw + j * es);
    out[j] = e.is_float() ? float(e.f) : IsSignedType(e.type) ? float(e.i) : float(e.u);
  }
  return out;
}

Result<std::vector<bool>> GgufFile::GetBoolArray(std::string_view key) const {
  IMPRESS_GGUF_FIND(v, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kBool) {
    return IMPRESS_GGUF_WRONG_TYPE(v, key, "array of bool");
  }
  std::vector<bool> out(v->n_elems);
  for (uint64_t j = 0; j < v->n_elems; ++j) out[j] = v->raw[j] != 0;
  return out;
}

#undef IMPRESS_GGUF_FIND
#undef IMPRESS_GGUF_WRONG_TYPE

// ---------------------------------------------------------------------------------------------
// Tensors.

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufTensorInfo*> GgufFile::GetTensor(std::string_view name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (!t) return Status::NotFound(path_ + ": tensor " + Quote(name) + " is missing");
  return t;
}

}  // namespace impress
