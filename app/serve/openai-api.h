// The OpenAI-compatible request and response shapes of `impress serve`, as plain functions that
// need no socket: parsing and validating request bodies, the error object, prompts from
// messages, stop strings, and the JSON / Server-Sent-Events bodies of responses. The HTTP layer
// (app/serve/server.h) only moves bytes between these and the model worker.
//
// Pure functions and value types; any thread. StopMatcher requires external synchronization.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/conversation.h"
#include "pipeline/report.h"

namespace impress {
class Tokenizer;
class ChatTemplate;
}  // namespace impress

namespace impress::serve {

// An OpenAI-style error: the HTTP status and the body's {"error": {message, type, param, code}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};
nlohmann::json ErrorJson(const ApiError& e);

// The optional "impress" object of a request: per-request IMPRESS settings and the report.
struct ImpressExtensions {
  std::optional<SystemKind> system;
  std::optional<float> keep, alpha;
  bool report = false;  // the response carries "impress_report" (RequestReportJson)
};

// A validated /v1/chat/completions or /v1/completions request.
struct CompletionRequest {
  bool chat = true;
  std::string model;                  // as given; empty when absent
  std::vector<ChatMessage> messages;  // chat: system/user/assistant, content as text
  std::string prompt;                 // completions
  std::optional<int> max_tokens;      // > 0 when set
  std::optional<float> temperature, top_p;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // at most 4, none empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  ImpressExtensions impress;
};

// Parses and validates a body. Returns the error (400: malformed JSON, wrong types, missing or
// empty messages/prompt, max_tokens <= 0, a bad "impress" object, a parameter this server does
// not implement: logit_bias, tools, functions; code "unsupported_parameter") or nothing,
// filling *out.
std::optional<ApiError> ParseChatRequest(std::string_view body, CompletionRequest* out);
std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out);

// 404 unless `requested` is empty or names the served model (its id, or "impress").
std::optional<ApiError> CheckModel(const std::string& requested, const std::string& model_id);

// 401 when keys are configured and `authorization` is not "Bearer <one of them>" (compared in
// time independent of where they differ). *which (optional): the key's index, -1 without keys.
std::optional<ApiError> CheckApiKey(const std::vector<std::string>& api_keys, const std::string& authorization,
                                    int* which = nullptr);

// The served model's id: the model file's name without its extension (a folder: its name).
std::string ModelId(const std::string& model_path);

// The prompt of a request, laid out as the chat session lays out a conversation so the store
// reuses it: chat: the first system message is the system prompt, the last message (which must
// be the user's) is the question, the messages between are earlier turns; the reusable prefix
// is everything before the question, and when the question has a blank line ("\n\n": material
// pasted before the request proper), everything up to its last one. Completions: raw text, the prefix ends at the last
// blank line ("\n\n"). Message text is tokenized literally (no special tokens from user text). Errors: 400 when the
// last chat message is not the user's.
std::optional<ApiError> BuildRequestPrompt(const CompletionRequest& request, const Tokenizer& tokenizer,
                                           const ChatTemplate& chat, PromptTokens* out);

// The tokens an answer may use: min(requested or default, n_ctx - n_prompt); 400 naming both
// lengths when the prompt leaves no room.
std::optional<ApiError> AnswerBudget(int n_prompt, int n_ctx, std::optional<int> requested, int default_max,
                                     int* max_tokens);

// Cuts generated text at the first stop string. Push returns the text that may be shown now,
// holding back a tail that could still begin a stop string; after a stop string appears,
// stopped() is set and nothing more is returned. Flush returns what is held back at the end.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string Push(std::string_view piece);
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // "full" or "selected" (RequestReport::selected_attention): whether the answer attended to all
  // of the reused prefix; reported as usage.impress_attention in every response.
  std::string attention = "full";
};
nlohmann::json UsageJson(const Usage& u);

// "stop" when the model ended its turn, a stop string appeared or the repetition guard ended a
// loop (ChatAnswer::stop_reason "repetition": the answer is over, asking for more would loop);
// otherwise "length" (max tokens, or the context is full).
const char* FinishReason(bool ended_by_model, bool stop_string, std::string_view stop_reason = {});

// Identity of one response: its id ("chatcmpl-..." / "cmpl-..."), creation time (Unix s), model.
struct ResponseId {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// Whole responses (non-streaming). `report` (optional) is added as "impress_report".
nlohmann::json ChatCompletionJson(const ResponseId& rid, const std::string& text, const char* finish_reason,
                                  const Usage& usage, const nlohmann::json* report = nullptr);
nlohmann::json TextCompletionJson(const ResponseId& rid, const std::string& text, const char* finish_reason,
                                  const Usage& usage, const nlohmann::json* report = nullptr);

// Streaming chunks. Chat: the first carries delta.role, text chunks delta.content, the last an
// empty delta and finish_reason; with include_usage every chunk has "usage": null and a final
// chunk has empty choices and the usage. Completions: choices[0].text.
nlohmann::json ChatChunkJson(const ResponseId& rid, const std::string* role, const std::string* content,
                             const char* finish_reason, bool usage_null);
nlohmann::json TextChunkJson(const ResponseId& rid, const std::string& text, const char* finish_reason,
                             bool usage_null);
nlohmann::json UsageChunkJson(const ResponseId& rid, bool chat, const Usage& usage);

// One Server-Sent Event carrying `j`, and the stream's end.
std::string SseEvent(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// JSON text for a response body (invalid UTF-8 replaced, never thrown on).
std::string Dump(const nlohmann::json& j);

nlohmann::json ModelsJson(const std::string& model_id, int64_t created);

}  // namespace impress::serve
