#include "engine/tokenizer/chat-template.h"

#include <algorithm>

#include "engine/tokenizer/tokenizer.h"

namespace impress {
namespace {

// Python's str.strip() for the whitespace that occurs in chat text (ASCII and NBSP-free).
std::string Strip(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// The literal system prompt a ChatML template inserts when the conversation has none:
// the text between "<|im_start|>system\n" and "<|im_end|>" inside one Jinja string literal.
std::string ExtractDefaultSystem(std::string_view src) {
  if (src.find("!= 'system'") == std::string_view::npos && src.find("!= \"system\"") == std::string_view::npos) {
    return "";
  }
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t p = src.find(head);
    if (p == std::string_view::npos) continue;
    const size_t b = p + head.size();
    const size_t e = src.find("<|im_end|>", b);
    if (e == std::string_view::npos) return "";
    std::string_view body = src.substr(b, e - b);
    // A template that builds the prompt from variables is not a literal: no default.
    if (body.find('{') != std::string_view::npos || body.find('\'') != std::string_view::npos ||
        body.find('"') != std::string_view::npos || body.find('+') != std::string_view::npos) {
      return "";
    }
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') {
        out += '\n';
        ++i;
      } else {
        out += body[i];
      }
    }
    return out;
  }
  return "";
}

}  // namespace

const char* ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kPlain: return "plain";
  }
  return "?";
}

ChatTemplate::ChatTemplate(ChatFormat format, std::string default_system, std::string bos_text, std::string eos_text)
    : format_(format),
      default_system_(std::move(default_system)),
      bos_text_(std::move(bos_text)),
      eos_text_(std::move(eos_text)) {
  switch (format_) {
    case ChatFormat::kChatMl: stop_strings_ = {"<|im_end|>", "<|im_start|>"}; break;
    case ChatFormat::kLlama2: stop_strings_ = {eos_text_, "[INST]"}; break;
    case ChatFormat::kPlain: stop_strings_ = {"\nUser:"}; break;
  }
}

ChatTemplate ChatTemplate::FromMetadata(std::string_view src, std::string_view arch) {
  if (src.find("<|im_start|>") != std::string_view::npos) {
    return ChatTemplate(ChatFormat::kChatMl, ExtractDefaultSystem(src));
  }
  if (src.find("[INST]") != std::string_view::npos) return ChatTemplate(ChatFormat::kLlama2);
  (void)arch;  // OPT and every model without a recognised template: plain
  return ChatTemplate(ChatFormat::kPlain);
}

ChatTemplate ChatTemplate::ForTokenizer(const Tokenizer& tok) {
  ChatTemplate t = FromMetadata(tok.chat_template(), tok.arch());
  if (t.format_ == ChatFormat::kPlain && tok.arch() != "opt" && tok.chat_template().empty() &&
      tok.TokenId("<|im_start|>") >= 0 && tok.TokenId("<|im_end|>") >= 0) {
    t = ChatTemplate(ChatFormat::kChatMl);
  }
  const std::string bos = tok.bos_id() >= 0 ? tok.Piece(tok.bos_id()) : "<s>";
  const std::string eos = tok.eos_id() >= 0 ? tok.Piece(tok.eos_id()) : "</s>";
  return ChatTemplate(t.format_, t.default_system_, bos, eos);
}

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  switch (format_) {
    case ChatFormat::kChatMl: {
      if (!default_system_.empty() && (messages.empty() || messages[0].role != "system") && !messages.empty()) {
        out.append("<|im_start|>system\n").append(default_system_).append("<|im_end|>\n");
      }
      for (const auto& m : messages) {
        out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFormat::kLlama2: {
      // Meta's format: the system prompt goes inside the first [INST]; each exchange is
      // <s>[INST] user [/INST] answer </s>.
      size_t first = 0;
      std::string system;
      bool has_system = false;
      if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content;
        has_system = true;
        first = 1;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        std::string content;
        if (i == first && has_system) {
          content.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
        }
        content.append(messages[i].content);
        if (messages[i].role == "user") {
          out.append(bos_text_).append("[INST] ").append(Strip(content)).append(" [/INST]");
        } else if (messages[i].role == "assistant") {
          out.append(" ").append(Strip(content)).append(" ").append(eos_text_);
        }
      }
      break;  // the prompt already ends with [/INST]: nothing to add for generation
    }
    case ChatFormat::kPlain: {
      for (const auto& m : messages) {
        if (m.role == "system") {
          out.append(m.content).append("\n\n");
        } else if (m.role == "user") {
          out.append("User: ").append(m.content).append("\n");
        } else {
          out.append("Assistant: ").append(m.content).append("\n");
        }
      }
      if (add_generation_prompt) out += "Assistant:";
      break;
    }
  }
  return out;
}

std::vector<int32_t> ChatTemplate::StopTokens(const Tokenizer& tok) const {
  std::vector<int32_t> ids = tok.eog_ids();
  for (const auto& s : stop_strings_) {
    const int32_t id = tok.TokenId(s);
    if (id >= 0 && tok.IsSpecial(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace impress
