// cuda-backend.h and cuda-tier-memory.h in a build with CUDA: each call goes to the CUDA module
// (cuda-module.h), loaded on first use. Without the module, every call says where it was looked
// for and why it did not load.
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "engine/compute/cuda/cuda-backend.h"
#include "engine/compute/cuda/cuda-module.h"
#include "engine/compute/cuda/cuda-tier-memory.h"

namespace impress {

namespace {

std::string ModulePath() {
  if (const char* env = std::getenv("IMPRESS_CUDA_MODULE"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(kCudaModuleFile) : (exe.parent_path() / kCudaModuleFile).string();
}

// The module's table once loaded (read without loading it).
std::atomic<const CudaModuleApi*> g_api{nullptr};

struct Loaded {
  const CudaModuleApi* api = nullptr;
  Status status;
};

// Loaded once; the module stays mapped for the process's lifetime (backends it made may live
// until exit).
const Loaded& Module() {
  static const Loaded loaded = [] {
    Loaded l;
    const std::string path = ModulePath();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = dlerror();
      l.status = Status::Unsupported(fmt::format(
          "the CUDA backend module did not load ({}; set IMPRESS_CUDA_MODULE to its path, or use --backend cpu)",
          err ? err : path));
      return l;
    }
    auto entry = reinterpret_cast<CudaModuleEntryFn>(dlsym(handle, kCudaModuleEntry));
    const CudaModuleApi* api = entry ? entry() : nullptr;
    if (!api || api->version != kCudaModuleApiVersion) {
      l.status = Status::Unsupported(
          fmt::format("{} is not a CUDA backend module of this build (entry point {}, "
                      "version {}, want {})",
                      path, entry ? "found" : "missing", api ? api->version : 0, kCudaModuleApiVersion));
      return l;
    }
    spdlog::debug("cuda: module {}", path);
    l.api = api;
    g_api.store(api);
    return l;
  }();
  return loaded;
}

}  // namespace

bool CudaBuildEnabled() { return true; }

Result<int> CudaDeviceCount() {
  const Loaded& m = Module();
  return m.api ? m.api->device_count() : Result<int>(m.status);
}

Result<std::string> CudaDeviceDescription(int device) {
  const Loaded& m = Module();
  return m.api ? m.api->device_description(device) : Result<std::string>(m.status);
}

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  const Loaded& m = Module();
  if (!m.api) return m.status;
  return m.api->make_backend(options);
}

Status CudaBackendStatus(const Backend& backend) {
  // Never loads the module: without it no CUDA backend exists, and a CPU run stays CPU-only.
  const CudaModuleApi* api = g_api.load();
  return api ? api->backend_status(backend) : Status::Ok();
}

Result<double> MeasureCublasTflops(int device, CudaGemmPrecision precision, int size) {
  const Loaded& m = Module();
  return m.api ? m.api->measure_cublas_tflops(device, precision, size) : Result<double>(m.status);
}

Result<std::shared_ptr<MemorySpace>> MakeCudaDeviceTierMemory(int device) {
  const Loaded& m = Module();
  if (!m.api) return m.status;
  return m.api->make_device_tier(device);
}

Result<std::shared_ptr<MemorySpace>> MakeCudaPinnedHostTierMemory(int device) {
  const Loaded& m = Module();
  if (!m.api) return m.status;
  return m.api->make_pinned_host_tier(device);
}

}  // namespace impress
