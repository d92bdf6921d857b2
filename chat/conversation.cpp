#include "chat/conversation.h"

#include <algorithm>

#include "engine/tokenizer/tokenizer.h"

namespace impress {

std::string Conversation::SystemText(const ChatTemplate& chat) const {
  std::string text = system_prompt_.empty() ? chat.default_system_prompt() : system_prompt_;
  if (text.empty()) text = "You are a helpful assistant.";
  if (!documents_.empty()) {
    text += "\n\nAnswer the user's questions using the following documents.";
    for (const Document& d : documents_) {
      text += "\n\n### Document: " + d.name + "\n\n" + d.text;
    }
  }
  return text;
}

std::vector<ChatMessage> Conversation::Messages(const std::string& question, const ChatTemplate& chat) const {
  std::vector<ChatMessage> m;
  m.push_back({"system", SystemText(chat)});
  m.insert(m.end(), turns_.begin(), turns_.end());
  m.push_back({"user", question});
  return m;
}

PromptTokens Conversation::Build(const std::string& question, const Tokenizer& tokenizer, const ChatTemplate& chat,
                                 bool raw) const {
  PromptTokens out;
  const bool add_bos = tokenizer.add_bos_default();
  if (raw) {
    std::string prefix;
    for (const Document& d : documents_) prefix += d.text + "\n\n";
    for (const ChatMessage& t : turns_) prefix += t.content + "\n";
    out.tokens = tokenizer.EncodeLiteral(prefix + question, add_bos);
    const auto pre = tokenizer.EncodeLiteral(prefix, add_bos);
    out.n_prefix = int(std::mismatch(pre.begin(), pre.end(), out.tokens.begin(), out.tokens.end()).first - pre.begin());
    return out;
  }
  const bool bos = chat.renders_bos() ? false : add_bos;
  // Only the template's markup may become special tokens: documents, their names and the
  // user's text stay literal, whatever they contain.
  std::vector<ByteRange> markup;
  const std::string text = chat.Render(Messages(question, chat), /*add_generation_prompt=*/true, &markup);
  out.tokens = tokenizer.EncodeTemplated(text, bos, markup);
  // The reusable prefix is what this prompt shares with the prompt of an empty question:
  // everything before the question's text. (Rendering the earlier messages alone is not enough:
  // Llama-2's template writes the system message only together with a user turn, so a first
  // question would reuse nothing.) A merge across the boundary ends it one token early.
  if (question.empty()) {  // the empty question's prompt is the prefix itself
    out.n_prefix = std::max(0, int(out.tokens.size()) - 1);
    return out;
  }
  const std::string pre_text = chat.Render(Messages("", chat), true, &markup);
  const auto pre = tokenizer.EncodeTemplated(pre_text, bos, markup);
  const int shared =
      int(std::mismatch(pre.begin(), pre.end(), out.tokens.begin(), out.tokens.end()).first - pre.begin());
  out.n_prefix = std::min(shared, int(out.tokens.size()) - 1);  // at least one token is new
  return out;
}

std::vector<Conversation::TokenSpan> Conversation::DocumentSpans(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                                                 bool raw, std::vector<int32_t>* tokens) const {
  std::vector<TokenSpan> spans;
  if (tokens) tokens->clear();
  if (documents_.empty()) return spans;
  // The text every prompt of this conversation starts with, and the byte ranges of the
  // documents in it (headers included); the layout is SystemText's / Build's.
  std::string text;
  std::vector<std::pair<size_t, size_t>> bytes;  // [header, end of text)
  bool add_bos = tokenizer.add_bos_default();
  std::vector<ByteRange> markup;  // raw: none, all literal
  if (raw) {
    for (const Document& d : documents_) {
      bytes.push_back({text.size(), text.size() + d.text.size()});
      text += d.text + "\n\n";
    }
  } else {
    // The whole prompt for an empty question: some templates (Llama-2) render the system
    // message only together with a user turn.
    text = chat.Render(Messages("", chat), /*add_generation_prompt=*/true, &markup);
    if (chat.renders_bos()) add_bos = false;
    size_t at = 0;
    for (const Document& d : documents_) {
      const std::string header = "### Document: " + d.name + "\n\n";
      const size_t h = text.find(header + d.text, at);
      if (h == std::string::npos) return {};  // the template escaped the text: no spans
      bytes.push_back({h, h + header.size() + d.text.size()});
      at = bytes.back().second;
    }
  }
  std::vector<int32_t> all_tokens = tokenizer.EncodeTemplated(text, add_bos, markup);
  const std::vector<int32_t>& all = all_tokens;
  // Byte offset where each token starts, when the tokens spell the text byte for byte (byte-level
  // BPE does; SentencePiece's dummy-prefix spaces do not): then a span is exact.
  std::vector<size_t> starts;
  starts.reserve(all.size() + 1);
  size_t at = 0;
  bool exact = true;
  for (size_t i = 0; i < all.size() && exact; ++i) {
    starts.push_back(at);
    if (i == 0 && add_bos && all[0] == tokenizer.bos_id()) continue;
    const std::string& piece = tokenizer.Piece(all[i]);
    exact = text.compare(at, piece.size(), piece) == 0;
    at += piece.size();
  }
  starts.push_back(at);
  exact = exact && at == text.size();
  // Otherwise: tokens of text[0, off) that agree with the whole text's tokens (the prefix's own
  // tokenization may end differently, a merge across `off`), rounded down or up.
  auto agree = [&](size_t off, bool round_up) {
    if (exact) {
      // begin: the token holding byte `off`; end: the first token starting at or after it.
      const auto it = std::upper_bound(starts.begin(), starts.end() - 1, off);
      const int n = int(it - starts.begin()) - 1;
      return round_up && starts[n] < off ? n + 1 : n;
    }
    const std::vector<int32_t> pre = tokenizer.EncodeTemplated(std::string_view(text).substr(0, off), add_bos, markup);
    const int n = int(std::mismatch(pre.begin(), pre.end(), all.begin(), all.end()).first - pre.begin());
    return round_up && n < int(pre.size()) ? std::min<int>(int(all.size()), n + 1) : n;
  };
  for (const auto& [b, e] : bytes) spans.push_back({agree(b, false), agree(e, true)});
  if (tokens) *tokens = std::move(all_tokens);
  return spans;
}

}  // namespace impress
