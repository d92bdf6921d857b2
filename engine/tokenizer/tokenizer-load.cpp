// Tokenizer loading: GGUF metadata (tokenizer.ggml.*) and Hugging Face folders
// (tokenizer.json; vocab.json + merges.txt; tokenizer.model via libsentencepiece).
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/json-file.h"
#include "engine/model/mapped-file.h"
#include "engine/tokenizer/sentencepiece-backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace impress {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The pre-tokenizer regexes as Hugging Face tokenizer.json files spell them (Split pattern).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreName {
  const char* name;
  PreTokenizerType type;
  bool ignore_merges;
};
// GGUF tokenizer.ggml.pre values (llama.cpp's names) whose regexes we implement.
constexpr PreName kGgufPre[] = {
    {"default", PreTokenizerType::kGpt2, false},      {"gpt-2", PreTokenizerType::kGpt2, false},
    {"gpt2", PreTokenizerType::kGpt2, false},         {"phi-2", PreTokenizerType::kGpt2, false},
    {"roberta-bpe", PreTokenizerType::kGpt2, false},  {"olmo", PreTokenizerType::kGpt2, false},
    {"smollm", PreTokenizerType::kDigitsGpt2, false}, {"starcoder", PreTokenizerType::kDigitsGpt2, false},
    {"refact", PreTokenizerType::kDigitsGpt2, false}, {"codeshell", PreTokenizerType::kDigitsGpt2, false},
    {"llama3", PreTokenizerType::kLlama3, true},      {"llama-v3", PreTokenizerType::kLlama3, true},
    {"llama-bpe", PreTokenizerType::kLlama3, true},   {"falcon3", PreTokenizerType::kLlama3, true},
    {"dbrx", PreTokenizerType::kLlama3, false},       {"smaug-bpe", PreTokenizerType::kLlama3, false},
    {"qwen2", PreTokenizerType::kQwen2, false},       {"deepseek-r1-qwen", PreTokenizerType::kQwen2, false},
    {"megrez", PreTokenizerType::kQwen2, false},
};

std::string SupportedPreNames() {
  std::string s;
  for (const auto& p : kGgufPre) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

Result<std::string> ReadFile(const fs::path& path) { return ReadRegularFile(path.string(), kMaxJsonFileBytes); }

Result<json> ReadJson(const fs::path& path) { return ReadJsonFile(path.string()); }

// Whether the folder has an entry at `path`, of any type (a dangling link or a link loop too:
// reading it then says what is wrong, rather than the file being silently skipped).
bool Present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

// An optional integer id key of a GGUF file: -1 when absent.
Result<int32_t> GgufOptionalId(const GgufFile& g, const char* key) {
  if (!g.Has(key)) return int32_t(-1);
  auto v = g.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < 0 || *v > INT32_MAX) {
    return Status::Corruption(g.path() + ": " + key + " = " + std::to_string(*v) + " is not a token id");
  }
  return int32_t(*v);
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::string TokenContent(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

// A recommended sampling setting, kept when inside [lo, hi] (a hostile or odd file cannot
// set a temperature of 1e9 or a negative top-p).
template <class T>
void SetIfIn(double x, double lo, double hi, std::optional<T>* out) {
  if (std::isfinite(x) && x >= lo && x <= hi) *out = T(x);
}

// HF generation_config.json's sampling fields. do_sample is not read: export tools write the
// library's default (false) into files whose model cards recommend sampling.
void ReadGenerationConfig(const json& j, GenerationDefaults* g) {
  auto number = [&](const char* key, double lo, double hi, auto* out) {
    if (j.contains(key) && j[key].is_number()) SetIfIn(j[key].get<double>(), lo, hi, out);
  };
  number("temperature", 0, 10, &g->temperature);
  number("top_p", 0, 1, &g->top_p);
  number("min_p", 0, 1, &g->min_p);
  number("top_k", 0, 1 << 20, &g->top_k);
  number("repetition_penalty", 0.5, 5, &g->repeat_penalty);
}

// GGUF general.sampling.* (the keys llama.cpp's converter writes from generation_config.json).
Status ReadGgufSampling(const GgufFile& g, GenerationDefaults* out) {
  auto number = [&](const char* key, double lo, double hi, auto* dst) -> Status {
    if (!g.Has(key)) return Status::Ok();
    auto x = g.GetFloat(key);
    if (!x.ok()) return x.status();
    SetIfIn(*x, lo, hi, dst);
    return Status::Ok();
  };
  IMPRESS_RETURN_IF_ERROR(number("general.sampling.temp", 0, 10, &out->temperature));
  IMPRESS_RETURN_IF_ERROR(number("general.sampling.top_p", 0, 1, &out->top_p));
  IMPRESS_RETURN_IF_ERROR(number("general.sampling.min_p", 0, 1, &out->min_p));
  IMPRESS_RETURN_IF_ERROR(number("general.sampling.top_k", 0, 1 << 20, &out->top_k));
  IMPRESS_RETURN_IF_ERROR(number("general.sampling.penalty_repeat", 0.5, 5, &out->repeat_penalty));
  return Status::Ok();
}

// Reads tokenizer_config.json, special_tokens_map.json, config.json and generation_config.json
// of a folder (all optional) into the vocabulary: chat template, special ids, add_bos, arch,
// more end-of-generation ids.
Status ApplyFolderConfigsImpl(const fs::path& dir, TokenizerVocab* v, bool* add_bos_set) {
  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < v->tokens.size(); ++i) {
      if (v->tokens[i] == text) return int32_t(i);
    }
    return -1;
  };
  auto apply_special_names = [&](const json& j) {
    struct {
      const char* key;
      int32_t* id;
    } names[] = {{"bos_token", &v->bos}, {"eos_token", &v->eos}, {"unk_token", &v->unk}, {"pad_token", &v->pad}};
    for (auto& n : names) {
      if (!j.contains(n.key)) continue;
      const int32_t id = id_of(TokenContent(j[n.key]));
      if (id >= 0) *n.id = id;
    }
  };
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const fs::path p = dir / name;
    if (!Present(p)) continue;
    IMPRESS_ASSIGN_OR_RETURN(json j, ReadJson(p));
    if (!j.is_object()) return Status::Corruption(p.string() + ": expected a JSON object");
    // added_tokens_decoder: {"50256": {"content": ..., "special": true}}: mark them.
    if (j.contains("added_tokens_decoder") && j["added_tokens_decoder"].is_object()) {
      for (const auto& [k, t] : j["added_tokens_decoder"].items()) {
        const std::string content = TokenContent(t);
        char* end = nullptr;
        const long id = std::strtol(k.c_str(), &end, 10);
        if (content.empty() || *end != 0 || id < 0 || size_t(id) >= v->tokens.size() || v->tokens[id] != content) {
          continue;
        }
        const bool special = t.value("special", false);
        if (v->types[id] == TokenType::kNormal) v->types[id] = special ? TokenType::kControl : TokenType::kUserDefined;
      }
    }
    apply_special_names(j);
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) {
      v->add_bos = j["add_bos_token"].get<bool>();
      *add_bos_set = true;
    }
    if (j.contains("chat_template")) {
      const json& ct = j["chat_template"];
      if (ct.is_string()) {
        v->chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& e : ct) {
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
              e["template"].is_string()) {
            v->chat_template = e["template"].get<std::string>();
          }
        }
      }
    }
  }
  for (const char* name : {"config.json", "generation_config.json"}) {
    const fs::path p = dir / name;
    if (!Present(p)) continue;
    IMPRESS_ASSIGN_OR_RETURN(json j, ReadJson(p));
    if (!j.is_object()) return Status::Corruption(p.string() + ": expected a JSON object");
    if (j.contains("model_type") && j["model_type"].is_string()) v->arch = j["model_type"].get<std::string>();
    if (std::string_view(name) == "generation_config.json") ReadGenerationConfig(j, &v->generation);
    if (j.contains("eos_token_id")) {
      const json& e = j["eos_token_id"];
      auto add = [&](const json& x) {
        if (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < int64_t(v->tokens.size())) {
          v->extra_eog.push_back(int32_t(x.get<int64_t>()));
        }
      };
      if (e.is_array()) {
        for (const auto& x : e) add(x);
      } else {
        add(e);
      }
    }
  }
  // Some architectures prepend their BOS to every prompt (OPT: </s>): the table says.
  const ArchSpec* arch = FindHfModelType(v->arch);
  if (arch && arch->hf_add_bos && !*add_bos_set) {
    v->add_bos = true;
    *add_bos_set = true;
  }
  return Status::Ok();
}

Status ApplyFolderConfigs(const fs::path& dir, TokenizerVocab* v, bool* add_bos_set) {
  try {
    return ApplyFolderConfigsImpl(dir, v, add_bos_set);
  } catch (const json::exception& e) {
    return Status::Corruption(dir.string() + ": a config file has an unexpected structure: " + e.what());
  }
}

// Classifies a tokenizer.json pre_tokenizer for a byte-level BPE.
Status ParsePreTokenizer(const json& pt, const std::string& where, TokenizerVocab* v) {
  auto unsupported = [&](const std::string& what) {
    return Status::Unsupported(where + ": pre_tokenizer " + what +
                               " is not supported (supported: ByteLevel; Digits(individual_digits) + "
                               "ByteLevel; Split(GPT-2, Llama-3 or Qwen2 regex) + ByteLevel)");
  };
  auto is_type = [](const json& j, const char* t) { return j.is_object() && j.value("type", "") == t; };
  auto check_byte_level = [&](const json& bl, bool expect_regex) -> Status {
    if (bl.value("add_prefix_space", false)) return unsupported("ByteLevel with add_prefix_space");
    if (bl.value("use_regex", true) != expect_regex) {
      return unsupported(expect_regex ? "ByteLevel without its regex" : "a Split followed by a regex ByteLevel");
    }
    return Status::Ok();
  };
  if (is_type(pt, "ByteLevel")) {
    IMPRESS_RETURN_IF_ERROR(check_byte_level(pt, true));
    v->pre = PreTokenizerType::kGpt2;
    return Status::Ok();
  }
  if (!is_type(pt, "Sequence") || !pt.contains("pretokenizers") || !pt["pretokenizers"].is_array() ||
      pt["pretokenizers"].size() != 2) {
    return unsupported(pt.is_null() ? "null" : pt.dump().substr(0, 200));
  }
  const json& a = pt["pretokenizers"][0];
  const json& b = pt["pretokenizers"][1];
  if (!is_type(b, "ByteLevel")) return unsupported(pt.dump().substr(0, 200));
  if (is_type(a, "Digits") && a.value("individual_digits", false)) {
    IMPRESS_RETURN_IF_ERROR(check_byte_level(b, true));
    v->pre = PreTokenizerType::kDigitsGpt2;
    return Status::Ok();
  }
  if (is_type(a, "Split") && a.contains("pattern") && a["pattern"].is_object() && a["pattern"].contains("Regex") &&
      a["pattern"]["Regex"].is_string() && a.value("behavior", "") == "Isolated") {
    IMPRESS_RETURN_IF_ERROR(check_byte_level(b, false));
    const std::string pat = a["pattern"]["Regex"].get<std::string>();
    if (pat == kGpt2Pattern) {
      v->pre = PreTokenizerType::kGpt2;
      return Status::Ok();
    }
    if (pat == kLlama3Pattern) {
      v->pre = PreTokenizerType::kLlama3;
      return Status::Ok();
    }
    if (pat == kQwen2Pattern) {
      v->pre = PreTokenizerType::kQwen2;
      return Status::Ok();
    }
    return unsupported("Split with regex " + pat);
  }
  return unsupported(pt.dump().substr(0, 200));
}

Result<Tokenizer> FromTokenizerJson(const fs::path& dir) {
  const fs::path path = dir / "tokenizer.json";
  const std::string where = path.string();
  IMPRESS_ASSIGN_OR_RETURN(json j, ReadJson(path));
  TokenizerVocab v;
  try {
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
      return Status::Corruption(where + ": no \"model\" object");
    }
    const json& model = j["model"];
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") return Status::Unsupported(where + ": model type " + type + " is not supported (only BPE)");
    const bool byte_level =
        (j.contains("pre_tokenizer") && j["pre_tokenizer"].dump().find("\"ByteLevel\"") != std::string::npos) ||
        (j.contains("decoder") && j["decoder"].dump().find("\"ByteLevel\"") != std::string::npos);
    if (!byte_level) {
      // SentencePiece-style BPE converted to tokenizer.json (Metaspace / byte_fallback): the
      // exact reference is the tokenizer.model next to it.
      if (Present(dir / "tokenizer.model")) return Tokenizer::FromHfFolder((dir / "tokenizer.model").string());
      return Status::Unsupported(where +
                                 ": a non-byte-level BPE (SentencePiece-style) tokenizer.json without a "
                                 "tokenizer.model next to it is not supported");
    }
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      return Status::Unsupported(where + ": normalizer " + j["normalizer"].value("type", std::string("?")) +
                                 " is not supported for byte-level BPE");
    }
    IMPRESS_RETURN_IF_ERROR(ParsePreTokenizer(j.value("pre_tokenizer", json()), where, &v));
    if (!model.contains("vocab") || !model["vocab"].is_object()) {
      return Status::Corruption(where + ": model.vocab is not an object");
    }
    // ids may have holes; the vocabulary is as large as the largest id + 1.
    int64_t max_id = -1;
    for (const auto& [text, id] : model["vocab"].items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX) {
        return Status::Corruption(where + ": model.vocab[\"" + text + "\"] is not a valid id");
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
    const json added = j.value("added_tokens", json::array());
    if (!added.is_array()) return Status::Corruption(where + ": added_tokens is not an array");
    for (const auto& a : added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() >= INT32_MAX || !a.contains("content") || !a["content"].is_string()) {
        return Status::Corruption(where + ": an added_tokens entry lacks a valid id or content");
      }
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
    if (max_id < 0) return Status::Corruption(where + ": the vocabulary is empty");
    if (max_id >= (int64_t(1) << 24)) {
      return Status::Corruption(where + ": token id " + std::to_string(max_id) + " is absurdly large");
    }
    const size_t n = size_t(max_id) + 1;
    v.tokens.assign(n, std::string());
    v.types.assign(n, TokenType::kUnused);
    for (const auto& [text, id] : model["vocab"].items()) {
      v.tokens[id.get<int64_t>()] = text;
      v.types[id.get<int64_t>()] = TokenType::kNormal;
    }
    for (const auto& a : added) {
      const int32_t id = int32_t(a["id"].get<int64_t>());
      v.tokens[id] = a["content"].get<std::string>();
      v.types[id] = a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      v.added.push_back({id, a.value("lstrip", false), a.value("rstrip", false)});
    }
    if (model.contains("merges") && model["merges"].is_array()) {
      for (const auto& m : model["merges"]) {
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          const size_t sp = s.find(' ', 1);
          if (sp == std::string::npos) return Status::Corruption(where + ": merge \"" + s + "\" has no space");
          v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
          return Status::Corruption(where + ": a merge is neither \"a b\" nor [a, b]");
        }
      }
    }
    v.ignore_merges = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string unk = model["unk_token"].get<std::string>();
      for (size_t i = 0; i < n; ++i) {
        if (v.tokens[i] == unk) v.unk = int32_t(i);
      }
    }
    // post_processor TemplateProcessing that starts with a special token: it is the bos.
    bool add_bos_set = false;
    if (j.contains("post_processor") && j["post_processor"].is_object()) {
      const std::string pp = j["post_processor"].dump();
      const json& p = j["post_processor"];
      const json* tp = nullptr;
      if (p.value("type", "") == "TemplateProcessing") tp = &p;
      if (p.value("type", "") == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
        for (const auto& q : p["processors"]) {
          if (q.is_object() && q.value("type", "") == "TemplateProcessing") tp = &q;
        }
      }
      if (tp && tp->contains("single") && (*tp)["single"].is_array() && !(*tp)["single"].empty()) {
        const json& first = (*tp)["single"][0];
        if (first.is_object() && first.contains("SpecialToken")) {
          const std::string bos = first["SpecialToken"].value("id", "");
          for (size_t i = 0; i < n; ++i) {
            if (!bos.empty() && v.tokens[i] == bos) v.bos = int32_t(i);
          }
          v.add_bos = v.bos >= 0;
          add_bos_set = true;
        }
      }
    }
    IMPRESS_RETURN_IF_ERROR(ApplyFolderConfigs(dir, &v, &add_bos_set));
  } catch (const json::exception& e) {
    return Status::Corruption(where + ": unexpected structure: " + e.what());
  }
  v.kind = TokenizerKind::kBytePairBpe;
  return Tokenizer::FromVocab(std::move(v), where);
}

Result<Tokenizer> FromVocabJsonAndMerges(const fs::path& dir) {
  const fs::path vpath = dir / "vocab.json", mpath = dir / "merges.txt";
  IMPRESS_ASSIGN_OR_RETURN(json vj, ReadJson(vpath));
  if (!vj.is_object()) return Status::Corruption(vpath.string() + ": expected an object of token -> id");
  TokenizerVocab v;
  int64_t max_id = -1;
  for (const auto& [text, id] : vj.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t(1) << 24)) {
      return Status::Corruption(vpath.string() + ": \"" + text + "\" has no valid id");
    }
    max_id = std::max(max_id, id.get<int64_t>());
  }
  // added_tokens.json: {"<|endoftext|>": 50256, ...}
  json added = json::object();
  if (Present(dir / "added_tokens.json")) {
    IMPRESS_ASSIGN_OR_RETURN(added, ReadJson(dir / "added_tokens.json"));
    if (!added.is_object()) return Status::Corruption((dir / "added_tokens.json").string() + ": expected an object");
    for (const auto& [text, id] : added.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t(1) << 24)) {
        return Status::Corruption((dir / "added_tokens.json").string() + ": \"" + text + "\" has no valid id");
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
  }
  if (max_id < 0) return Status::Corruption(vpath.string() + ": the vocabulary is empty");
  const size_t n = size_t(max_id) + 1;
  v.tokens.assign(n, std::string());
  v.types.assign(n, TokenType::kUnused);
  for (const auto& [text, id] : vj.items()) {
    v.tokens[id.get<int64_t>()] = text;
    v.types[id.get<int64_t>()] = TokenType::kNormal;
  }
  for (const auto& [text, id] : added.items()) {
    v.tokens[id.get<int64_t>()] = text;
    v.types[id.get<int64_t>()] = TokenType::kControl;
  }
  IMPRESS_ASSIGN_OR_RETURN(std::string merges, ReadFile(mpath));
  std::istringstream in(merges);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) {
      return Status::Corruption(mpath.string() + ": line " + std::to_string(line_no) + " is not \"a b\"");
    }
    v.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  v.kind = TokenizerKind::kBytePairBpe;
  v.pre = PreTokenizerType::kGpt2;
  bool add_bos_set = false;
  IMPRESS_RETURN_IF_ERROR(ApplyFolderConfigs(dir, &v, &add_bos_set));
  // The named special tokens (bos/eos/unk/pad) are control tokens even in vocab.json.
  for (int32_t id : {v.bos, v.eos, v.pad}) {
    if (id >= 0) v.types[id] = TokenType::kControl;
  }
  if (v.unk >= 0) v.types[v.unk] = TokenType::kUnknown;
  return Tokenizer::FromVocab(std::move(v), vpath.string());
}

}  // namespace

Result<Tokenizer> Tokenizer::FromGguf(const GgufFile& g) {
  const std::string& file = g.path();
  TokenizerVocab v;
  auto model = g.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model == "gpt2") {
    v.kind = TokenizerKind::kBytePairBpe;
  } else if (*model == "llama") {
    v.kind = TokenizerKind::kSentencePiece;
  } else {
    return Status::Unsupported(file + ": tokenizer.ggml.model = \"" + *model +
                               "\" is not supported (supported: gpt2, llama)");
  }
  auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  v.tokens = std::move(*tokens);
  const size_t n = v.tokens.size();
  if (g.Has("tokenizer.ggml.token_type")) {
    auto types = g.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    if (types->size() != n) {
      return Status::Corruption(file + ": tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                                " entries for " + std::to_string(n) + " tokens");
    }
    v.types.reserve(n);
    for (int32_t t : *types) v.types.push_back(TokenType(t));
  }
  if (g.Has("tokenizer.ggml.scores")) {
    auto scores = g.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    if (scores->size() != n) {
      return Status::Corruption(file + ": tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                                " entries for " + std::to_string(n) + " tokens");
    }
    v.scores = std::move(*scores);
  }
  if (v.kind == TokenizerKind::kBytePairBpe) {
    std::string pre = "default";
    if (g.Has("tokenizer.ggml.pre")) {
      auto p = g.GetString("tokenizer.ggml.pre");
      if (!p.ok()) return p.status();
      pre = *p;
    } else {
      spdlog::warn("{}: no tokenizer.ggml.pre; using the GPT-2 pre-tokenizer", file);
    }
    bool found = false;
    for (const auto& p : kGgufPre) {
      if (pre == p.name) {
        v.pre = p.type;
        v.ignore_merges = p.ignore_merges;
        found = true;
      }
    }
    if (!found) {
      return Status::Unsupported(file + ": tokenizer.ggml.pre = \"" + pre + "\" is not a supported pre-tokenizer (" +
                                 SupportedPreNames() + ")");
    }
    auto merges = g.GetStringViewArray("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status();
    v.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      std::string_view m = (*merges)[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) {
        return Status::Corruption(file + ": tokenizer.ggml.merges[" + std::to_string(i) + "] has no space");
      }
      v.merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
    }
  } else {
    v.pre = PreTokenizerType::kNone;
  }
  struct {
    const char* key;
    int32_t* id;
  } ids[] = {{"tokenizer.ggml.bos_token_id", &v.bos},     {"tokenizer.ggml.eos_token_id", &v.eos},
             {"tokenizer.ggml.unknown_token_id", &v.unk}, {"tokenizer.ggml.padding_token_id", &v.pad},
             {"tokenizer.ggml.eot_token_id", &v.eot},     {"tokenizer.ggml.eom_token_id", &v.eom}};
  for (auto& k : ids) {
    IMPRESS_ASSIGN_OR_RETURN(*k.id, GgufOptionalId(g, k.key));
    if (*k.id >= int64_t(n)) {
      return Status::Corruption(file + ": " + k.key + " = " + std::to_string(*k.id) + " is not a token id (n_vocab " +
                                std::to_string(n) + ")");
    }
  }
  v.add_bos = v.kind == TokenizerKind::kSentencePiece;
  if (g.Has("tokenizer.ggml.add_bos_token")) {
    auto b = g.GetBool("tokenizer.ggml.add_bos_token");
    if (!b.ok()) return b.status();
    v.add_bos = *b;
  }
  v.add_space_prefix = v.kind == TokenizerKind::kSentencePiece;
  if (g.Has("tokenizer.ggml.add_space_prefix")) {
    auto b = g.GetBool("tokenizer.ggml.add_space_prefix");
    if (!b.ok()) return b.status();
    v.add_space_prefix = *b;
  }
  if (v.kind == TokenizerKind::kBytePairBpe && v.add_space_prefix) {
    return Status::Unsupported(file + ": tokenizer.ggml.add_space_prefix = true with a gpt2 tokenizer");
  }
  if (g.Has("tokenizer.chat_template")) {
    auto t = g.GetString("tokenizer.chat_template");
    if (!t.ok()) return t.status();
    v.chat_template = *t;
  }
  if (g.Has("general.architecture")) {
    auto a = g.GetString("general.architecture");
    if (a.ok()) v.arch = *a;
  }
  if (Status st = ReadGgufSampling(g, &v.generation); !st.ok()) {
    return Status(st.code(), file + ": " + st.message());
  }
  return FromVocab(std::move(v), file);
}

Result<Tokenizer> Tokenizer::FromHfFolder(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  // A tokenizer.model passed directly (or found in the folder): libsentencepiece.
  if (p.filename() == "tokenizer.model" && !fs::is_directory(p, ec)) {
    uint64_t size = 0;  // a FIFO or link loop is refused here, before libsentencepiece opens it
    IMPRESS_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(p.string(), &size));
    ::close(fd);
    TokenizerVocab v;
    IMPRESS_RETURN_IF_ERROR(SentencePieceBackend::Open(p.string(), &v));
    bool add_bos_set = true;  // libsentencepiece's bos setting unless the folder says otherwise
    IMPRESS_RETURN_IF_ERROR(ApplyFolderConfigs(p.parent_path(), &v, &add_bos_set));
    return FromVocab(std::move(v), p.string());
  }
  if (!fs::is_directory(p, ec)) return Status::NotFound(path + ": not a folder");
  if (Present(p / "tokenizer.json")) return FromTokenizerJson(p);
  if (Present(p / "vocab.json") && Present(p / "merges.txt")) return FromVocabJsonAndMerges(p);
  if (Present(p / "tokenizer.model")) return FromHfFolder((p / "tokenizer.model").string());
  return Status::NotFound(path + ": no tokenizer.json, vocab.json + merges.txt, or tokenizer.model in the folder");
}

Result<Tokenizer> Tokenizer::Load(const std::string& model_path) {
  std::error_code ec;
  const fs::path p(model_path);
  if (fs::is_directory(p, ec)) return FromHfFolder(model_path);
  if (!Present(p)) return Status::NotFound(model_path + ": no such file or folder");
  if (p.filename() == "tokenizer.model") return FromHfFolder(model_path);
  auto g = GgufFile::Open(model_path);
  if (!g.ok()) return g.status();
  return FromGguf(*g);
}

}  // namespace impress
