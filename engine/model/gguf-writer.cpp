#include "engine/model/gguf-writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/model/dequant.h"

namespace impress {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default general.alignment

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void Put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
  }
  void Str(std::string_view s) {
    Put(uint64_t(s.size()));
    const size_t at = b.size();
    b.resize(at + s.size());
    if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
  }
};

// The value's payload (without its type id), for a scalar of type t or an array.
void PutValue(Bytes* out, GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kBool: out->Put(uint8_t(v.u)); break;
    case GgufType::kI8: out->Put(int8_t(v.i)); break;
    case GgufType::kU16: out->Put(uint16_t(v.u)); break;
    case GgufType::kI16: out->Put(int16_t(v.i)); break;
    case GgufType::kU32: out->Put(uint32_t(v.u)); break;
    case GgufType::kI32: out->Put(int32_t(v.i)); break;
    case GgufType::kU64: out->Put(uint64_t(v.u)); break;
    case GgufType::kI64: out->Put(int64_t(v.i)); break;
    case GgufType::kF32: out->Put(float(v.f)); break;
    case GgufType::kF64: out->Put(double(v.f)); break;
    case GgufType::kString: out->Str(v.str); break;
    case GgufType::kArray:
      out->Put(uint32_t(v.elem_type));
      out->Put(uint64_t(v.n_elems));
      if (v.elem_type == GgufType::kString) {
        for (std::string_view s : v.strs) out->Str(s);
      } else if (v.elem_type == GgufType::kArray) {
        for (const GgufValue& item : v.items) PutValue(out, GgufType::kArray, item);
      } else {
        const uint64_t n = v.n_elems * GgufScalarSize(v.elem_type);
        const size_t at = out->b.size();
        out->b.resize(at + n);
        if (n) std::memcpy(out->b.data() + at, v.raw, n);
      }
      break;
  }
}

template <class T>
std::vector<uint8_t> Scalar(GgufType t, T v) {
  Bytes b;
  b.Put(uint32_t(t));
  b.Put(v);
  return std::move(b.b);
}

uint64_t Pad(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void GgufWriter::Put(const std::string& key, std::vector<uint8_t> bytes) {
  for (auto& kv : kvs_) {
    if (kv.first == key) {
      kv.second = std::move(bytes);
      return;
    }
  }
  kvs_.emplace_back(key, std::move(bytes));
}

bool GgufWriter::Has(const std::string& key) const {
  for (const auto& kv : kvs_)
    if (kv.first == key) return true;
  return false;
}

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  Bytes b;
  b.Put(uint32_t(GgufType::kString));
  b.Str(value);
  Put(key, std::move(b.b));
}
void GgufWriter::SetU32(const std::string& key, uint32_t value) { Put(key, Scalar(GgufType::kU32, value)); }
void GgufWriter::SetI32(const std::string& key, int32_t value) { Put(key, Scalar(GgufType::kI32, value)); }
void GgufWriter::SetF32(const std::string& key, float value) { Put(key, Scalar(GgufType::kF32, value)); }
void GgufWriter::SetBool(const std::string& key, bool value) { Put(key, Scalar(GgufType::kBool, uint8_t(value))); }

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  Bytes b;
  b.Put(uint32_t(GgufType::kArray));
  b.Put(uint32_t(GgufType::kString));
  b.Put(uint64_t(values.size()));
  for (const std::string& s : values) b.Str(s);
  Put(key, std::move(b.b));
}

void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  Bytes b;
  b.Put(uint32_t(GgufType::kArray));
  b.Put(uint32_t(GgufType::kI32));
  b.Put(uint64_t(values.size()));
  for (int32_t v : values) b.Put(v);
  Put(key, std::move(b.b));
}

void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& values) {
  Bytes b;
  b.Put(uint32_t(GgufType::kArray));
  b.Put(uint32_t(GgufType::kF32));
  b.Put(uint64_t(values.size()));
  for (float v : values) b.Put(v);
  Put(key, std::move(b.b));
}

void GgufWriter::SetValue(const std::string& key, const GgufValue& value) {
  Bytes b;
  b.Put(uint32_t(value.type));
  PutValue(&b, value.type, value);
  Put(key, std::move(b.b));
}

Status GgufWriter::AddTensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type_id) {
  if (name.empty()) return Status::InvalidArgument("GGUF tensor without a name");
  for (const TensorRec& t : tensors_)
    if (t.name == name) return Status::InvalidArgument("GGUF tensor '" + name + "' added twice");
  if (shape.empty() || shape.size() > 4) {
    return Status::InvalidArgument("GGUF tensor '" + name + "' has " + std::to_string(shape.size()) + " dimensions");
  }
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 1) return Status::InvalidArgument("GGUF tensor '" + name + "' has a dimension " + std::to_string(d));
    n *= uint64_t(d);
  }
  const GgmlTypeTraits* tr = GgmlTypeInfo(type_id);
  if (!tr || uint64_t(shape.back()) % tr->block_size != 0) {
    return Status::InvalidArgument("GGUF tensor '" + name + "': rows of " + std::to_string(shape.back()) +
                                   " values are not whole blocks of " + GgmlTypeName(type_id));
  }
  IMPRESS_ASSIGN_OR_RETURN(const uint64_t n_bytes, GgmlByteSize(type_id, n));
  TensorRec t;
  t.name = name;
  t.ne.assign(shape.rbegin(), shape.rend());
  t.type_id = type_id;
  t.n_bytes = n_bytes;
  t.offset = next_offset_;
  next_offset_ = Pad(next_offset_ + n_bytes);
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

uint64_t GgufWriter::DataBytes() const { return next_offset_; }

Status GgufWriter::Write(const std::string& path, const std::function<Status(size_t, std::vector<uint8_t>*)>& fill,
                         const ProgressFn& progress) const {
  Bytes h;
  h.b = {'G', 'G', 'U', 'F'};
  h.Put(uint32_t(3));
  h.Put(uint64_t(tensors_.size()));
  h.Put(uint64_t(kvs_.size()));
  for (const auto& [key, value] : kvs_) {
    h.Str(key);
    h.b.insert(h.b.end(), value.begin(), value.end());
  }
  for (const TensorRec& t : tensors_) {
    h.Str(t.name);
    h.Put(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) h.Put(uint64_t(d));
    h.Put(t.type_id);
    h.Put(t.offset);
  }
  h.b.resize(Pad(h.b.size()), 0);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::IOError(tmp + ": cannot create: " + std::strerror(errno));
  auto fail = [&](Status st) {
    std::fclose(f);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return st;
  };
  auto put = [&](const void* p, size_t n) { return n == 0 || std::fwrite(p, 1, n, f) == n; };
  if (!put(h.b.data(), h.b.size())) return fail(Status::IOError(tmp + ": write failed: " + std::strerror(errno)));
  std::vector<uint8_t> bytes;
  const std::vector<uint8_t> zeros(kAlignment, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorRec& t = tensors_[i];
    bytes.clear();
    if (Status st = fill(i, &bytes); !st.ok()) return fail(st);
    if (bytes.size() != t.n_bytes) {
      return fail(Status::InvalidArgument("tensor '" + t.name + "': " + std::to_string(bytes.size()) + " bytes made, " +
                                          std::to_string(t.n_bytes) + " expected"));
    }
    if (!put(bytes.data(), bytes.size()) || !put(zeros.data(), size_t(Pad(t.n_bytes) - t.n_bytes))) {
      return fail(Status::IOError(tmp + ": write failed: " + std::strerror(errno)));
    }
    if (!ReportProgress(progress, i + 1, tensors_.size(), t.name)) return fail(Status::Cancelled("write cancelled"));
  }
  if (std::fflush(f) != 0 || std::fclose(f) != 0) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return Status::IOError(tmp + ": write failed: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::IOError(path + ": cannot rename the written file into place: " + ec.message());
  }
  return Status::Ok();
}

}  // namespace impress
