// The memory-fit check: see memory-fit.h.
#include "engine/model/memory-fit.h"

#include <algorithm>
#include <fstream>

namespace impress {

uint64_t MemAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

Status CheckFitsMemory(const std::string& path, const ModelConfig& c, uint64_t weights, const LoadOptions& opt) {
  if (!opt.check_memory) return Status::Ok();
  const uint64_t avail = opt.mem_available ? opt.mem_available : MemAvailableBytes();
  if (avail == 0) return Status::Ok();
  const uint64_t kv = KvBytes(c, opt.kv_tokens), need = weights + kv;
  if (need <= avail) return Status::Ok();
  auto mib = [](uint64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; };
  return Status::ResourceExhausted(path + ": the model needs about " + mib(need) + " (weights " + mib(weights) +
                                   " + KV of " + std::to_string(opt.kv_tokens) + " tokens " + mib(kv) + ") but only " +
                                   mib(avail) + " of memory are available (MemAvailable)");
}

uint64_t KvBytes(const ModelConfig& c, int64_t n_tokens) {
  return uint64_t(std::max<int64_t>(n_tokens, 0)) * uint64_t(c.n_layer) * uint64_t(c.n_head_kv) * uint64_t(c.head_dim) *
         2 * sizeof(uint16_t);
}

}  // namespace impress
