// HfConfig: typed, range-checked reads of a Hugging Face config.json, for the folder loader
// (hf-loader.cpp) and the architectures' read_hf_extras hooks (arch.h). Every error names the
// file and the key; float values must be finite as 32-bit floats. Immutable after construction;
// safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace impress {

class HfConfig {
 public:
  // `j` must outlive the HfConfig.
  HfConfig(std::string path, const nlohmann::json& j) : path_(std::move(path)), j_(j) {}

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return j_; }

  // An integer in 1..max; *def when the key is absent or null (kNotFound without a default).
  Result<int64_t> Int(const char* key, int64_t max, const int64_t* def = nullptr) const;
  // A number of `obj` (the config or an object in it); def when absent unless required.
  Result<double> Num(const nlohmann::json& obj, const char* key, double def, bool required = false) const;
  Result<double> Num(const char* key, double def) const { return Num(j_, key, def); }
  // A boolean; def when absent or null.
  Result<bool> Bool(const char* key, bool def) const;

 private:
  std::string path_;
  const nlohmann::json& j_;
};

}  // namespace impress
