// The CUDA backend is a module loaded at run time (engine/compute/cuda/cuda-module.h): a CPU run
// never maps it (nor cudart or cuBLAS), and asking for the CUDA backend where the module cannot
// be loaded gives an error that says so. The module is pointed at a path that does not exist,
// so this holds in every build, with or without CUDA or a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/cuda/cuda-backend.h"

namespace impress {
namespace {

constexpr char kMissingModule[] = "/nonexistent-dir/libimpress-cuda.so";
// Before any test asks for the module (it is loaded once per process).
const bool kEnvSet = setenv("IMPRESS_CUDA_MODULE", kMissingModule, 1) == 0;

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CudaModule, CpuRunMapsNoCudaLibrary) {
  ASSERT_TRUE(kEnvSet);
  auto be = MakeCpuBackend({1});
  std::vector<float> a(64, 1.0f), b(64, 2.0f), c(64, 0.0f);
  be->Gemm(Trans::kNo, Trans::kYes, 8, 8, 8, 1.0f, DevPtr<const float>(a.data()), 8, DevPtr<const float>(b.data()), 8,
           0.0f, DevPtr<float>(c.data()), 8);
  EXPECT_EQ(c[0], 16.0f);
  EXPECT_TRUE(CudaBackendStatus(*be).ok());  // asks nothing of the module
  const std::string maps = Maps();
  ASSERT_FALSE(maps.empty());
  for (const char* lib : {"libcublas", "libcudart", "libimpress-cuda"})
    EXPECT_EQ(maps.find(lib), std::string::npos) << lib;
}

TEST(CudaModule, CudaBackendWithoutTheModuleSaysWhy) {
  ASSERT_TRUE(kEnvSet);
  auto be = MakeCudaBackend({});
  ASSERT_FALSE(be.ok());
  EXPECT_EQ(be.status().code(), Status::Code::kUnsupported);
  const std::string msg = be.status().ToString();
  if (CudaBuildEnabled()) {
    EXPECT_NE(msg.find(kMissingModule), std::string::npos) << msg;  // where it looked
    EXPECT_NE(msg.find("--backend cpu"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("no CUDA backend"), std::string::npos) << msg;
  }
  EXPECT_EQ(CudaDeviceCount().status().code(), Status::Code::kUnsupported);
  EXPECT_EQ(Maps().find("libcublas"), std::string::npos);
}

}  // namespace
}  // namespace impress
