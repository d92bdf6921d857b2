// Chat templates: turn a conversation into the prompt text a model was trained on.
//
// A model's own template (GGUF tokenizer.chat_template or tokenizer_config.json chat_template)
// is rendered by the Jinja interpreter (jinja.h), byte for byte as transformers renders it.
// A template the interpreter cannot parse or run falls back, with a logged warning, to the
// built-in format its markers name:
//   kChatMl  <|im_start|>role\ncontent<|im_end|>\n ... (SmolLM2, Qwen); the model's default
//            system prompt, when its template inserts one, is taken from the template text.
//   kLlama2  <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
//   kLlama3  <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>...
//   kPlain   "System\n\nUser: ...\nAssistant: ...\n" (OPT and base models without a template)
// The format (from the markers) also names the stop strings when the template is rendered.
// Render the text and its markup ranges, then EncodeTemplated it (add_bos = renders_bos() ?
// false : the tokenizer's default): the messages' content stays literal text, only the
// template's own markers become special tokens.
//
// Immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace impress {

class Tokenizer;
struct ByteRange;
namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama2, kLlama3, kPlain };
const char* ChatFormatName(ChatFormat f);

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatFormat format = ChatFormat::kPlain, std::string default_system = "",
                        std::string bos_text = "<s>", std::string eos_text = "</s>");

  // The template of a Jinja source, rendered by the interpreter when it parses and renders a
  // probe conversation; the format from its markers ("<|im_start|>" -> ChatML, "[INST]" ->
  // Llama-2, "<|start_header_id|>" -> Llama-3, otherwise plain; "opt" is always plain).
  static ChatTemplate FromMetadata(std::string_view jinja_source, std::string_view arch, std::string bos_text = "<s>",
                                   std::string eos_text = "</s>");
  // FromMetadata on the tokenizer's template and arch; a vocabulary with <|im_start|> and
  // <|im_end|> tokens but no template is ChatML. bos/eos texts come from the vocabulary.
  static ChatTemplate ForTokenizer(const Tokenizer& tokenizer);

  ChatFormat format() const { return format_; }
  const std::string& default_system_prompt() const { return default_system_; }
  // True when Render() writes the bos token itself (Llama-2, Llama-3, templates that print
  // bos_token): do not add another.
  bool renders_bos() const;
  // True when Render() runs the model's own Jinja template (not a built-in format).
  bool renders_jinja() const { return jinja_ != nullptr; }

  // The prompt text. add_generation_prompt appends the opening of the assistant's turn.
  // `markup` (optional) receives the byte ranges the template wrote itself (role markers,
  // bos/eos, separators), in order; everything else is the messages' content. A Jinja
  // template that fails on these messages (raise_exception) falls back to the built-in format.
  std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     std::vector<ByteRange>* markup = nullptr) const;

  // Texts that end the assistant's turn: generation stops when one appears in the output.
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }
  // Token ids that end the turn for this template: the tokenizer's end-of-generation ids
  // plus the stop strings that are single tokens of the vocabulary.
  std::vector<int32_t> StopTokens(const Tokenizer& tokenizer) const;

 private:
  ChatFormat format_;
  std::string default_system_;
  std::string bos_text_, eos_text_;
  std::vector<std::string> stop_strings_;
  std::shared_ptr<const jinja::Template> jinja_;  // null: the built-in format
  bool jinja_renders_bos_ = false;

  std::string RenderBuiltIn(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            std::vector<ByteRange>* markup) const;
};

}  // namespace impress
