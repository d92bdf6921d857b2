// The terminal chat's commands (`impress chat`): a line whose first word is a slash and letters
// ("/attach notes.md", "/docs") is a command, anything else a question. A line that starts with
// two slashes is a question without its first slash ("//usr/bin is ..." asks "/usr/bin is ..."),
// and so is a line whose first word has more than letters after its slash ("/usr/bin/ls?").
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace impress {

struct ChatCommand {
  enum class Kind {
    kQuestion,  // `text` is the question
    kHelp,
    kAttach,   // `text`: the path, or the number of a listed document to attach again
    kDetach,   // `text`: the document's number; it stays listed
    kPrivate,  // attach a document that never leaves the machine; `text`: the path
    kRemove,   // `text`: the document's number (as /docs lists them)
    kDocs,
    kReset,
    kQuit,
    kUnknown,  // `text`: the command as typed
  };
  Kind kind = Kind::kQuestion;
  std::string text;
};

ChatCommand ParseChatCommand(std::string_view line);

// What /help prints: one line per command.
std::string ChatCommandHelp();

// A 1-based document number from /remove's, /detach's or /attach's argument; 0 when it is not a
// positive number.
size_t ParseDocumentNumber(std::string_view s);

}  // namespace impress
