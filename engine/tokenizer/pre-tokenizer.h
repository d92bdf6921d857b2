// Pre-tokenizers: split text into the pieces that BPE then encodes one at a time, exactly as
// the reference regexes of the supported models do (hand-written matchers, no regex engine):
//   kGpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kDigitsGpt2   every \p{N} alone (HF Digits(individual_digits)), the rest as kGpt2
//                 (SmolLM2 / StarCoder: GGUF tokenizer.ggml.pre = "smollm", "starcoder", ...)
//   kLlama3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (Llama-3/3.1/3.2: GGUF tokenizer.ggml.pre = "llama-bpe", ...)
//   kQwen2  the Llama-3 regex with \p{N} (one digit per piece) for \p{N}{1,3}
//           (Qwen2/2.5: GGUF tokenizer.ggml.pre = "qwen2")
//   kNone   the whole text is one piece
// Invalid UTF-8 bytes are single "other" characters (neither letter, number nor space).
//
// Pure functions: callable from any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace impress {

enum class PreTokenizerType { kNone, kGpt2, kDigitsGpt2, kLlama3, kQwen2 };

const char* PreTokenizerName(PreTokenizerType t);

struct TextSpan {
  uint32_t offset, length;  // bytes into the text
};

// Appends the pieces of `text` to *out; offsets are relative to text.data(). The pieces
// cover the text exactly, in order.
void PreTokenize(PreTokenizerType type, std::string_view text, std::vector<TextSpan>* out);

}  // namespace impress
