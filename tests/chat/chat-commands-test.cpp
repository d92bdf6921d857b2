// The terminal chat's command lines (chat/chat-commands.h): which lines are commands, their
// arguments, and the lines that stay questions although they start with a slash.
#include "chat/chat-commands.h"

#include <gtest/gtest.h>

namespace impress {
namespace {

using Kind = ChatCommand::Kind;

TEST(ChatCommands, CommandsAndTheirArguments) {
  struct Case {
    const char* line;
    Kind kind;
    const char* text;
  };
  const Case cases[] = {
      {"/help", Kind::kHelp, ""},
      {"  /? ", Kind::kHelp, ""},
      {"/attach notes/a b.md", Kind::kAttach, "notes/a b.md"},
      {"/attach   spaced.txt  ", Kind::kAttach, "spaced.txt"},
      {"/private /home/u/secret.txt", Kind::kPrivate, "/home/u/secret.txt"},
      {"/remove 2", Kind::kRemove, "2"},
      {"/detach 1", Kind::kDetach, "1"},
      {"/docs", Kind::kDocs, ""},
      {"/reset", Kind::kReset, ""},
      {"/quit", Kind::kQuit, ""},
      {"/exit\r", Kind::kQuit, ""},
      {"/attach", Kind::kAttach, ""},
      {"/frobnicate now", Kind::kUnknown, "/frobnicate"},
      {"/Docs", Kind::kUnknown, "/Docs"},
  };
  for (const Case& c : cases) {
    const ChatCommand got = ParseChatCommand(c.line);
    EXPECT_EQ(got.kind, c.kind) << c.line;
    EXPECT_EQ(got.text, c.text) << c.line;
  }
}

TEST(ChatCommands, QuestionsStayQuestions) {
  for (const char* line :
       {"What is /usr/bin?", "/usr/bin/ls prints what?", "/ alone", "/2 is a fraction", "", "attach notes.md"}) {
    const ChatCommand got = ParseChatCommand(line);
    EXPECT_EQ(got.kind, Kind::kQuestion) << line;
    EXPECT_EQ(got.text, line);
  }
  const ChatCommand escaped = ParseChatCommand("//help me with this");
  EXPECT_EQ(escaped.kind, Kind::kQuestion);
  EXPECT_EQ(escaped.text, "/help me with this");
}

TEST(ChatCommands, DocumentNumbers) {
  EXPECT_EQ(ParseDocumentNumber("1"), 1u);
  EXPECT_EQ(ParseDocumentNumber(" 12 "), 12u);
  EXPECT_EQ(ParseDocumentNumber("0"), 0u);
  EXPECT_EQ(ParseDocumentNumber(""), 0u);
  EXPECT_EQ(ParseDocumentNumber("-1"), 0u);
  EXPECT_EQ(ParseDocumentNumber("2a"), 0u);
  EXPECT_EQ(ParseDocumentNumber("12345678901234567890"), 0u);
}

TEST(ChatCommands, HelpNamesEveryCommand) {
  const std::string help = ChatCommandHelp();
  for (const char* name : {"/attach", "/private", "/docs", "/detach", "/remove", "/reset", "/quit", "//"})
    EXPECT_NE(help.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace impress
