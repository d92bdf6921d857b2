// HfConfig: see hf-config.h.
#include "engine/model/hf-config.h"

#include <cmath>

namespace impress {

Result<int64_t> HfConfig::Int(const char* key, int64_t max, const int64_t* def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) {
    if (def) return *def;
    return Status::NotFound(path_ + ": key '" + key + "' is missing");
  }
  if (!it->is_number_integer()) return Status::Corruption(path_ + ": key '" + key + "' is not an integer");
  const int64_t v = it->get<int64_t>();
  if (v < 1 || v > max) {
    return Status::Corruption(path_ + ": key '" + key + "' is " + std::to_string(v) + ", expected 1.." +
                              std::to_string(max));
  }
  return v;
}

Result<double> HfConfig::Num(const nlohmann::json& obj, const char* key, double def, bool required) const {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return Status::NotFound(path_ + ": key '" + key + "' is missing");
    return def;
  }
  if (!it->is_number()) return Status::Corruption(path_ + ": key '" + key + "' is not a number");
  const double v = it->get<double>();
  // Finite as the float the model keeps (1e300 is a finite double but an infinite float).
  if (!std::isfinite(float(v))) {
    return Status::Corruption(path_ + ": key '" + key + "' is " + std::to_string(v) + ", not a finite 32-bit float");
  }
  return v;
}

Result<bool> HfConfig::Bool(const char* key, bool def) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Status::Corruption(path_ + ": key '" + key + "' is not a boolean");
  return it->get<bool>();
}

}  // namespace impress
