#include "engine/tokenizer/chat-template.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/tokenizer/jinja.h"
#include "engine/tokenizer/tokenizer.h"

namespace impress {
namespace {

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
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kPlain: return "plain";
  }
  return "?";
}

ChatTemplate::ChatTemplate(ChatFormat format, std::string default_system, std::string bos_text, std::string eos_text) :
    format_(format),
    default_system_(std::move(default_system)),
    bos_text_(std::move(bos_text)),
    eos_text_(std::move(eos_text)) {
  switch (format_) {
    case ChatFormat::kChatMl: stop_strings_ = {"<|im_end|>", "<|im_start|>"}; break;
    case ChatFormat::kLlama2: stop_strings_ = {eos_text_, "[INST]"}; break;
    case ChatFormat::kLlama3: stop_strings_ = {"<|eot_id|>", "<|eom_id|>", "<|start_header_id|>"}; break;
    case ChatFormat::kPlain: stop_strings_ = {"\nUser:"}; break;
  }
}

ChatTemplate ChatTemplate::FromMetadata(std::string_view src, std::string_view arch, std::string bos_text,
                                        std::string eos_text) {
  ChatFormat format = ChatFormat::kPlain;  // OPT and every model without a recognised template
  std::string default_system;
  if (arch != "opt") {
    if (src.find("<|im_start|>") != std::string_view::npos) {
      format = ChatFormat::kChatMl;
      default_system = ExtractDefaultSystem(src);
    } else if (src.find("[INST]") != std::string_view::npos) {
      format = ChatFormat::kLlama2;
    } else if (src.find("<|start_header_id|>") != std::string_view::npos) {
      format = ChatFormat::kLlama3;
    }
  }
  ChatTemplate t(format, std::move(default_system), std::move(bos_text), std::move(eos_text));
  if (src.empty()) return t;
  auto parsed = jinja::Template::Parse(src);
  if (!parsed.ok()) {
    spdlog::warn("the model's chat template cannot be rendered ({}); using the built-in {} format",
                 parsed.status().ToString(), ChatFormatName(format));
    return t;
  }
  t.jinja_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  // A probe conversation: a template that cannot render the conversations we build (an
  // unsupported filter in the main path) is no better than an unparsable one.
  const std::vector<ChatMessage> probe = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "Q"}};
  std::vector<ByteRange> markup;
  std::string rendered;
  for (bool gen : {true, false}) {
    jinja::Dict vars;
    jinja::List msgs;
    for (const ChatMessage& m : probe) {
      msgs.push_back(
          jinja::Value::MakeDict({{"role", jinja::Value::Str(m.role)}, {"content", jinja::Value::Data(m.content)}}));
    }
    vars = {{"messages", jinja::Value::MakeList(std::move(msgs))},
            {"add_generation_prompt", jinja::Value::Bool(gen)},
            {"bos_token", jinja::Value::Str(t.bos_text_)},
            {"eos_token", jinja::Value::Str(t.eos_text_)}};
    auto r = t.jinja_->Render(vars);
    if (!r.ok()) {
      spdlog::warn("the model's chat template fails on a plain conversation ({}); using the built-in {} format",
                   r.status().ToString(), ChatFormatName(format));
      t.jinja_.reset();
      return t;
    }
    if (gen) rendered = std::move(*r);
  }
  // The template writes the bos itself when it prints bos_token first (Llama-2/3); a template
  // whose first marker merely equals the bos text (SmolLM2's <|im_start|>) leaves it to the
  // tokenizer's rule, as before.
  t.jinja_renders_bos_ =
      src.find("bos_token") != std::string_view::npos && !t.bos_text_.empty() && rendered.starts_with(t.bos_text_);
  return t;
}

ChatTemplate ChatTemplate::ForTokenizer(const Tokenizer& tok) {
  const std::string bos = tok.bos_id() >= 0 ? tok.Piece(tok.bos_id()) : "<s>";
  const std::string eos = tok.eos_id() >= 0 ? tok.Piece(tok.eos_id()) : "</s>";
  if (tok.arch() != "opt" && tok.chat_template().empty() && tok.TokenId("<|im_start|>") >= 0 &&
      tok.TokenId("<|im_end|>") >= 0) {
    return ChatTemplate(ChatFormat::kChatMl, "", bos, eos);
  }
  return FromMetadata(tok.chat_template(), tok.arch(), bos, eos);
}

bool ChatTemplate::renders_bos() const {
  if (jinja_) return jinja_renders_bos_;
  return format_ == ChatFormat::kLlama2 || format_ == ChatFormat::kLlama3;
}

namespace {

// The prompt being rendered: template text (markup) and message content, appended in order.
class PromptWriter {
 public:
  explicit PromptWriter(std::vector<ByteRange>* markup) : markup_(markup) {}
  void Markup(std::string_view s) {
    if (s.empty()) return;
    if (markup_) {
      if (!markup_->empty() && markup_->back().end == out_.size()) {
        markup_->back().end += s.size();
      } else {
        markup_->push_back({out_.size(), out_.size() + s.size()});
      }
    }
    out_.append(s);
  }
  void Content(std::string_view s) { out_.append(s); }
  std::string Take() { return std::move(out_); }

 private:
  std::vector<ByteRange>* markup_;
  std::string out_;
};

// Pieces of one Llama-2 turn (true: markup), stripped at both ends as Python's str.strip()
// strips their concatenation (the ASCII whitespace that occurs in chat text).
using Pieces = std::vector<std::pair<std::string, bool>>;
void StripPieces(Pieces* pieces) {
  const std::string ws = " \t\n\r\v\f";
  for (auto& [text, markup] : *pieces) {
    const size_t b = text.find_first_not_of(ws);
    text.erase(0, b == std::string::npos ? text.size() : b);
    if (!text.empty()) break;
  }
  for (auto it = pieces->rbegin(); it != pieces->rend(); ++it) {
    const size_t e = it->first.find_last_not_of(ws);
    it->first.erase(e == std::string::npos ? 0 : e + 1);
    if (!it->first.empty()) break;
  }
}
void Write(const Pieces& pieces, PromptWriter* w) {
  for (const auto& [text, markup] : pieces) markup ? w->Markup(text) : w->Content(text);
}

}  // namespace

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 std::vector<ByteRange>* markup) const {
  if (markup) markup->clear();
  if (jinja_) {
    // The context transformers gives a template: messages, bos/eos texts, the flag. Contents
    // are data: they never become markup.
    jinja::List msgs;
    for (const ChatMessage& m : messages) {
      msgs.push_back(
          jinja::Value::MakeDict({{"role", jinja::Value::Str(m.role)}, {"content", jinja::Value::Data(m.content)}}));
    }
    const jinja::Dict vars = {{"messages", jinja::Value::MakeList(std::move(msgs))},
                              {"add_generation_prompt", jinja::Value::Bool(add_generation_prompt)},
                              {"bos_token", jinja::Value::Str(bos_text_)},
                              {"eos_token", jinja::Value::Str(eos_text_)}};
    std::vector<ByteRange> data;
    auto text = jinja_->Render(vars, &data);
    if (text.ok()) {
      if (markup) {
        size_t at = 0;
        for (const ByteRange& d : data) {
          if (d.begin > at) markup->push_back({at, d.begin});
          at = d.end;
        }
        if (at < text->size()) markup->push_back({at, text->size()});
      }
      return std::move(*text);
    }
    spdlog::warn("the model's chat template failed ({}); using the built-in {} format", text.status().ToString(),
                 ChatFormatName(format_));
  }
  return RenderBuiltIn(messages, add_generation_prompt, markup);
}

std::string ChatTemplate::RenderBuiltIn(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                        std::vector<ByteRange>* markup) const {
  PromptWriter w(markup);
  switch (format_) {
    case ChatFormat::kChatMl: {
      if (!default_system_.empty() && (messages.empty() || messages[0].role != "system") && !messages.empty()) {
        w.Markup("<|im_start|>system\n");
        w.Content(default_system_);
        w.Markup("<|im_end|>\n");
      }
      for (const auto& m : messages) {
        w.Markup("<|im_start|>" + m.role + "\n");
        w.Content(m.content);
        w.Markup("<|im_end|>\n");
      }
      if (add_generation_prompt) w.Markup("<|im_start|>assistant\n");
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
        Pieces content;
        if (i == first && has_system) {
          content = {{"<<SYS>>\n", true}, {system, false}, {"\n<</SYS>>\n\n", true}};
        }
        content.push_back({messages[i].content, false});
        StripPieces(&content);
        if (messages[i].role == "user") {
          w.Markup(bos_text_ + "[INST] ");
          Write(content, &w);
          w.Markup(" [/INST]");
        } else if (messages[i].role == "assistant") {
          w.Markup(" ");
          Write(content, &w);
          w.Markup(" " + eos_text_);
        }
      }
      break;  // the prompt already ends with [/INST]: nothing to add for generation
    }
    case ChatFormat::kLlama3: {
      // Meta's Llama-3 format: every message in a header block, contents trimmed as the
      // template's `| trim` does.
      w.Markup(bos_text_);
      for (const auto& m : messages) {
        w.Markup("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        Pieces content = {{m.content, false}};
        StripPieces(&content);
        Write(content, &w);
        w.Markup("<|eot_id|>");
      }
      if (add_generation_prompt) w.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case ChatFormat::kPlain: {
      for (const auto& m : messages) {
        if (m.role == "system") {
          w.Content(m.content);
          w.Markup("\n\n");
        } else if (m.role == "user") {
          w.Markup("User: ");
          w.Content(m.content);
          w.Markup("\n");
        } else {
          w.Markup("Assistant: ");
          w.Content(m.content);
          w.Markup("\n");
        }
      }
      if (add_generation_prompt) w.Markup("Assistant:");
      break;
    }
  }
  return w.Take();
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
