#include "gui/model-info.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/gguf.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace fs = std::filesystem;

namespace {

Result<ModelEstimate> EstimateGguf(const std::string& path) {
  IMPRESS_ASSIGN_OR_RETURN(GgufFile f, GgufFile::Open(path));
  ModelEstimate e;
  e.path = path;
  e.gguf = true;
  e.weight_bytes = f.file_size();  // tensors stay in their stored type, mapped
  IMPRESS_ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  auto name = f.GetString("general.name");
  e.name = name.ok() ? *name : fs::path(path).stem().string();
  auto get = [&](const std::string& key, int64_t fallback) -> Result<int64_t> {
    if (!f.Has(arch + "." + key)) {
      if (fallback >= 0) return fallback;
      return Status::InvalidArgument(path + ": metadata key '" + arch + "." + key + "' is missing");
    }
    return f.GetInt(arch + "." + key);
  };
  IMPRESS_ASSIGN_OR_RETURN(const int64_t n_embd, get("embedding_length", -1));
  IMPRESS_ASSIGN_OR_RETURN(const int64_t n_layer, get("block_count", -1));
  IMPRESS_ASSIGN_OR_RETURN(const int64_t n_head, get("attention.head_count", -1));
  IMPRESS_ASSIGN_OR_RETURN(const int64_t n_head_kv, get("attention.head_count_kv", n_head));
  IMPRESS_ASSIGN_OR_RETURN(const int64_t n_ctx, get("context_length", 4096));
  if (n_head <= 0) return Status::InvalidArgument(path + ": attention.head_count is not positive");
  IMPRESS_ASSIGN_OR_RETURN(const int64_t head_dim, get("attention.key_length", n_embd / n_head));
  if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_ctx <= 0 || n_layer > 1 << 16 || n_head_kv > 1 << 16 ||
      head_dim > 1 << 16 || n_ctx > 1 << 24)
    return Status::InvalidArgument(path + ": the model's shape is out of range");
  e.n_layer = int(n_layer);
  e.n_head_kv = int(n_head_kv);
  e.head_dim = int(head_dim);
  e.n_ctx = int(n_ctx);
  return e;
}

Result<ModelEstimate> EstimateHf(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json");
  if (!in) return Status::NotFound(dir + " has no config.json (not a Hugging Face model folder)");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument(dir + "/config.json is not a JSON object");
  auto num = [&](const char* key, int64_t fallback) -> int64_t {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
  };
  ModelEstimate e;
  e.path = dir;
  e.name = fs::path(dir).filename().string();
  const int64_t n_embd = num("hidden_size", -1), n_head = num("num_attention_heads", -1);
  e.n_layer = int(num("num_hidden_layers", -1));
  e.n_head_kv = int(num("num_key_value_heads", n_head));
  e.head_dim = int(num("head_dim", n_head > 0 ? n_embd / n_head : -1));
  e.n_ctx = int(num("max_position_embeddings", 2048));
  if (n_embd <= 0 || n_head <= 0 || e.n_layer <= 0 || e.n_head_kv <= 0 || e.head_dim <= 0 || e.n_ctx <= 0)
    return Status::InvalidArgument(dir +
                                   "/config.json lacks the model's shape (hidden_size, num_attention_heads, ...)");
  // Hugging Face weights are loaded as fp32: F16/BF16 files double.
  const std::string dtype = j.value("torch_dtype", std::string("float32"));
  const uint64_t widen = (dtype == "float16" || dtype == "bfloat16") ? 2 : 1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") e.weight_bytes += widen * entry.file_size(ec);
  if (e.weight_bytes == 0) return Status::NotFound(dir + " has no .safetensors weights");
  return e;
}

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<ModelEstimate> EstimateModel(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return EstimateHf(path);
  if (!fs::exists(path, ec)) return Status::NotFound("no such model file: " + path);
  return EstimateGguf(path);
}

Result<uint64_t> MemAvailableBytes() {
  if (const char* fake = std::getenv("IMPRESS_MEM_AVAILABLE_MB"); fake && *fake) {
    char* end = nullptr;
    const double mb = std::strtod(fake, &end);
    if (end == fake || *end != '\0' || !(mb >= 0))
      return Status::InvalidArgument(std::string("IMPRESS_MEM_AVAILABLE_MB is not a number of MiB: ") + fake);
    return uint64_t(mb * double(1 << 20));
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return Status::Unsupported("MemAvailable is not in /proc/meminfo");
}

FitCheck CheckFit(const ModelEstimate& e, uint64_t available, uint64_t released) {
  FitCheck c;
  const uint64_t room = available + released;
  c.fits = e.total_bytes() <= room;
  c.summary = fmt::format("needs {} (weights {} + KV {} for {} tokens); {} available{}", FormatBytes(e.total_bytes()),
                          FormatBytes(e.weight_bytes), FormatBytes(e.kv_bytes()), e.n_ctx, FormatBytes(available),
                          released ? fmt::format(" + {} freed by the current model", FormatBytes(released)) : "");
  return c;
}

Result<std::vector<BrowserEntry>> ListModelDirectory(const std::string& dir, const std::string& filter) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  const std::string want = Lower(filter);
  std::vector<BrowserEntry> dirs, files;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (!want.empty() && Lower(name).find(want) == std::string::npos) continue;
    std::error_code e2;
    BrowserEntry b;
    b.name = name;
    b.path = entry.path().string();
    if (entry.is_directory(e2)) {
      b.kind =
          fs::exists(entry.path() / "config.json", e2) ? BrowserEntry::Kind::kHfFolder : BrowserEntry::Kind::kDirectory;
      dirs.push_back(std::move(b));
    } else if (Lower(entry.path().extension().string()) == ".gguf") {
      b.kind = BrowserEntry::Kind::kGguf;
      b.bytes = entry.file_size(e2);
      files.push_back(std::move(b));
    }
  }
  auto by_name = [](const BrowserEntry& a, const BrowserEntry& b) { return a.name < b.name; };
  std::sort(dirs.begin(), dirs.end(), by_name);
  std::sort(files.begin(), files.end(), by_name);
  std::vector<BrowserEntry> out;
  const fs::path p = fs::path(dir).lexically_normal();
  if (p.has_relative_path() && p.relative_path() != ".") {
    fs::path parent = (p.filename().empty() ? p.parent_path() : p).parent_path();
    out.push_back({BrowserEntry::Kind::kParent, "..", parent.string(), 0});
  }
  out.insert(out.end(), dirs.begin(), dirs.end());
  out.insert(out.end(), files.begin(), files.end());
  return out;
}

std::vector<std::string> LoadRecentModels(const std::string& file) {
  std::ifstream in(file);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> out;
  if (!j.is_object() || !j.contains("recent") || !j["recent"].is_array()) return out;
  for (const auto& v : j["recent"])
    if (v.is_string() && out.size() < kMaxRecentModels) out.push_back(v.get<std::string>());
  return out;
}

Status RememberModel(const std::string& file, const std::string& path) {
  std::vector<std::string> recent = LoadRecentModels(file);
  recent.erase(std::remove(recent.begin(), recent.end(), path), recent.end());
  recent.insert(recent.begin(), path);
  if (recent.size() > kMaxRecentModels) recent.resize(kMaxRecentModels);
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << nlohmann::json{{"recent", recent}}.dump(2) << "\n";
    if (!out.flush()) return Status::IOError("cannot write " + tmp);
  }
  fs::rename(tmp, file, ec);
  if (ec) return Status::IOError("cannot replace " + file + ": " + ec.message());
  return Status::Ok();
}

}  // namespace impress::gui
