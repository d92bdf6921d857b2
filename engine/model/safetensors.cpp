#include "engine/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/fp16.h"
#include "engine/model/dequant.h"
#include "engine/model/quote.h"

namespace impress {

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

namespace {

using json = nlohmann::json;
constexpr size_t kMaxDims = 16;

struct DtypeEntry {
  const char* name;
  StDtype dtype;
  uint32_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", StDtype::kF64, 8},   {"F32", StDtype::kF32, 4},        {"F16", StDtype::kF16, 2},
    {"BF16", StDtype::kBF16, 2}, {"I64", StDtype::kI64, 8},        {"I32", StDtype::kI32, 4},
    {"I16", StDtype::kI16, 2},   {"I8", StDtype::kI8, 1},          {"U64", StDtype::kU64, 8},
    {"U32", StDtype::kU32, 4},   {"U16", StDtype::kU16, 2},        {"U8", StDtype::kU8, 1},
    {"BOOL", StDtype::kBool, 1}, {"F8_E4M3", StDtype::kF8E4M3, 1}, {"F8_E5M2", StDtype::kF8E5M2, 1},
};

const DtypeEntry* FindDtype(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// Parses JSON text without exceptions; `dup_top_key` receives a top-level key seen twice.
bool ParseJson(std::string_view text, json* out, std::string* dup_top_key, std::string* error) {
  std::set<std::string> seen;
  bool dup = false;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !dup && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) {
        dup = true;
        *dup_top_key = k;
      }
    }
    return true;
  };
  try {
    *out = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {  // defensive: nothing may escape the module
    *error = e.what();
    return false;
  }
  if (out->is_discarded()) {
    *error = "invalid JSON";
    return false;
  }
  if (!dup) dup_top_key->clear();
  return true;
}

bool ReadTextFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return bool(f) || f.eof();
}

}  // namespace

const char* StDtypeName(StDtype t) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == t) return e.name;
  }
  return "?";
}

uint32_t StDtypeSize(StDtype t) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == t) return e.size;
  }
  return 0;
}

std::string SafetensorsTensor::ShapeString() const {
  std::string s = "[";
  for (size_t j = 0; j < shape.size(); ++j) {
    if (j) s += ", ";
    s += std::to_string(shape[j]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  IMPRESS_ASSIGN_OR_RETURN(f.image_, MappedFile::Open(path, "safetensors file"));
  IMPRESS_RETURN_IF_ERROR(f.Parse());
  return f;
}

Result<SafetensorsFile> SafetensorsFile::OpenFromMemory(const void* data, size_t size, std::string name) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  if (data == nullptr && size != 0) return Status::InvalidArgument(f.path_ + ": null image");
  f.image_ = MappedFile::Borrow(data, size);
  IMPRESS_RETURN_IF_ERROR(f.Parse());
  return f;
}

const SafetensorsTensor* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::Parse() {
  auto bad = [&](const std::string& msg) { return Status::Corruption(path_ + ": " + msg); };
  const uint8_t* base = image_.data();
  const uint64_t size = image_.size();
  if (size < 8) return bad("truncated file: " + std::to_string(size) + " bytes, less than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes) {
    return bad("header length " + std::to_string(header_len) + " is larger than the " +
               std::to_string(kMaxHeaderBytes) + "-byte limit (not a safetensors file?)");
  }
  if (header_len > size - 8) {
    return bad("header length " + std::to_string(header_len) + " runs past the end of the file (" +
               std::to_string(size) + " bytes)");
  }
  if (header_len < 2) return bad("header length " + std::to_string(header_len) + " is too small for a JSON object");
  const std::string_view text(reinterpret_cast<const char*>(base + 8), header_len);
  json header;
  std::string dup, error;
  if (!ParseJson(text, &header, &dup, &error)) return bad("the header is not valid JSON (" + error + ")");
  if (!dup.empty()) return bad("tensor " + Quote(dup) + " appears more than once in the header");
  if (!header.is_object()) return bad("the header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  tensors_.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + Quote(name);
    if (!v.is_object()) return bad(what + ": its entry is not an object");
    SafetensorsTensor t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return bad(what + ": missing or non-string 'dtype'");
    const DtypeEntry* de = FindDtype(dt->get_ref<const std::string&>());
    if (!de)
      return Status::Unsupported(path_ + ": " + what + ": unknown dtype " + Quote(dt->get_ref<const std::string&>()));
    t.dtype = de->dtype;
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return bad(what + ": missing or non-array 'shape'");
    if (sh->size() > kMaxDims) return bad(what + ": " + std::to_string(sh->size()) + " dimensions (at most 16)");
    uint64_t n = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) return bad(what + ": shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(n, dim, &n)) {
        return bad(what + ": the element count of its shape overflows 64 bits");
      }
      t.shape.push_back(int64_t(dim));
    }
    t.n_elements = n;
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return bad(what + ": 'data_offsets' must be two non-negative integers");
    }
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end) {
      return bad(what + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] are reversed");
    }
    if (t.end > data_size) {
      return bad(what + ": data_offsets end " + std::to_string(t.end) + " is past the end of the data (" +
                 std::to_string(data_size) + " bytes)");
    }
    uint64_t want = 0;
    if (__builtin_mul_overflow(n, uint64_t(de->size), &want) || want != t.end - t.begin) {
      return bad(what + ": shape " + t.ShapeString() + " of " + de->name + " needs " +
                 (want / de->size == n ? std::to_string(want) : std::string("more than 2^64")) +
                 " bytes, but data_offsets span " + std::to_string(t.end - t.begin));
    }
    t.data = base + data_start + t.begin;
    tensors_.push_back(std::move(t));
  }
  // No two tensors share bytes (empty tensors share nothing).
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : tensors_) {
    if (t.end > t.begin) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->end > order[i]->begin) {
      return bad("tensors " + Quote(order[i - 1]->name) + " [" + std::to_string(order[i - 1]->begin) + ", " +
                 std::to_string(order[i - 1]->end) + ") and " + Quote(order[i]->name) + " [" +
                 std::to_string(order[i]->begin) + ", " + std::to_string(order[i]->end) + ") overlap");
    }
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return Status::Ok();
}

Status SafetensorsToF32(const SafetensorsTensor& t, const std::string& path, float* dst) {
  uint32_t ggml = 0;
  switch (t.dtype) {
    case StDtype::kF32: ggml = uint32_t(GgmlType::kF32); break;
    case StDtype::kF16: ggml = uint32_t(GgmlType::kF16); break;
    case StDtype::kBF16: ggml = uint32_t(GgmlType::kBF16); break;
    default:
      return Status::Unsupported(path + ": tensor " + Quote(t.name) + " has dtype " + StDtypeName(t.dtype) +
                                 " (weights must be F32, F16 or BF16)");
  }
  return Dequantize(ggml, t.data, t.n_bytes(), dst, t.n_elements, t.name).WithContext(path);
}

// ---------------------------------------------------------------------------------------------

Result<SafetensorsSet> SafetensorsSet::OpenFolder(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsSet set;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    std::string text;
    if (!ReadTextFile(index_path, &text)) return Status::IOError(index_path + ": cannot read");
    json index;
    std::string dup, error;
    if (!ParseJson(text, &index, &dup, &error))
      return Status::Corruption(index_path + ": not valid JSON (" + error + ")");
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return Status::Corruption(index_path + ": no 'weight_map' object");
    }
    std::map<std::string, size_t> shard_index;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return Status::Corruption(index_path + ": weight_map entry " + Quote(it.key()) + " is not a file name");
      }
      const std::string shard = it.value().get<std::string>();
      // Shards are plain file names in the folder: no paths, so an index cannot point elsewhere.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return Status::Corruption(index_path + ": weight_map entry " + Quote(it.key()) + " names " + Quote(shard) +
                                  ", not a file name in the folder");
      }
      auto [pos, inserted] = shard_index.emplace(shard, set.files_.size());
      if (inserted) {
        auto f = SafetensorsFile::Open(dir + "/" + shard);
        if (!f.ok()) return f.status().WithContext(index_path + " lists " + Quote(shard));
        set.files_.push_back(std::move(f).value());
      }
      const SafetensorsFile& file = set.files_[pos->second];
      if (!file.FindTensor(it.key())) {
        return Status::Corruption(file.path() + ": tensor " + Quote(it.key()) + " listed in " + index_path +
                                  " is missing");
      }
      set.where_[it.key()] = pos->second;
    }
  } else {
    const std::string single = dir + "/model.safetensors";
    if (!fs::exists(single, ec)) {
      return Status::NotFound(dir + ": neither model.safetensors nor model.safetensors.index.json exists");
    }
    IMPRESS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single));
    set.files_.push_back(std::move(f));
    for (const SafetensorsTensor& t : set.files_[0].tensors()) set.where_[t.name] = 0;
  }
  return set;
}

const SafetensorsTensor* SafetensorsSet::Find(std::string_view name, const std::string** file_path) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) return nullptr;
  const SafetensorsFile& f = files_[it->second];
  if (file_path) *file_path = &f.path();
  return f.FindTensor(name);
}

}  // namespace impress
