#include "gui/gui-config.h"
#include "pipeline/system-policy.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace impress::gui {

std::string DefaultConfigDir() {
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return std::string(x) + "/impress";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.config/impress";
  return ".impress";
}

namespace {

// Reads json[key] into *out when present; checks the type and [lo, hi].
template <typename T>
Status ReadNumber(const nlohmann::json& j, const char* key, double lo, double hi, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_number()) return Status::InvalidArgument(std::string("settings key '") + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    return Status::InvalidArgument(
        fmt::format("settings key '{}' = {} is outside [{:g}, {:g}]", key, it->dump(), lo, hi));
  *out = T(v);
  return Status::Ok();
}

Status ReadBool(const nlohmann::json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_boolean())
    return Status::InvalidArgument(std::string("settings key '") + key + "' must be true or false");
  *out = it->get<bool>();
  return Status::Ok();
}

// The sampling keys are written only once the user has set them, so a settings file without
// them keeps following each model's recommendation.
Status ReadSampling(const nlohmann::json& j, TuningSettings::Sampling* s) {
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "temperature", 0, 5, &s->temperature));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "top_k", 0, 1 << 20, &s->top_k));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "top_p", 0, 1, &s->top_p));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "min_p", 0, 1, &s->min_p));
  for (const char* key : {"temperature", "top_k", "top_p", "min_p"})
    if (j.contains(key)) s->user_set = true;
  return Status::Ok();
}

}  // namespace

TuningSettings::Sampling ModelSampling(const GenerationDefaults& model) {
  const SamplerOptions d = ChatSamplerDefaults();
  TuningSettings::Sampling s;
  s.temperature = model.temperature.value_or(d.temperature);
  s.top_k = model.top_k.value_or(d.top_k);
  s.top_p = model.top_p.value_or(d.top_p);
  s.min_p = model.min_p.value_or(d.min_p);
  return s;
}

SamplerOptions ToSamplerOptions(const TuningSettings::Sampling& s) {
  SamplerOptions o = ChatSamplerDefaults();
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  return o;
}

Result<TuningSettings> ParseTuning(const std::string& text, const TuningSettings& defaults) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("settings are not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("settings must be a JSON object");
  TuningSettings s = defaults;
  PipelineSettings& p = s.pipeline;
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "alpha", 0, 2, &p.alpha));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "keep", 0.01, 1, &p.keep));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "pool", 0, kMaxPoolWidth, &p.pool));
  IMPRESS_RETURN_IF_ERROR(ReadBool(j, "pool_max", &p.pool_max));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "pool_follow", 0, kMaxPoolWidth, &p.pool_follow));
  IMPRESS_RETURN_IF_ERROR(ReadBool(j, "head_max", &p.head_max));
  IMPRESS_RETURN_IF_ERROR(ReadBool(j, "predict_next", &p.predict_next));
  IMPRESS_RETURN_IF_ERROR(ReadBool(j, "predict_select", &p.predict_select));
  if (auto it = j.find("select_budget"); it != j.end()) {
    if (!it->is_string() || !ParseGroupBudget(it->get<std::string>(), &p.select_budget))
      return Status::InvalidArgument("settings key 'select_budget' = " + it->dump() + " is not \"mass\" or \"tokens\"");
  }
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "probe_heads", 1, 64, &p.probe_heads));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "sinks", 0, 1024, &p.sinks));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "recent", 0, 8192, &p.recent));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "device_budget_mb", 0, 1 << 20, &s.device_budget_mb));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "host_budget_mb", 0, 1 << 22, &s.host_budget_mb));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "ssd_budget_mb", 1, 1 << 24, &s.ssd_budget_mb));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "reorder_interval_min", 0, 24 * 60, &s.reorder_interval_min));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "max_tokens", 1, 8192, &s.max_tokens));
  IMPRESS_RETURN_IF_ERROR(ReadSampling(j, &s.sampling));
  IMPRESS_RETURN_IF_ERROR(ReadNumber(j, "fidelity_tokens", 0, 256, &s.fidelity_tokens));
  if (auto it = j.find("system"); it != j.end()) {
    if (!it->is_string() || !ParseSystem(it->get<std::string>(), &p.system))
      return Status::InvalidArgument("settings key 'system' = " + it->dump() + " is not one of " + SystemNames(", "));
  }
  if (auto it = j.find("policy"); it != j.end()) {
    if (!it->is_string()) return Status::InvalidArgument("settings key 'policy' must be a string");
    auto k = store::ParsePolicyKind(it->get<std::string>());
    if (!k.ok()) return k.status().WithContext("settings key 'policy'");
    s.policy = *k;
  }
  return s;
}

std::string TuningToJson(const TuningSettings& s) {
  const PipelineSettings& p = s.pipeline;
  nlohmann::json j = {{"system", SystemName(p.system)},
                      {"alpha", p.alpha},
                      {"keep", p.keep},
                      {"pool", p.pool},
                      {"pool_max", p.pool_max},
                      {"pool_follow", p.pool_follow},
                      {"head_max", p.head_max},
                      {"predict_next", p.predict_next},
                      {"predict_select", p.predict_select},
                      {"select_budget", GroupBudgetName(p.select_budget)},
                      {"probe_heads", p.probe_heads},
                      {"sinks", p.sinks},
                      {"recent", p.recent},
                      {"device_budget_mb", s.device_budget_mb},
                      {"host_budget_mb", s.host_budget_mb},
                      {"ssd_budget_mb", s.ssd_budget_mb},
                      {"policy", std::string(store::PolicyKindName(s.policy))},
                      {"reorder_interval_min", s.reorder_interval_min},
                      {"max_tokens", s.max_tokens},
                      {"fidelity_tokens", s.fidelity_tokens}};
  if (s.sampling.user_set) {
    j["temperature"] = s.sampling.temperature;
    j["top_k"] = s.sampling.top_k;
    j["top_p"] = s.sampling.top_p;
    j["min_p"] = s.sampling.min_p;
  }
  return j.dump(2) + "\n";
}

Result<TuningSettings> LoadTuning(const std::string& path, const TuningSettings& defaults) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return defaults;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read settings file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = ParseTuning(ss.str(), defaults);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

Status SaveTuning(const std::string& path, const TuningSettings& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::IOError("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << TuningToJson(s);
    if (!out.flush()) return Status::IOError("cannot write settings file " + tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot replace settings file " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace impress::gui
