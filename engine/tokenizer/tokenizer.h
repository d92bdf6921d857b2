// Tokenizer: text <-> token ids for the supported model families.
//
//   kBytePairBpe  byte-level BPE (GPT-2 style: SmolLM2, GPT-2, OPT, Llama-3): a pre-tokenizer
//                 (pre-tokenizer.h) splits the text, each piece's bytes are merged by rank.
//   kSentencePiece  SentencePiece-style BPE (Llama-2): spaces become U+2581, an optional
//                 leading space, score-ordered merges, unknown characters fall back to
//                 <0xXX> byte tokens. From GGUF (tokenizer.ggml.model = "llama") this runs our
//                 own merge loop; from a tokenizer.model it runs libsentencepiece.
// Special (added/control) tokens are matched in the text before pre-tokenization when
// Encode's parse_special is set (user-defined added tokens always are). Text from users and
// documents is encoded with EncodeLiteral / EncodeTemplated instead: there no added token is
// ever matched, so typed or attached text cannot inject control tokens; only a chat
// template's own markup (the byte ranges it reports) may become special tokens.
//
// Loading: Load() takes a .gguf file or a Hugging Face folder (tokenizer.json; vocab.json +
// merges.txt; or tokenizer.model). Every id and string read from the files is checked; bad
// files give an error naming the file, the key and what was wrong.
//
// Thread contract: a Tokenizer is immutable after loading; all const methods may be called
// from any thread at once. A StreamDecoder is a small per-stream object (one thread at a time).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "engine/tokenizer/merge-table.h"
#include "engine/tokenizer/pre-tokenizer.h"
#include "engine/tokenizer/string-index.h"

namespace impress {

class GgufFile;

enum class TokenizerKind { kBytePairBpe, kSentencePiece };

// [begin, end) byte offsets into a text (chat templates report their markup as these).
struct ByteRange {
  size_t begin = 0, end = 0;
};

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: <|im_start|>, <s>, </s>
  kUserDefined = 4,  // added tokens that are always matched in the text
  kUnused = 5,
  kByte = 6,  // SentencePiece byte fallback <0xXX>
};

// What the model's files recommend for generation: GGUF general.sampling.* keys, or a Hugging
// Face folder's generation_config.json. Each setting is unset when absent or out of range.
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repeat_penalty;
  std::optional<int> top_k;
  bool any() const { return temperature || top_p || min_p || repeat_penalty || top_k; }
};

// Plain vocabulary data: what FromGguf / FromHfFolder read, and what tests may build directly.
struct TokenizerVocab {
  TokenizerKind kind = TokenizerKind::kBytePairBpe;
  PreTokenizerType pre = PreTokenizerType::kGpt2;           // byte-level BPE only
  std::vector<std::string> tokens;                          // as stored: byte-level chars (BPE) or U+2581 pieces (SPM)
  std::vector<float> scores;                                // SPM merge scores (empty: all 0)
  std::vector<TokenType> types;                             // empty: all kNormal
  std::vector<std::pair<std::string, std::string>> merges;  // BPE, in rank order
  struct AddedToken {                                       // tokenizer.json added_tokens (strip flags of HF)
    int32_t id = -1;
    bool lstrip = false, rstrip = false;
  };
  std::vector<AddedToken> added;  // extra properties; their types say control/user-defined
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  bool add_bos = false;            // what the model expects by default
  bool add_space_prefix = true;    // SPM: prepend a space to the text (dummy prefix)
  bool ignore_merges = false;      // BPE: a piece that is a whole token is not merged (Llama-3)
  std::string chat_template;       // Jinja source from the metadata, may be empty
  std::string arch;                // "llama", "opt", ... when the source says
  GenerationDefaults generation;   // the model's recommended sampling
  std::vector<int32_t> extra_eog;  // more end-of-generation ids (config eos_token_id lists)
  // Set when loaded from a tokenizer.model: Encode runs libsentencepiece on text segments.
  std::shared_ptr<const class SentencePieceBackend> sp_backend;
};

class Tokenizer {
 public:
  // `model_path`: a .gguf file, or a folder with tokenizer.json / vocab.json+merges.txt /
  // tokenizer.model.
  static Result<Tokenizer> Load(const std::string& model_path);
  static Result<Tokenizer> FromGguf(const GgufFile& gguf);
  static Result<Tokenizer> FromHfFolder(const std::string& dir);
  // Validates and indexes `vocab`. `source` names it in errors ("model.gguf").
  static Result<Tokenizer> FromVocab(TokenizerVocab vocab, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Never fails: invalid UTF-8 bytes are encoded as bytes (byte-level BPE, SPM byte
  // fallback) or as unk. add_bos prepends bos (when the vocabulary has one).
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;
  // The same ids, reporting (bytes done, text.size(), "tokenizing") to `progress` about every
  // 256 KiB of text (for ingesting large documents). Its return value is ignored: encoding
  // always finishes.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special,
                              const ProgressFn& progress) const;

  // `text` as literal text: no added token (control or user-defined) is matched, so the ids
  // hold no control token that the vocabulary's merges do not spell. For document text, file
  // names and anything the user typed. `progress` as for Encode.
  std::vector<int32_t> EncodeLiteral(std::string_view text, bool add_bos = false,
                                     const ProgressFn& progress = ProgressFn()) const;
  // A rendered prompt: added tokens are matched only where they lie wholly inside one of the
  // `markup` ranges (the template's own text, sorted, not overlapping); every other byte is
  // literal. Text segments are split exactly where Encode(text, add_bos, true) splits them, so
  // a prompt whose content holds no special-token text gets the same ids as that call.
  std::vector<int32_t> EncodeTemplated(std::string_view text, bool add_bos, const std::vector<ByteRange>& markup) const;

  // Concatenated pieces (raw bytes, not necessarily valid UTF-8). SPM drops the dummy-prefix
  // space of the first token. Ids out of range are skipped. skip_special drops control tokens.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The bytes token `id` decodes to (empty for an id out of range).
  const std::string& Piece(int32_t id) const;
  // The token as stored in the vocabulary (byte-level chars / U+2581), for debugging.
  const std::string& TokenText(int32_t id) const;
  // Exact lookup of a stored token string; -1 when absent.
  int32_t TokenId(std::string_view token_text) const;

  int32_t n_vocab() const { return int32_t(pieces_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t unk_id() const { return unk_; }
  int32_t pad_id() const { return pad_; }
  int32_t eot_id() const { return eot_; }
  bool add_bos_default() const { return add_bos_; }
  TokenizerKind kind() const { return kind_; }
  PreTokenizerType pre_tokenizer() const { return pre_; }
  TokenType token_type(int32_t id) const;
  bool IsSpecial(int32_t id) const;  // control token

  // eos, eot, eom and control tokens such as <|im_end|>, <|eot_id|>, <|endoftext|>.
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // Text -> id of the control and user-defined tokens (the ones parse_special matches).
  const std::unordered_map<std::string, int32_t>& special_tokens() const { return special_map_; }

  const std::string& chat_template() const { return chat_template_; }
  const std::string& arch() const { return arch_; }
  const GenerationDefaults& generation_defaults() const { return generation_; }
  const std::string& source() const { return source_; }

  // Merge steps done by byte-level BPE since construction (all threads): a work counter for
  // tests of the linear-time behaviour. Relaxed atomic, approximate under concurrency.
  uint64_t bpe_merge_steps() const;

 private:
  Tokenizer();
  struct Special {
    std::string text;
    int32_t id;
    bool always;  // user-defined: matched even without parse_special
    bool lstrip, rstrip;
  };
  using MergeInfo = BpeMerge;

  // Which added tokens Encode* may match: all (parse_special), user-defined only, or any
  // lying inside `markup` ranges only.
  enum class SpecialMatch { kAll, kUserDefined, kMarkupOnly };
  std::vector<int32_t> EncodeImpl(std::string_view text, bool add_bos, SpecialMatch match,
                                  const std::vector<ByteRange>* markup, const ProgressFn* report) const;
  // `progress` (may be null) gets bytes done counted from `base` within the whole text.
  void EncodeText(std::string_view text, bool first_segment, std::vector<int32_t>* out,
                  const ProgressFn* progress = nullptr, size_t base = 0, size_t total = 0) const;
  // EncodeText through SegmentCache for long segments (a prompt's documents).
  void EncodeSegment(std::string_view text, bool first_segment, std::vector<int32_t>* out, const ProgressFn* progress,
                     size_t base, size_t total) const;
  void EncodeBpePiece(std::string_view piece, std::vector<int32_t>* out) const;
  void EncodeSpm(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;

  TokenizerKind kind_ = TokenizerKind::kBytePairBpe;
  PreTokenizerType pre_ = PreTokenizerType::kGpt2;
  std::string source_;
  std::vector<std::string> texts_;   // stored token strings
  std::vector<std::string> pieces_;  // decoded bytes
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  // Views into texts_ and pieces_ (their strings stay in place when the tokenizer moves).
  StringIndex text_to_id_;                    // stored string -> id
  StringIndex piece_to_id_;                   // decoded bytes -> id of normal (and SPM user-defined) tokens
  MergeTable merges_;                         // (left id, right id) -> rank and merged token
  int32_t byte_to_id_[256];                   // BPE: single-byte tokens; SPM: <0xXX> (-1: none)
  std::vector<Special> specials_;             // longest first
  std::vector<uint16_t> special_first_[256];  // indexes into specials_ by first byte
  std::unordered_map<std::string, int32_t> special_map_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1, eot_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = true;
  bool ignore_merges_ = false;
  std::string chat_template_;
  std::string arch_;
  GenerationDefaults generation_;
  std::shared_ptr<const SentencePieceBackend> sp_;  // set when loaded from tokenizer.model
  std::unique_ptr<std::atomic<uint64_t>> merge_steps_;
  // The ids of the last few long text segments: every question of a conversation renders the
  // same documents into its prompt (twice: the prompt, and the prefix without the question), so
  // they are tokenized once. Its own lock; the tokenizer stays callable from any thread.
  struct SegmentCache;
  std::unique_ptr<SegmentCache> segment_cache_;
};

// Turns a stream of token ids into text that is always whole UTF-8: bytes of a character
// split across tokens are held back until it completes; bytes that can never become valid
// UTF-8 come out as U+FFFD. Flush() returns what is left at the end of the stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true) :
      tok_(&tokenizer), skip_special_(skip_special) {}
  std::string Push(int32_t id);
  std::string Flush();

 private:
  std::string Drain(bool final);
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace impress
