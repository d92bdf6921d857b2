// Chat templates: turn a conversation into the prompt text a model was trained on.
//
// Three formats, chosen from the model's metadata (GGUF tokenizer.chat_template or
// tokenizer_config.json chat_template; we recognise the format by its markers rather than
// running Jinja):
//   kChatMl  <|im_start|>role\ncontent<|im_end|>\n ... (SmolLM2, Qwen); the model's default
//            system prompt, when its template inserts one, is taken from the template text.
//   kLlama2  <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
//   kPlain   "System\n\nUser: ...\nAssistant: ...\n" (OPT and base models without a template)
// Render the text and its markup ranges, then EncodeTemplated it (add_bos = renders_bos() ?
// false : the tokenizer's default): the messages' content stays literal text, only the
// template's own markers become special tokens.
//
// Immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace impress {

class Tokenizer;
struct ByteRange;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama2, kPlain };
const char* ChatFormatName(ChatFormat f);

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatFormat format = ChatFormat::kPlain, std::string default_system = "",
                        std::string bos_text = "<s>", std::string eos_text = "</s>");

  // Picks the format from a Jinja template source and the architecture ("opt" -> plain):
  // "<|im_start|>" -> ChatML, "[INST]" -> Llama-2, otherwise plain.
  static ChatTemplate FromMetadata(std::string_view jinja_source, std::string_view arch);
  // FromMetadata on the tokenizer's template and arch; a vocabulary with <|im_start|> and
  // <|im_end|> tokens but no template is ChatML. bos/eos texts come from the vocabulary.
  static ChatTemplate ForTokenizer(const Tokenizer& tokenizer);

  ChatFormat format() const { return format_; }
  const std::string& default_system_prompt() const { return default_system_; }
  // True when Render() writes the bos token itself (Llama-2): do not add another.
  bool renders_bos() const { return format_ == ChatFormat::kLlama2; }

  // The prompt text. add_generation_prompt appends the opening of the assistant's turn.
  // `markup` (optional) receives the byte ranges the template wrote itself (role markers,
  // bos/eos, separators), in order; everything else is the messages' content.
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
};

}  // namespace impress
