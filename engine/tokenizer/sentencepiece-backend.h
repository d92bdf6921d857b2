// SentencePieceBackend: a tokenizer.model run by libsentencepiece (private to the tokenizer).
//
// Open() loads the model and fills a TokenizerVocab (pieces, scores, types, special ids) so
// that Decode, Piece and the special-token map work as for any other vocabulary; Encode()
// hands text segments to libsentencepiece, which applies the model's own normalizer.
// Immutable after Open; Encode may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace impress {

class SentencePieceBackend {
 public:
  // Loads `path` and fills *vocab (kind kSentencePiece, sp_backend set).
  static Status Open(const std::string& path, TokenizerVocab* vocab);
  ~SentencePieceBackend();

  void Encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  SentencePieceBackend();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace impress
