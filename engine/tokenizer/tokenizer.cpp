// Tokenizer core: vocabulary indexing, special-token splitting, byte-level BPE, SentencePiece
// BPE, decoding. Loading from files is in tokenizer-load.cpp.
#include "engine/tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <exception>
#include <queue>
#include <thread>

#include "base/mutex.h"
#include "engine/tokenizer/sentencepiece-backend.h"
#include "engine/tokenizer/unicode.h"

namespace impress {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// GPT-2's byte <-> char map: printable bytes stand for themselves, the others are shifted to
// U+0100.. so every byte is a visible character in the vocabulary files.
struct ByteLevelMap {
  static constexpr uint32_t kChars = 512;  // every character of the map is below U+0200
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[kChars];  // -1: not a character of the map
  ByteLevelMap() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t(-1));
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
      cp_to_byte[byte_to_cp[b]] = int16_t(b);
    }
  }
};
const ByteLevelMap& ByteMap() {
  static const ByteLevelMap m;
  return m;
}

// Byte-level token text -> bytes. False when a character is outside the map.
bool ByteLevelDecode(std::string_view text, std::string* out) {
  const auto& m = ByteMap();
  out->clear();
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    i += DecodeUtf8(text, i, &cp);
    if (cp >= ByteLevelMap::kChars || m.cp_to_byte[cp] < 0) return false;
    out->push_back(char(m.cp_to_byte[cp]));
  }
  return true;
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) AppendUtf8(ByteMap().byte_to_cp[b], &s);
  return s;
}

// "<0x0A>" -> 10; -1 when it is not of that form.
int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string_view::npos) break;
    out.append(s.substr(i, j - i));
    out.append(to);
    i = j + from.size();
  }
  out.append(s.substr(i));
  return out;
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

const std::string kEmpty;

// Steps between asking the caches for what an insert or a lookup will touch and doing it.
constexpr size_t kAhead = 8;

// Inserts the keys of ids [0, n) that `want` takes into `index` in id order (the first of
// duplicates wins), the slot of each asked of the caches kAhead ids before its insert: each insert
// into a table of 150K keys is a cache miss, and asked ahead they overlap.
template <class Key, class Want>
void InsertInIdOrder(StringIndex& index, size_t n, Key key, Want want) {
  index.Reserve(n);
  std::array<size_t, kAhead> hash{};
  auto ask = [&](size_t i) {
    if (!want(i)) return;
    hash[i % kAhead] = StringIndex::Hash(key(i));
    index.Prefetch(hash[i % kAhead]);
  };
  for (size_t i = 0; i < std::min(kAhead, n); ++i) ask(i);
  for (size_t i = 0; i < n; ++i) {
    if (want(i)) index.Insert(key(i), int32_t(i), hash[i % kAhead]);
    if (i + kAhead < n) ask(i + kAhead);
  }
}

}  // namespace

// Exact bytes as the key (a hash alone could return another text's ids); the most recent first.
struct Tokenizer::SegmentCache {
  static constexpr size_t kMinBytes = 4096;        // shorter segments cost less to encode than to look up
  static constexpr size_t kMaxBytes = 4ull << 20;  // longer ones cannot be a prompt's (the context holds less)
  static constexpr size_t kEntries = 4;
  struct Entry {
    std::string text;
    std::vector<int32_t> ids;
  };
  Mutex mu;
  std::deque<Entry> entries GUARDED_BY(mu);
};

Tokenizer::Tokenizer() :
    merge_steps_(std::make_unique<std::atomic<uint64_t>>(0)), segment_cache_(std::make_unique<SegmentCache>()) {
  std::fill(std::begin(byte_to_id_), std::end(byte_to_id_), -1);
}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromVocab(TokenizerVocab v, const std::string& source) {
  const size_t n = v.tokens.size();
  if (n == 0) return Status::Corruption(source + ": the vocabulary has no tokens");
  if (n > size_t(INT32_MAX)) return Status::Corruption(source + ": too many tokens: " + std::to_string(n));
  if (v.types.empty()) v.types.assign(n, TokenType::kNormal);
  if (v.types.size() != n) {
    return Status::Corruption(source + ": " + std::to_string(v.types.size()) + " token types for " + std::to_string(n) +
                              " tokens");
  }
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.scores.size() != n) {
    return Status::Corruption(source + ": " + std::to_string(v.scores.size()) + " token scores for " +
                              std::to_string(n) + " tokens");
  }
  for (auto* id : {&v.bos, &v.eos, &v.unk, &v.pad, &v.eot, &v.eom}) {
    if (*id < -1 || *id >= int64_t(n)) {
      return Status::Corruption(source + ": special token id " + std::to_string(*id) + " is not a token id (n_vocab " +
                                std::to_string(n) + ")");
    }
  }
  for (int32_t id : v.extra_eog) {
    if (id < 0 || id >= int64_t(n)) {
      return Status::Corruption(source + ": end-of-generation id " + std::to_string(id) +
                                " is not a token id (n_vocab " + std::to_string(n) + ")");
    }
  }
  for (auto& t : v.types) {
    const int32_t x = int32_t(t);
    if (x < 0 || x > 6) t = TokenType::kNormal;  // unknown type codes: treat as ordinary tokens
  }
  // Without type information, the named special tokens are control tokens.
  bool any_special_type = false;
  for (auto t : v.types) any_special_type |= (t == TokenType::kControl || t == TokenType::kUserDefined);
  if (!any_special_type) {
    for (int32_t id : {v.bos, v.eos, v.pad, v.eot, v.eom}) {
      if (id >= 0) v.types[id] = TokenType::kControl;
    }
  }
  if (v.unk >= 0 && v.types[v.unk] == TokenType::kNormal) v.types[v.unk] = TokenType::kUnknown;

  Tokenizer tok;
  tok.kind_ = v.kind;
  tok.pre_ = v.pre;
  tok.source_ = source;
  tok.bos_ = v.bos;
  tok.eos_ = v.eos;
  tok.unk_ = v.unk;
  tok.pad_ = v.pad;
  tok.eot_ = v.eot;
  tok.add_bos_ = v.add_bos;
  tok.add_space_prefix_ = v.add_space_prefix;
  tok.ignore_merges_ = v.ignore_merges;
  tok.chat_template_ = std::move(v.chat_template);
  tok.arch_ = std::move(v.arch);
  tok.generation_ = v.generation;
  tok.sp_ = std::move(v.sp_backend);
  tok.types_ = std::move(v.types);
  tok.scores_ = std::move(v.scores);
  tok.texts_ = std::move(v.tokens);

  const bool bpe = tok.kind_ == TokenizerKind::kBytePairBpe;
  // The pieces and their index are built on a second thread while this one indexes the texts and
  // (BPE) builds the merge table, which needs only the texts' index: about half the build's time
  // (12 of 25 ms for Qwen2.5's 151,643 tokens and 151,387 merges), on the start's critical path.
  // The two sides share no member they write: pieces_ and piece_to_id_ there, text_to_id_,
  // byte_to_id_ and merges_ here; both read texts_ and types_.
  size_t n_undecodable = 0;
  std::exception_ptr pieces_error;
  auto pieces_work = [&] {
    try {
      tok.pieces_.resize(n);
      std::string bytes;
      std::vector<uint8_t> mergeable(n);  // in piece_to_id_, under its piece (BPE) or text (SPM)
      for (size_t i = 0; i < n; ++i) {
        const std::string& text = tok.texts_[i];
        const TokenType type = tok.types_[i];
        const bool special = type == TokenType::kControl || type == TokenType::kUserDefined;
        std::string& piece = tok.pieces_[i];
        if (bpe) {
          if (special) {
            piece = text;
          } else if (ByteLevelDecode(text, &bytes)) {
            piece = bytes;
          } else {
            piece = text;  // not byte-level text (some added tokens): its UTF-8 as is
            ++n_undecodable;
          }
        } else {
          const int b = type == TokenType::kByte ? ParseByteToken(text) : -1;
          if (b >= 0) {
            piece.assign(1, char(b));
          } else if (special || type == TokenType::kUnknown) {
            piece = text;
          } else {
            piece = ReplaceAll(text, kSpmSpace, " ");
          }
        }
        mergeable[i] =
            !text.empty() &&
            (bpe ? (type == TokenType::kNormal || type == TokenType::kUndefined || type == TokenType::kByte)
                 : (type == TokenType::kNormal || type == TokenType::kUndefined || type == TokenType::kUserDefined));
      }
      InsertInIdOrder(
          tok.piece_to_id_, n, [&](size_t i) -> std::string_view { return bpe ? tok.pieces_[i] : tok.texts_[i]; },
          [&](size_t i) { return mergeable[i] != 0; });
    } catch (...) {
      pieces_error = std::current_exception();
    }
  };
  // A small vocabulary (the tests', a fuzzer's) is not worth a thread.
  constexpr size_t kThreadedTokens = 16384;
  std::thread pieces_side;
  if (n >= kThreadedTokens) pieces_side = std::thread(pieces_work);
  else pieces_work();
  // Joins the pieces' side on every way out of this function, errors included.
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join_pieces{pieces_side};
  InsertInIdOrder(
      tok.text_to_id_, n, [&](size_t i) -> std::string_view { return tok.texts_[i]; }, [](size_t) { return true; });

  if (bpe) {
    // Single bytes are the tokens whose stored text is that byte's byte-level character.
    for (int b = 0; b < 256; ++b) {
      const int32_t id = tok.text_to_id_.Find(ByteLevelEncode(std::string(1, char(b))));
      if (id >= 0) tok.byte_to_id_[b] = id;
    }
    size_t n_skipped = 0;
    tok.merges_.Reserve(v.merges.size());
    // Each merge looks up its two parts and their join, and is inserted into the merge table: four
    // stages a merge passes kAhead steps apart (in rank order), each asking the caches for what the
    // next one reads: the three index slots, then the strings those slots hold (a lookup compares
    // them), then the lookups and the merge table's slot, then the insert.
    struct Ahead {
      std::string joined;  // a + b
      size_t ha = 0, hb = 0, hm = 0;
    };
    std::array<Ahead, 4 * kAhead> ahead;  // asked for at step t, found at step t + 2 kAhead
    const StringIndex& index = tok.text_to_id_;
    auto ask_slots = [&](size_t r) {
      const auto& [a, b] = v.merges[r];
      Ahead& x = ahead[r % ahead.size()];
      x.joined.assign(a).append(b);
      x.ha = StringIndex::Hash(a);
      x.hb = StringIndex::Hash(b);
      x.hm = StringIndex::Hash(x.joined);
      index.Prefetch(x.ha);
      index.Prefetch(x.hb);
      index.Prefetch(x.hm);
    };
    auto ask_keys = [&](size_t r) {
      const Ahead& x = ahead[r % ahead.size()];
      index.PrefetchKey(x.ha);
      index.PrefetchKey(x.hb);
      index.PrefetchKey(x.hm);
    };
    struct Found {
      int32_t ia = -1, ib = -1, im = -1;
    };
    std::array<Found, 2 * kAhead> found;  // found at step t, inserted at step t + kAhead
    auto find_merge = [&](size_t r) {
      const auto& [a, b] = v.merges[r];
      const Ahead& x = ahead[r % ahead.size()];
      Found& f = found[r % found.size()];
      f = {index.Find(a, x.ha), index.Find(b, x.hb), index.Find(x.joined, x.hm)};
      if (f.ia >= 0 && f.ib >= 0) tok.merges_.Prefetch(f.ia, f.ib);
    };
    const size_t n_merges = v.merges.size();
    for (size_t t = 0; t < n_merges + 3 * kAhead; ++t) {
      if (t < n_merges) ask_slots(t);
      if (t >= kAhead && t - kAhead < n_merges) ask_keys(t - kAhead);
      if (t >= 2 * kAhead && t - 2 * kAhead < n_merges) find_merge(t - 2 * kAhead);
      if (t < 3 * kAhead || t - 3 * kAhead >= n_merges) continue;
      const size_t r = t - 3 * kAhead;
      const Found& f = found[r % found.size()];
      if (f.ia < 0 || f.ib < 0 || f.im < 0) {
        ++n_skipped;
        continue;
      }
      tok.merges_.Insert(f.ia, f.ib, MergeInfo{int32_t(r), f.im});  // the first rank wins
    }
    if (n_skipped) {
      spdlog::warn("{}: {} of {} merges name tokens that are not in the vocabulary; ignored", source, n_skipped,
                   v.merges.size());
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (tok.types_[i] != TokenType::kByte) continue;
      const int b = ParseByteToken(tok.texts_[i]);
      if (b >= 0 && tok.byte_to_id_[b] < 0) tok.byte_to_id_[b] = int32_t(i);
    }
  }

  if (pieces_side.joinable()) pieces_side.join();
  if (pieces_error) std::rethrow_exception(pieces_error);
  if (n_undecodable) {
    spdlog::debug("{}: {} BPE tokens are not byte-level text; decoded as UTF-8", source, n_undecodable);
  }

  // Special tokens, matched in the text longest first.
  std::vector<TokenizerVocab::AddedToken> strip(n);
  for (const auto& a : v.added) {
    if (a.id >= 0 && size_t(a.id) < n) strip[a.id] = a;
  }
  for (size_t i = 0; i < n; ++i) {
    const TokenType type = tok.types_[i];
    if (type != TokenType::kControl && type != TokenType::kUserDefined && type != TokenType::kUnknown) continue;
    const std::string& text = tok.texts_[i];
    if (text.empty()) continue;
    if (tok.special_map_.emplace(text, int32_t(i)).second) {
      tok.specials_.push_back({text, int32_t(i), type == TokenType::kUserDefined, strip[i].lstrip, strip[i].rstrip});
    }
  }
  std::stable_sort(tok.specials_.begin(), tok.specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  if (tok.specials_.size() > 65535) {
    return Status::Unsupported(source + ": more than 65535 special tokens");
  }
  for (size_t k = 0; k < tok.specials_.size(); ++k) {
    tok.special_first_[uint8_t(tok.specials_[k].text[0])].push_back(uint16_t(k));
  }

  // End of generation: eos, eot, eom, extra ids, and control tokens that end a turn.
  tok.is_eog_.assign(n, 0);
  auto add_eog = [&](int32_t id) {
    if (id >= 0 && !tok.is_eog_[id]) {
      tok.is_eog_[id] = 1;
      tok.eog_.push_back(id);
    }
  };
  add_eog(v.eos);
  add_eog(v.eot);
  add_eog(v.eom);
  for (int32_t id : v.extra_eog) add_eog(id);
  static const char* const kEndTexts[] = {"<|im_end|>",    "<|eot_id|>",      "<|eom_id|>", "<|endoftext|>", "<|end|>",
                                          "<end_of_turn>", "<|end_of_text|>", "</s>",       "<|EOT|>",       "<EOT>"};
  for (const char* t : kEndTexts) {
    const int32_t id = tok.text_to_id_.Find(t);
    if (id >= 0 && tok.types_[id] == TokenType::kControl) add_eog(id);
  }
  if (tok.eot_ < 0) {
    for (const char* t : {"<|im_end|>", "<|eot_id|>", "<end_of_turn>"}) {
      const int32_t id = tok.text_to_id_.Find(t);
      if (id >= 0 && tok.types_[id] == TokenType::kControl) {
        tok.eot_ = id;
        break;
      }
    }
  }
  return tok;
}

// ---------------------------------------------------------------------------------------
// Encoding

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos, bool parse_special) const {
  return Encode(text, add_bos, parse_special, ProgressFn());
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos, bool parse_special,
                                       const ProgressFn& progress) const {
  return EncodeImpl(text, add_bos, parse_special ? SpecialMatch::kAll : SpecialMatch::kUserDefined, nullptr,
                    progress ? &progress : nullptr);
}

std::vector<int32_t> Tokenizer::EncodeLiteral(std::string_view text, bool add_bos, const ProgressFn& progress) const {
  static const std::vector<ByteRange> kNoMarkup;
  return EncodeImpl(text, add_bos, SpecialMatch::kMarkupOnly, &kNoMarkup, progress ? &progress : nullptr);
}

std::vector<int32_t> Tokenizer::EncodeTemplated(std::string_view text, bool add_bos,
                                                const std::vector<ByteRange>& markup) const {
  return EncodeImpl(text, add_bos, SpecialMatch::kMarkupOnly, &markup, nullptr);
}

std::vector<int32_t> Tokenizer::EncodeImpl(std::string_view text, bool add_bos, SpecialMatch match,
                                           const std::vector<ByteRange>* markup, const ProgressFn* report) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  // kMarkupOnly: the markup range that ends after byte i (ranges are sorted); none left means
  // the rest of the text is literal.
  size_t range = 0;
  auto in_markup = [&](size_t i, size_t n) {
    while (range < markup->size() && (*markup)[range].end <= i) ++range;
    return range < markup->size() && (*markup)[range].begin <= i && i + n <= (*markup)[range].end;
  };
  size_t seg_begin = 0;
  size_t i = 0;
  bool first = true;
  while (i < text.size()) {
    const auto& cands = special_first_[uint8_t(text[i])];
    const Special* hit = nullptr;
    for (uint16_t k : cands) {
      const Special& s = specials_[k];
      if (match == SpecialMatch::kUserDefined && !s.always) continue;
      if (match == SpecialMatch::kMarkupOnly && !in_markup(i, s.text.size())) continue;
      if (text.size() - i >= s.text.size() && std::memcmp(text.data() + i, s.text.data(), s.text.size()) == 0) {
        hit = &s;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip) {
      while (seg_end > seg_begin && IsAsciiSpace(text[seg_end - 1])) --seg_end;
    }
    if (seg_end > seg_begin)
      EncodeSegment(text.substr(seg_begin, seg_end - seg_begin), first, &out, report, seg_begin, text.size());
    first = false;
    out.push_back(hit->id);
    i += hit->text.size();
    if (hit->rstrip) {
      while (i < text.size() && IsAsciiSpace(text[i])) ++i;
    }
    seg_begin = i;
  }
  if (seg_begin < text.size()) EncodeSegment(text.substr(seg_begin), first, &out, report, seg_begin, text.size());
  if (report) (*report)(text.size(), text.size(), "tokenizing");
  return out;
}

void Tokenizer::EncodeSegment(std::string_view text, bool first_segment, std::vector<int32_t>* out,
                              const ProgressFn* progress, size_t base, size_t total) const {
  SegmentCache* cache = segment_cache_.get();
  if (!cache || text.size() < SegmentCache::kMinBytes || text.size() > SegmentCache::kMaxBytes) {
    EncodeText(text, first_segment, out, progress, base, total);
    return;
  }
  {
    MutexLock lk(&cache->mu);
    for (auto it = cache->entries.begin(); it != cache->entries.end(); ++it) {
      if (it->text != text) continue;
      out->insert(out->end(), it->ids.begin(), it->ids.end());
      if (it != cache->entries.begin()) {
        SegmentCache::Entry e = std::move(*it);
        cache->entries.erase(it);
        cache->entries.push_front(std::move(e));
      }
      return;
    }
  }
  const size_t before = out->size();
  EncodeText(text, first_segment, out, progress, base, total);  // not under the lock: may be long
  SegmentCache::Entry e{std::string(text), std::vector<int32_t>(out->begin() + std::ptrdiff_t(before), out->end())};
  MutexLock lk(&cache->mu);
  cache->entries.push_front(std::move(e));
  if (cache->entries.size() > SegmentCache::kEntries) cache->entries.pop_back();
}

void Tokenizer::EncodeText(std::string_view text, bool /*first_segment*/, std::vector<int32_t>* out,
                           const ProgressFn* progress, size_t base, size_t total) const {
  constexpr size_t kProgressBytes = 256 << 10;
  if (kind_ == TokenizerKind::kSentencePiece) {
    // Every text segment gets the dummy prefix, as libsentencepiece (and llama.cpp) do for a
    // segment that starts the text or follows a special token.
    if (sp_) {
      sp_->Encode(text, out);
    } else {
      EncodeSpm(text, add_space_prefix_, out);
    }
    return;
  }
  thread_local std::vector<TextSpan> spans;
  spans.clear();
  PreTokenize(pre_, text, &spans);
  // Words repeat: remember where each short piece's ids went in `out` during this call.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> seen;
  size_t next_report = kProgressBytes;
  for (const TextSpan& sp : spans) {
    if (progress && sp.offset >= next_report) {
      (*progress)(base + sp.offset, total, "tokenizing");
      next_report = sp.offset + kProgressBytes;
    }
    std::string_view piece = text.substr(sp.offset, sp.length);
    if (piece.size() <= 32) {
      auto it = seen.find(piece);
      if (it != seen.end()) {
        const auto [b, len] = it->second;
        for (uint32_t k = 0; k < len; ++k) out->push_back((*out)[b + k]);
        continue;
      }
      const size_t before = out->size();
      EncodeBpePiece(piece, out);
      if (seen.size() < (1u << 16))
        seen.emplace(piece, std::make_pair(uint32_t(before), uint32_t(out->size() - before)));
    } else {
      EncodeBpePiece(piece, out);
    }
  }
}

void Tokenizer::EncodeBpePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_ || piece.size() == 1) {
    if (const int32_t id = piece_to_id_.Find(piece); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  // Symbols: one per byte, in a doubly linked list; merges come off a min-heap ordered by
  // (rank, position), checked against the current neighbours when popped (stale entries are
  // dropped). O(n log n) in the piece length.
  struct Sym {
    int32_t id, prev, next;
  };
  thread_local std::vector<Sym> syms;
  syms.clear();
  for (unsigned char b : piece) {
    int32_t id = byte_to_id_[b];
    if (id < 0) id = unk_;  // a vocabulary without this byte: unk, or dropped without one
    if (id < 0) continue;
    const int32_t k = int32_t(syms.size());
    syms.push_back({id, k - 1, k + 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Cand {
    int32_t rank, pos;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Cand> heap;  // min-heap via std::greater
  heap.clear();
  auto push = [&](Cand c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  auto lookup = [&](int32_t left) -> const MergeInfo* {
    const int32_t right = syms[left].next;
    if (right < 0) return nullptr;
    return merges_.Find(syms[left].id, syms[right].id);
  };
  for (int32_t k = 0; k + 1 < int32_t(syms.size()); ++k) {
    if (const MergeInfo* m = lookup(k)) push({m->rank, k});
  }
  uint64_t steps = 0;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    if (syms[c.pos].id < 0) continue;
    const MergeInfo* m = lookup(c.pos);
    if (!m || m->rank != c.rank) continue;  // stale
    const int32_t right = syms[c.pos].next;
    syms[c.pos].id = m->merged;
    syms[c.pos].next = syms[right].next;
    if (syms[right].next >= 0) syms[syms[right].next].prev = c.pos;
    syms[right].id = -1;
    ++steps;
    if (syms[c.pos].prev >= 0) {
      if (const MergeInfo* mp = lookup(syms[c.pos].prev)) push({mp->rank, syms[c.pos].prev});
    }
    if (const MergeInfo* mn = lookup(c.pos)) push({mn->rank, c.pos});
  }
  merge_steps_->fetch_add(steps, std::memory_order_relaxed);
  for (int32_t k = 0; k >= 0; k = syms[k].next) out->push_back(syms[k].id);
}

void Tokenizer::EncodeSpm(std::string_view raw, bool prefix_space, std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(raw.size() + 8);
  if (prefix_space) text.append(kSpmSpace);
  for (char c : raw) {
    if (c == ' ') text.append(kSpmSpace);
    else text.push_back(c);
  }
  struct Sym {
    uint32_t start, len;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = DecodeUtf8(text, i, &cp);
    const int32_t k = int32_t(syms.size());
    syms.push_back({uint32_t(i), uint32_t(len), k - 1, k + 1});
    i += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const {  // max score first, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> heap;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    std::string_view s(text.data() + syms[left].start, syms[left].len + syms[right].len);
    const int32_t id = piece_to_id_.Find(s);
    if (id < 0) return;
    heap.push({scores_[id], left, right, uint32_t(s.size())});
  };
  for (int32_t k = 0; k + 1 < int32_t(syms.size()); ++k) try_add(k, k + 1);
  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t k = 0; k >= 0; k = syms[k].next) {
    std::string_view s(text.data() + syms[k].start, syms[k].len);
    if (const int32_t id = piece_to_id_.Find(s); id >= 0) {
      out->push_back(id);
      continue;
    }
    bool all_bytes = true;
    for (unsigned char c : s) all_bytes &= byte_to_id_[c] >= 0;
    if (all_bytes) {
      for (unsigned char c : s) out->push_back(byte_to_id_[c]);
    } else if (unk_ >= 0) {
      out->push_back(unk_);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Decoding and lookups

const std::string& Tokenizer::Piece(int32_t id) const { return id >= 0 && id < n_vocab() ? pieces_[id] : kEmpty; }

const std::string& Tokenizer::TokenText(int32_t id) const { return id >= 0 && id < n_vocab() ? texts_[id] : kEmpty; }

int32_t Tokenizer::TokenId(std::string_view token_text) const { return text_to_id_.Find(token_text); }

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? types_[id] : TokenType::kUndefined;
}

bool Tokenizer::IsSpecial(int32_t id) const { return token_type(id) == TokenType::kControl; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const { return id >= 0 && id < n_vocab() && is_eog_[id]; }

uint64_t Tokenizer::bpe_merge_steps() const { return merge_steps_->load(std::memory_order_relaxed); }

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (skip_special && types_[id] == TokenType::kControl) continue;
    const std::string& p = pieces_[id];
    if (first && kind_ == TokenizerKind::kSentencePiece && add_space_prefix_ && !p.empty() && p[0] == ' ' &&
        texts_[id].rfind(kSpmSpace, 0) == 0) {
      out.append(p, 1);  // the dummy prefix
    } else {
      out.append(p);
    }
    first = false;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// StreamDecoder

std::string StreamDecoder::Push(int32_t id) {
  if (!(skip_special_ && tok_->IsSpecial(id))) pending_.append(tok_->Piece(id));
  return Drain(false);
}

std::string StreamDecoder::Flush() { return Drain(true); }

std::string StreamDecoder::Drain(bool final) {
  const size_t limit = final ? pending_.size() : CompleteUtf8Prefix(pending_);
  std::string out;
  out.reserve(limit);
  for (size_t i = 0; i < limit;) {
    uint32_t cp;
    const size_t len = DecodeUtf8(std::string_view(pending_).substr(0, limit), i, &cp);
    if (cp == kInvalidCodepoint) {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    } else {
      out.append(pending_, i, len);
    }
    i += len;
  }
  pending_.erase(0, limit);
  return out;
}

}  // namespace impress
