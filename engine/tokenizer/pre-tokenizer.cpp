#include "engine/tokenizer/pre-tokenizer.h"

#include "engine/tokenizer/unicode.h"

namespace impress {
namespace {

// The text decoded once: code point k spans bytes [off[k], off[k+1]).
struct Decoded {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> fl;
  std::vector<uint32_t> off;  // n + 1 entries
  size_t n() const { return cp.size(); }
};

void Decode(std::string_view text, Decoded* d) {
  d->cp.clear();
  d->fl.clear();
  d->off.clear();
  for (size_t i = 0; i < text.size();) {
    uint32_t c;
    size_t len = DecodeUtf8(text, i, &c);
    d->cp.push_back(c);
    d->fl.push_back(c == kInvalidCodepoint ? 0 : CodepointFlags(c));
    d->off.push_back(uint32_t(i));
    i += len;
  }
  d->off.push_back(uint32_t(text.size()));
}

bool IsL(const Decoded& d, size_t k) { return k < d.n() && (d.fl[k] & kCpLetter); }
bool IsN(const Decoded& d, size_t k) { return k < d.n() && (d.fl[k] & kCpNumber); }
bool IsS(const Decoded& d, size_t k) { return k < d.n() && (d.fl[k] & kCpSpace); }
// [^\s\p{L}\p{N}]
bool IsOther(const Decoded& d, size_t k) { return k < d.n() && d.fl[k] == 0; }
bool IsCrLf(const Decoded& d, size_t k) { return k < d.n() && (d.cp[k] == '\r' || d.cp[k] == '\n'); }
uint32_t Lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction 's|'t|'re|'ve|'m|'ll|'d at k, or 0.
size_t Contraction(const Decoded& d, size_t k, bool ignore_case) {
  if (d.cp[k] != '\'' || k + 1 >= d.n()) return 0;
  auto c = [&](size_t j) -> uint32_t {
    if (j >= d.n()) return 0;
    return ignore_case ? Lower(d.cp[j]) : d.cp[j];
  };
  const uint32_t c1 = c(k + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  const uint32_t c2 = c(k + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at k (d.fl[k] is a space): the run, minus its last space when a non-space
// follows and the run is longer than one.
size_t WhitespaceRun(const Decoded& d, size_t k) {
  size_t e = k;
  while (IsS(d, e)) ++e;
  if (e < d.n() && e - k >= 2) return e - k - 1;
  return e - k;
}

// Splits code points [b, e) of d with the GPT-2 regex.
void SplitGpt2(const Decoded& d, size_t b, size_t e, std::vector<TextSpan>* out) {
  auto emit = [&](size_t s, size_t t) { out->push_back({d.off[s], d.off[t] - d.off[s]}); };
  // Restrict the view to [b, e): classes past e are "end of text".
  auto in = [&](size_t k) { return k < e; };
  size_t k = b;
  while (k < e) {
    if (size_t c = Contraction(d, k, false); c && k + c <= e) {
      emit(k, k + c);
      k += c;
      continue;
    }
    size_t j = k;
    if (d.cp[j] == ' ') ++j;
    if (in(j) && IsL(d, j)) {
      while (in(j) && IsL(d, j)) ++j;
      emit(k, j);
      k = j;
      continue;
    }
    if (in(j) && IsN(d, j)) {
      while (in(j) && IsN(d, j)) ++j;
      emit(k, j);
      k = j;
      continue;
    }
    if (in(j) && IsOther(d, j)) {
      while (in(j) && IsOther(d, j)) ++j;
      emit(k, j);
      k = j;
      continue;
    }
    // Whitespace (\s+(?!\S)|\s+), within [b, e).
    size_t t = k;
    while (in(t) && IsS(d, t)) ++t;
    size_t len = t - k;
    if (t < e && len >= 2) len -= 1;
    if (len == 0) len = 1;  // unreachable: every class is covered above
    emit(k, k + len);
    k += len;
  }
}

// The Llama-3 regex; max_digits is the n of its \p{N}{1,n} (3; Qwen2's \p{N} is 1).
void SplitLlama3(const Decoded& d, size_t max_digits, std::vector<TextSpan>* out) {
  auto emit = [&](size_t s, size_t t) { out->push_back({d.off[s], d.off[t] - d.off[s]}); };
  const size_t n = d.n();
  size_t k = 0;
  while (k < n) {
    if (size_t c = Contraction(d, k, true)) {
      emit(k, k + c);
      k += c;
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    {
      size_t j = k;
      if (!IsL(d, j) && !IsN(d, j) && !IsCrLf(d, j) && IsL(d, j + 1)) ++j;
      if (IsL(d, j)) {
        while (IsL(d, j)) ++j;
        emit(k, j);
        k = j;
        continue;
      }
    }
    // \p{N}{1,3} (Qwen2: \p{N})
    if (IsN(d, k)) {
      size_t j = k;
      while (j < k + max_digits && IsN(d, j)) ++j;
      emit(k, j);
      k = j;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    {
      size_t j = k;
      if (d.cp[j] == ' ') ++j;
      if (IsOther(d, j)) {
        while (IsOther(d, j)) ++j;
        while (IsCrLf(d, j)) ++j;
        emit(k, j);
        k = j;
        continue;
      }
    }
    // \s*[\r\n]+ : up to and including the run's last \r or \n.
    size_t t = k;
    size_t last_crlf = n;
    while (IsS(d, t)) {
      if (IsCrLf(d, t)) last_crlf = t;
      ++t;
    }
    if (last_crlf != n) {
      emit(k, last_crlf + 1);
      k = last_crlf + 1;
      continue;
    }
    // \s+(?!\S)|\s+
    size_t len = WhitespaceRun(d, k);
    if (len == 0) len = 1;  // unreachable
    emit(k, k + len);
    k += len;
  }
}

}  // namespace

const char* PreTokenizerName(PreTokenizerType t) {
  switch (t) {
    case PreTokenizerType::kNone: return "none";
    case PreTokenizerType::kGpt2: return "gpt2";
    case PreTokenizerType::kDigitsGpt2: return "digits+gpt2";
    case PreTokenizerType::kLlama3: return "llama3";
    case PreTokenizerType::kQwen2: return "qwen2";
  }
  return "?";
}

void PreTokenize(PreTokenizerType type, std::string_view text, std::vector<TextSpan>* out) {
  if (text.empty()) return;
  if (type == PreTokenizerType::kNone) {
    out->push_back({0, uint32_t(text.size())});
    return;
  }
  thread_local Decoded d;
  Decode(text, &d);
  switch (type) {
    case PreTokenizerType::kGpt2: SplitGpt2(d, 0, d.n(), out); break;
    case PreTokenizerType::kDigitsGpt2: {
      size_t b = 0;
      for (size_t k = 0; k < d.n(); ++k) {
        if (!IsN(d, k)) continue;
        if (b < k) SplitGpt2(d, b, k, out);
        out->push_back({d.off[k], d.off[k + 1] - d.off[k]});
        b = k + 1;
      }
      if (b < d.n()) SplitGpt2(d, b, d.n(), out);
      break;
    }
    case PreTokenizerType::kLlama3: SplitLlama3(d, 3, out); break;
    case PreTokenizerType::kQwen2: SplitLlama3(d, 1, out); break;
    case PreTokenizerType::kNone: break;
  }
}

}  // namespace impress
