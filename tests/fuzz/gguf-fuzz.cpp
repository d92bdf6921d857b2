// libFuzzer target: GgufFile::OpenFromMemory on arbitrary bytes, then every accessor on what
// opened: typed getters for every key, and dequantization of every small tensor (so any data
// pointer or size the reader hands out outside the input shows up under ASan).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/dequant.h"
#include "engine/model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy: libFuzzer's buffer is already exact, but be explicit about ownership.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  auto f = impress::GgufFile::OpenFromMemory(copy.get(), size, "fuzz.gguf");
  if (!f.ok()) return 0;
  for (const impress::GgufKv& kv : f->kvs()) {
    (void)f->GetString(kv.key);
    (void)f->GetInt(kv.key);
    (void)f->GetFloat(kv.key);
    (void)f->GetBool(kv.key);
    (void)f->GetArrayLength(kv.key);
    (void)f->GetStringArray(kv.key);
    (void)f->GetStringViewArray(kv.key);
    (void)f->GetIntArray(kv.key);
    (void)f->GetInt64Array(kv.key);
    (void)f->GetFloatArray(kv.key);
    (void)f->GetBoolArray(kv.key);
  }
  std::vector<float> out;
  for (const impress::GgufTensorInfo& t : f->tensors()) {
    if (f->FindTensor(t.name) != &t) __builtin_trap();
    if (t.data < f->file_data() || t.data + t.n_bytes > f->file_data() + f->file_size()) __builtin_trap();
    if (t.n_elements > (1u << 16) || !impress::CanDequantize(t.type_id)) continue;
    out.resize(t.n_elements);
    (void)impress::Dequantize(t.type_id, t.data, t.n_bytes, out.data(), t.n_elements, t.name, 1);
  }
  return 0;
}
