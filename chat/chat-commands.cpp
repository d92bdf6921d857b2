#include "chat/chat-commands.h"

#include <algorithm>
#include <array>
#include <utility>

namespace impress {
namespace {

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

constexpr std::array<std::pair<std::string_view, ChatCommand::Kind>, 10> kCommands = {{
    {"/help", ChatCommand::Kind::kHelp},
    {"/attach", ChatCommand::Kind::kAttach},
    {"/detach", ChatCommand::Kind::kDetach},
    {"/private", ChatCommand::Kind::kPrivate},
    {"/remove", ChatCommand::Kind::kRemove},
    {"/docs", ChatCommand::Kind::kDocs},
    {"/reset", ChatCommand::Kind::kReset},
    {"/quit", ChatCommand::Kind::kQuit},
    {"/exit", ChatCommand::Kind::kQuit},
    {"/?", ChatCommand::Kind::kHelp},
}};

}  // namespace

ChatCommand ParseChatCommand(std::string_view line) {
  ChatCommand c;
  const std::string_view t = Trim(line);
  if (t.starts_with("//")) {
    c.text = std::string(line.substr(line.find('/') + 1));
    return c;
  }
  const size_t word_end = std::min(t.find_first_of(" \t"), t.size());
  const std::string_view word = t.substr(0, word_end);
  bool command = word.size() >= 2 && word[0] == '/';
  for (char ch : word.substr(std::min<size_t>(1, word.size()))) command &= IsLetter(ch);
  command |= word == "/?";
  if (!command) {
    c.text = std::string(line);
    return c;
  }
  c.kind = ChatCommand::Kind::kUnknown;
  c.text = std::string(word);
  for (const auto& [name, kind] : kCommands) {
    if (word != name) continue;
    c.kind = kind;
    c.text = std::string(Trim(t.substr(word_end)));
  }
  return c;
}

std::string ChatCommandHelp() {
  return "/attach PATH     attach a text document to the conversation\n"
         "/private PATH    attach a document that never leaves this machine (no team KV tier)\n"
         "/docs            list the documents: tokens, attached or not, where their KV is cached\n"
         "/detach N        leave document N (as /docs numbers them) out of the context; /attach N takes it back\n"
         "/remove N        remove document N from the list\n"
         "/reset           forget the conversation's questions and answers (the documents stay)\n"
         "/quit, /exit     leave (Ctrl-D too); Ctrl-C stops an answer\n"
         "//TEXT           ask TEXT starting with '/'\n";
}

size_t ParseDocumentNumber(std::string_view s) {
  s = Trim(s);
  if (s.empty() || s.size() > 9) return 0;
  size_t n = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return 0;
    n = n * 10 + size_t(ch - '0');
  }
  return n;
}

}  // namespace impress
