// Test helper: writes GGUF images byte by byte, independently of engine/model/gguf.cpp, so the
// tests can make valid files of any shape and break them on purpose (counts, lengths, offsets).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/default-model.h"

namespace impress::test {

// Raw little-endian writer.
struct ByteWriter {
  std::vector<uint8_t> buf;
  template <class T>
  void Put(T v) {
    Bytes(&v, sizeof(T));
  }
  void U32(uint32_t v) { Put(v); }
  void U64(uint64_t v) { Put(v); }
  void Str(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void Bytes(const void* p, size_t n) {
    // resize + memcpy: GCC 12 warns falsely (-Wstringop-overflow) on vector::insert here.
    if (n == 0) return;
    const size_t at = buf.size();
    buf.resize(at + n);
    std::memcpy(buf.data() + at, p, n);
  }
  void PadTo(uint64_t align) {
    while (buf.size() % align) buf.push_back(0);
  }
};

// GGUF value type ids (written independently of engine/model/gguf.h on purpose).
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

struct TestTensor {
  std::string name;
  std::vector<uint64_t> ne;                                         // ggml order
  uint32_t type = 0;                                                // GGML type id
  std::vector<uint8_t> data;                                        // exactly the tensor's bytes
  uint64_t offset_override = std::numeric_limits<uint64_t>::max();  // write this offset instead
};

struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32;  // used for layout; written as general.alignment only if KvAlignment()
  std::vector<std::function<void(ByteWriter&)>> kvs;
  std::vector<TestTensor> tensors;
  uint64_t n_kv_override = std::numeric_limits<uint64_t>::max();
  uint64_t n_tensors_override = std::numeric_limits<uint64_t>::max();

  // key + type + value written by `value`.
  void Kv(const std::string& key, uint32_t type, std::function<void(ByteWriter&)> value) {
    kvs.push_back([key, type, value](ByteWriter& w) {
      w.Str(key);
      w.U32(type);
      value(w);
    });
  }
  template <class T>
  void KvScalar(const std::string& key, uint32_t type, T v) {
    Kv(key, type, [v](ByteWriter& w) { w.Put(v); });
  }
  void KvString(const std::string& key, const std::string& s) {
    Kv(key, kString, [s](ByteWriter& w) { w.Str(s); });
  }
  template <class T>
  void KvArray(const std::string& key, uint32_t elem_type, const std::vector<T>& xs) {
    Kv(key, kArray, [elem_type, xs](ByteWriter& w) {
      w.U32(elem_type);
      w.U64(xs.size());
      for (const T& x : xs) w.Put(x);
    });
  }
  void KvStringArray(const std::string& key, const std::vector<std::string>& xs) {
    Kv(key, kArray, [xs](ByteWriter& w) {
      w.U32(kString);
      w.U64(xs.size());
      for (const auto& x : xs) w.Str(x);
    });
  }
  void KvAlignment(uint32_t a) {
    alignment = a;
    KvScalar<uint32_t>("general.alignment", kU32, a);
  }

  // Offsets are assigned in order, each padded to the alignment.
  std::vector<uint8_t> Build() const {
    ByteWriter w;
    w.Bytes("GGUF", 4);
    w.U32(version);
    w.U64(n_tensors_override != std::numeric_limits<uint64_t>::max() ? n_tensors_override : tensors.size());
    w.U64(n_kv_override != std::numeric_limits<uint64_t>::max() ? n_kv_override : kvs.size());
    for (const auto& kv : kvs) kv(w);
    uint64_t off = 0;
    std::vector<uint64_t> offsets;
    for (const TestTensor& t : tensors) {
      offsets.push_back(off);
      w.Str(t.name);
      w.U32(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) w.U64(d);
      w.U32(t.type);
      w.U64(t.offset_override != std::numeric_limits<uint64_t>::max() ? t.offset_override : off);
      off += t.data.size();
      off = (off + alignment - 1) / alignment * alignment;
    }
    w.PadTo(alignment);
    const size_t data_start = w.buf.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      w.buf.resize(data_start + offsets[i]);
      w.Bytes(tensors[i].data.data(), tensors[i].data.size());
    }
    if (!tensors.empty()) w.PadTo(alignment);
    return w.buf;
  }
};

inline void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline std::vector<uint8_t> F32Bytes(const std::vector<float>& xs) {
  std::vector<uint8_t> b(xs.size() * 4);
  if (!xs.empty()) std::memcpy(b.data(), xs.data(), b.size());
  return b;
}

// A fresh directory under TMPDIR for one test.
inline std::string MakeTempDir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/impress-" + tag + "-XXXXXX";
  std::vector<char> b(tmpl.begin(), tmpl.end());
  b.push_back('\0');
  const char* d = mkdtemp(b.data());
  return d ? std::string(d) : std::string();
}

inline std::string DefaultModelPath() { return test_support::DefaultModel(); }

}  // namespace impress::test
