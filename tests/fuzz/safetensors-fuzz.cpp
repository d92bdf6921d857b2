// libFuzzer target: SafetensorsFile::OpenFromMemory on arbitrary bytes, then conversion of every
// small F32/F16/BF16 tensor (any range the reader hands out outside the input shows under ASan).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  auto f = impress::SafetensorsFile::OpenFromMemory(copy.get(), size, "fuzz.safetensors");
  if (!f.ok()) return 0;
  std::vector<float> out;
  for (const impress::SafetensorsTensor& t : f->tensors()) {
    if (f->FindTensor(t.name) != &t) __builtin_trap();
    if (t.data < f->file_data() || t.data + t.n_bytes() > f->file_data() + f->file_size()) __builtin_trap();
    if (t.n_elements > (1u << 16)) continue;
    out.resize(t.n_elements);
    (void)impress::SafetensorsToF32(t, "fuzz.safetensors", out.data());
  }
  return 0;
}
