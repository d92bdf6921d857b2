// Conversation: the documents, system prompt and turns of one chat, and how they become tokens.
//
// The prompt is laid out so that everything before the newest question is a stable prefix that
// the KV store can reuse: [system message carrying the documents] [earlier turns] [question].
// Requires external synchronization.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "chat/document.h"
#include "engine/tokenizer/chat-template.h"

namespace impress {

class Tokenizer;

struct PromptTokens {
  std::vector<int32_t> tokens;  // the whole prompt, ending with the assistant's turn opening
  int n_prefix = 0;             // tokens before the newest question's text (what may be reused)
};

class Conversation {
 public:
  void set_system_prompt(std::string s) { system_prompt_ = std::move(s); }
  void AddDocument(Document doc) { documents_.push_back(std::move(doc)); }
  void ClearDocuments() { documents_.clear(); }
  const std::vector<Document>& documents() const { return documents_; }
  const std::vector<ChatMessage>& turns() const { return turns_; }
  void AddTurn(std::string role, std::string content) { turns_.push_back({std::move(role), std::move(content)}); }
  void ClearTurns() { turns_.clear(); }
  // Removes the last n turns (all when n >= their count): regenerate drops a question and its answer.
  void PopTurns(size_t n) { turns_.resize(turns_.size() - std::min(n, turns_.size())); }

  // The messages for a new question (system + documents, earlier turns, the question).
  std::vector<ChatMessage> Messages(const std::string& question, const ChatTemplate& chat) const;

  // Renders and tokenizes the prompt for `question`. With raw, the documents and question are
  // joined as plain text (no template) and the tokenizer's default BOS rule applies.
  PromptTokens Build(const std::string& question, const Tokenizer& tokenizer, const ChatTemplate& chat,
                     bool raw = false) const;

  // Where each document sits in the prompt's tokens: [begin, end) per document, in order, where
  // begin is the first token of its "### Document:" header (so dropping [begin, ...) drops the
  // document and everything after it) and end the token after its text. Exact when the tokens
  // spell the text byte for byte (byte-level BPE: one tokenization); otherwise (SentencePiece)
  // from a tokenization of the text before each boundary, rounded outwards where a token spans it.
  struct TokenSpan {
    int begin = 0, end = 0;
  };
  // `tokens` (optional) receives the tokens the spans index: the prompt of an empty question
  // (Build("") without raw), or the raw documents text.
  std::vector<TokenSpan> DocumentSpans(const Tokenizer& tokenizer, const ChatTemplate& chat, bool raw = false,
                                       std::vector<int32_t>* tokens = nullptr) const;

 private:
  std::string SystemText(const ChatTemplate& chat) const;

  std::string system_prompt_;
  std::vector<Document> documents_;
  std::vector<ChatMessage> turns_;
};

}  // namespace impress
