#include "engine/pipeline/conversation.h"

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
    out.tokens = tokenizer.Encode(prefix + question, add_bos, /*parse_special=*/false);
    const auto pre = tokenizer.Encode(prefix, add_bos, false);
    out.n_prefix = int(std::mismatch(pre.begin(), pre.end(), out.tokens.begin(), out.tokens.end()).first - pre.begin());
    return out;
  }
  std::vector<ChatMessage> messages = Messages(question, chat);
  const bool bos = chat.renders_bos() ? false : add_bos;
  out.tokens = tokenizer.Encode(chat.Render(messages, /*add_generation_prompt=*/true), bos, /*parse_special=*/true);
  messages.pop_back();
  const auto pre = tokenizer.Encode(chat.Render(messages, false), bos, true);
  // The reusable prefix is what both tokenizations share (a merge across the boundary would
  // otherwise make a cached prefix differ from the new prompt).
  out.n_prefix = int(std::mismatch(pre.begin(), pre.end(), out.tokens.begin(), out.tokens.end()).first - pre.begin());
  return out;
}

}  // namespace impress
