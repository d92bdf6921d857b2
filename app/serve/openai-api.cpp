#include "app/serve/openai-api.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "engine/tokenizer/chat-template.h"
#include "engine/tokenizer/tokenizer.h"
#include "pipeline/system-policy.h"

namespace impress::serve {
namespace {

using nlohmann::json;

ApiError Invalid(std::string message, std::string param = "", std::string code = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError WrongType(const std::string& param, const char* want) {
  return Invalid(fmt::format("'{}' must be {}", param, want), param, "invalid_type");
}

// A JSON object body, or the error. Only objects are requests.
std::optional<ApiError> ParseBody(std::string_view body, json* out) {
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Invalid("the request body is not valid JSON", "", "invalid_json");
  if (!out->is_object()) return Invalid("the request body must be a JSON object", "", "invalid_json");
  return std::nullopt;
}

// The fields both endpoints share: model, max_tokens, sampling, stop, stream, impress.
std::optional<ApiError> ParseCommon(const json& j, CompletionRequest* r) {
  if (j.contains("model")) {
    if (!j["model"].is_string()) return WrongType("model", "a string");
    r->model = j["model"].get<std::string>();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number_integer()) return WrongType(key, "an integer");
    const int64_t n = j[key].get<int64_t>();
    if (n <= 0) return Invalid(fmt::format("'{}' must be at least 1, got {}", key, n), key, "invalid_value");
    r->max_tokens = int(std::min<int64_t>(n, 1 << 30));
  }
  auto number = [&](const char* key, double lo, double hi, std::optional<float>* out) -> std::optional<ApiError> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) return WrongType(key, "a number");
    const double v = j[key].get<double>();
    if (!(v >= lo && v <= hi)) {
      return Invalid(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v), key, "invalid_value");
    }
    *out = float(v);
    return std::nullopt;
  };
  if (auto e = number("temperature", 0, 2, &r->temperature)) return e;
  if (auto e = number("top_p", 0, 1, &r->top_p)) return e;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return WrongType("seed", "an integer");
    r->seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : uint64_t(j["seed"].get<int64_t>());
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r->stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& e : s) {
        if (!e.is_string()) return WrongType("stop", "a string or an array of strings");
        r->stop.push_back(e.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings");
    }
    if (r->stop.size() > 4) return Invalid("'stop' takes at most 4 sequences", "stop", "invalid_value");
    std::erase_if(r->stop, [](const std::string& x) { return x.empty(); });
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return WrongType("stream", "a boolean");
    r->stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return WrongType("stream_options", "an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean()) return WrongType("stream_options.include_usage", "a boolean");
      r->include_usage = so["include_usage"].get<bool>();
    }
  }
  if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) return Invalid("only n = 1 is supported", "n");
  // Parameters that would change the answer if honoured: refused rather than ignored.
  for (const char* key : {"logit_bias", "tools", "tool_choice", "functions", "function_call", "response_format"}) {
    if (!j.contains(key) || j[key].is_null() || (j[key].is_structured() && j[key].empty())) continue;
    if (std::string_view(key) == "response_format" && j[key].is_object() && j[key].value("type", "") == "text") {
      continue;  // the default
    }
    return Invalid(fmt::format("'{}' is not supported by this server", key), key, "unsupported_parameter");
  }
  if (j.contains("impress") && !j["impress"].is_null()) {
    const json& x = j["impress"];
    if (!x.is_object()) return WrongType("impress", "an object");
    if (x.contains("system")) {
      SystemKind kind;
      if (!x["system"].is_string() || !ParseSystem(x["system"].get<std::string>(), &kind)) {
        return Invalid("'impress.system' must be one of " + SystemNames(", "), "impress.system", "invalid_value");
      }
      r->impress.system = kind;
    }
    if (x.contains("keep")) {
      if (!x["keep"].is_number() || !(x["keep"].get<double>() > 0 && x["keep"].get<double>() <= 1)) {
        return Invalid("'impress.keep' must be a number in (0, 1]", "impress.keep", "invalid_value");
      }
      r->impress.keep = x["keep"].get<float>();
    }
    if (x.contains("alpha")) {
      if (!x["alpha"].is_number() || !(x["alpha"].get<double>() >= 0 && x["alpha"].get<double>() <= 8)) {
        return Invalid("'impress.alpha' must be a number in [0, 8]", "impress.alpha", "invalid_value");
      }
      r->impress.alpha = x["alpha"].get<float>();
    }
    if (x.contains("report")) {
      if (!x["report"].is_boolean()) return WrongType("impress.report", "a boolean");
      r->impress.report = x["report"].get<bool>();
    }
  }
  return std::nullopt;
}

// Message content: a string, or a list of {"type": "text", "text": ...} parts joined.
std::optional<ApiError> ContentText(const json& content, const std::string& param, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param, "a string or an array of text parts");
  out->clear();
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Invalid(fmt::format("'{}' parts must be {{\"type\": \"text\", \"text\": string}}", param), param,
                     "invalid_type");
    }
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

json ErrorJson(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::optional<ApiError> ParseChatRequest(std::string_view body, CompletionRequest* r) {
  *r = CompletionRequest{};
  json j;
  if (auto e = ParseBody(body, &j)) return e;
  if (!j.contains("messages")) return Invalid("'messages' is required", "messages", "missing_required_parameter");
  const json& m = j["messages"];
  if (!m.is_array()) return WrongType("messages", "an array");
  if (m.empty()) return Invalid("'messages' must not be empty", "messages", "invalid_value");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    if (!m[i].is_object()) return WrongType(param, "an object");
    if (!m[i].contains("role") || !m[i]["role"].is_string()) return WrongType(param + ".role", "a string");
    std::string role = m[i]["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant") {
      return Invalid(fmt::format("'{}.role' must be system, user or assistant, got '{}'", param, role), param + ".role",
                     "invalid_value");
    }
    if (!m[i].contains("content")) return Invalid(fmt::format("'{}.content' is required", param), param + ".content");
    ChatMessage msg{role, ""};
    if (auto e = ContentText(m[i]["content"], param + ".content", &msg.content)) return e;
    r->messages.push_back(std::move(msg));
  }
  r->chat = true;
  return ParseCommon(j, r);
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* r) {
  *r = CompletionRequest{};
  json j;
  if (auto e = ParseBody(body, &j)) return e;
  if (!j.contains("prompt")) return Invalid("'prompt' is required", "prompt", "missing_required_parameter");
  const json& p = j["prompt"];
  if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r->prompt = p[0].get<std::string>();
  } else if (p.is_string()) {
    r->prompt = p.get<std::string>();
  } else {
    return WrongType("prompt", "a string");
  }
  if (r->prompt.empty()) return Invalid("'prompt' must not be empty", "prompt", "invalid_value");
  r->chat = false;
  return ParseCommon(j, r);
}

std::optional<ApiError> CheckModel(const std::string& requested, const std::string& model_id) {
  if (requested.empty() || requested == model_id || requested == "impress") return std::nullopt;
  return ApiError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", requested, model_id),
                  "invalid_request_error", "model", "model_not_found"};
}

std::optional<ApiError> CheckApiKey(const std::vector<std::string>& api_keys, const std::string& authorization,
                                    int* which) {
  if (which) *which = -1;
  if (api_keys.empty()) return std::nullopt;
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view given = std::string_view(authorization).starts_with(kBearer)
                                     ? std::string_view(authorization).substr(kBearer.size())
                                     : std::string_view();
  for (size_t i = 0; i < api_keys.size(); ++i) {
    const std::string& key = api_keys[i];
    // Every byte compared, whatever differs first: the time does not tell a prefix of the key.
    unsigned char diff = given.size() == key.size() ? 0 : 1;
    for (size_t b = 0; b < key.size(); ++b) diff |= (b < given.size() ? given[b] : 0) ^ key[b];
    if (diff == 0 && !key.empty()) {
      if (which) *which = int(i);
      return std::nullopt;
    }
  }
  return ApiError{401,
                  authorization.empty() ? "no API key given (Authorization: Bearer KEY)" : "the API key is not valid",
                  "invalid_request_error", "", "invalid_api_key"};
}

std::string ModelId(const std::string& model_path) {
  std::filesystem::path p(model_path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "folder/"
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

std::optional<ApiError> BuildRequestPrompt(const CompletionRequest& r, const Tokenizer& tokenizer,
                                           const ChatTemplate& chat, PromptTokens* out) {
  Conversation conv;
  std::string question;
  bool raw = false;
  if (r.chat) {
    if (r.messages.back().role != "user") {
      return Invalid("the last message must be the user's", fmt::format("messages[{}]", r.messages.size() - 1));
    }
    size_t first = 0;
    if (r.messages.front().role == "system") {
      conv.set_system_prompt(r.messages.front().content);
      first = 1;
    }
    for (size_t i = first; i + 1 < r.messages.size(); ++i) conv.AddTurn(r.messages[i].role, r.messages[i].content);
    question = r.messages.back().content;
  } else {
    raw = true;
    const size_t cut = r.prompt.rfind("\n\n");
    if (cut == std::string::npos) {
      question = r.prompt;
    } else {
      Document doc;
      doc.name = "prompt";
      doc.text = r.prompt.substr(0, cut);
      conv.AddDocument(std::move(doc));
      question = r.prompt.substr(cut + 2);
    }
  }
  *out = conv.Build(question, tokenizer, chat, raw);
  // A question that carries its own material (a document pasted before it, a blank line, then
  // what to do with it) reuses that material too: the prefix extends to the last blank line.
  // The tokens stay those of the whole prompt; only where reuse stops moves.
  const size_t cut = r.chat ? question.rfind("\n\n") : std::string::npos;
  if (cut != std::string::npos && cut > 0) {
    const PromptTokens head = conv.Build(question.substr(0, cut + 2), tokenizer, chat, raw);
    const int shared =
        int(std::mismatch(head.tokens.begin(), head.tokens.end(), out->tokens.begin(), out->tokens.end()).first -
            head.tokens.begin());
    out->n_prefix = std::max(out->n_prefix, shared);
  }
  if (out->tokens.empty()) return Invalid("the prompt has no tokens", r.chat ? "messages" : "prompt");
  out->n_prefix = std::min(out->n_prefix, int(out->tokens.size()) - 1);  // at least one token is computed
  return std::nullopt;
}

std::optional<ApiError> AnswerBudget(int n_prompt, int n_ctx, std::optional<int> requested, int default_max,
                                     int* max_tokens) {
  if (n_prompt >= n_ctx) {
    return ApiError{400,
                    fmt::format("the prompt is {} tokens long, but the model's context is {} tokens", n_prompt, n_ctx),
                    "invalid_request_error", "messages", "context_length_exceeded"};
  }
  *max_tokens = std::min(requested.value_or(default_max), n_ctx - n_prompt);
  return std::nullopt;
}

std::string StopMatcher::Push(std::string_view piece) {
  if (stopped_) return "";
  held_ += piece;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is the beginning of a stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"impress_attention", u.attention}};
}

const char* FinishReason(bool ended_by_model, bool stop_string, std::string_view stop_reason) {
  return ended_by_model || stop_string || stop_reason == "repetition" ? "stop" : "length";
}

json ChatCompletionJson(const ResponseId& rid, const std::string& text, const char* finish_reason, const Usage& usage,
                        const json* report) {
  json j = {{"id", rid.id},
            {"object", "chat.completion"},
            {"created", rid.created},
            {"model", rid.model},
            {"choices",
             {{{"index", 0},
               {"message", {{"role", "assistant"}, {"content", text}}},
               {"logprobs", nullptr},
               {"finish_reason", finish_reason}}}},
            {"usage", UsageJson(usage)}};
  if (report) j["impress_report"] = *report;
  return j;
}

json TextCompletionJson(const ResponseId& rid, const std::string& text, const char* finish_reason, const Usage& usage,
                        const json* report) {
  json j = {{"id", rid.id},
            {"object", "text_completion"},
            {"created", rid.created},
            {"model", rid.model},
            {"choices", {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}}},
            {"usage", UsageJson(usage)}};
  if (report) j["impress_report"] = *report;
  return j;
}

json ChatChunkJson(const ResponseId& rid, const std::string* role, const std::string* content,
                   const char* finish_reason, bool usage_null) {
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  json j = {{"id", rid.id},
            {"object", "chat.completion.chunk"},
            {"created", rid.created},
            {"model", rid.model},
            {"choices",
             {{{"index", 0},
               {"delta", delta},
               {"logprobs", nullptr},
               {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}}}};
  if (usage_null) j["usage"] = nullptr;
  return j;
}

json TextChunkJson(const ResponseId& rid, const std::string& text, const char* finish_reason, bool usage_null) {
  json j = {{"id", rid.id},
            {"object", "text_completion"},
            {"created", rid.created},
            {"model", rid.model},
            {"choices",
             {{{"index", 0},
               {"text", text},
               {"logprobs", nullptr},
               {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}}}}};
  if (usage_null) j["usage"] = nullptr;
  return j;
}

json UsageChunkJson(const ResponseId& rid, bool chat, const Usage& usage) {
  return {{"id", rid.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", rid.created},
          {"model", rid.model},
          {"choices", json::array()},
          {"usage", UsageJson(usage)}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

json ModelsJson(const std::string& model_id, int64_t created) {
  return {{"object", "list"},
          {"data", {{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "impress"}}}}};
}

}  // namespace impress::serve
