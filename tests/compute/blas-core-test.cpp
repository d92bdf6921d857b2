// The OpenBLAS kernel-set rule (engine/compute/cpu-backend.h): a fallback core before AVX2 on a
// CPU with AVX-512 or AVX2 is replaced; any other choice stands.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/compute/cpu-backend.h"

namespace impress {
namespace {

TEST(BlasCore, AFallbackBeforeAvx2IsReplacedByWhatTheCpuRuns) {
  EXPECT_STREQ(PickBlasCore("Prescott", true, true), "SkylakeX");
  EXPECT_STREQ(PickBlasCore("Prescott", false, true), "Haswell");
  EXPECT_STREQ(PickBlasCore("Nehalem", false, true), "Haswell");
  EXPECT_STREQ(PickBlasCore("Sandybridge", true, true), "SkylakeX");
  EXPECT_EQ(PickBlasCore("Prescott", false, false), nullptr);  // the CPU has nothing better
}

TEST(BlasCore, ARecognisedCoreStands) {
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "ARMV8", ""})
    EXPECT_EQ(PickBlasCore(core, true, true), nullptr) << core;
}

TEST(BlasCore, OverrideMatchesTheRuleForThisProcess) {
  // This process's OpenBLAS: an override names a better set than the one it chose, and none is
  // asked for when OPENBLAS_CORETYPE was set.
  const std::string chosen = BlasCoreName();
  EXPECT_FALSE(chosen.empty());
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set && *set) {
    EXPECT_EQ(BlasCoreOverride(), nullptr);
  } else if (const char* core = BlasCoreOverride()) {
    EXPECT_NE(std::string(core), chosen);
    EXPECT_NE(PickBlasCore(chosen, true, true), nullptr);
  }
}

TEST(BlasThreadTimeout, SetUnlessTheUserSetOne) {
  // Each case sets and restores the two variables around the call.
  const auto with = [](const char* name, const char* value) {
    const char* names[] = {"OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT"};
    std::string saved[2];
    bool had[2];
    for (int i = 0; i < 2; ++i) {
      const char* v = std::getenv(names[i]);
      had[i] = v != nullptr;
      if (v) saved[i] = v;
      unsetenv(names[i]);
    }
    if (name) setenv(name, value, 1);
    const char* got = BlasThreadTimeoutToSet();
    for (int i = 0; i < 2; ++i) {
      if (had[i]) setenv(names[i], saved[i].c_str(), 1);
      else unsetenv(names[i]);
    }
    return got;
  };
  EXPECT_STREQ(with(nullptr, nullptr), kBlasThreadTimeout);
  EXPECT_STREQ(with("OPENBLAS_THREAD_TIMEOUT", ""), kBlasThreadTimeout);  // empty: unset
  EXPECT_EQ(with("OPENBLAS_THREAD_TIMEOUT", "20"), nullptr);
  EXPECT_EQ(with("GOTO_THREAD_TIMEOUT", "28"), nullptr);
}

}  // namespace
}  // namespace impress
