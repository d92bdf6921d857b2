// Documents a user attaches to a conversation: loading a file as text, with the checks that
// turn bad input into a clear message (missing, not a regular file, too large, binary, invalid
// UTF-8). Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace impress {

struct Document {
  std::string path;  // as given
  std::string name;  // file name, for prompts and the UI
  std::string text;  // valid UTF-8, without a BOM; CRLF normalised to LF
  // Never leaves the machine: a request whose prompt holds it neither asks the team KV tier nor
  // publishes to it (store/prefix-store.h TeamOptions).
  bool is_private = false;
};

struct DocumentLimits {
  uint64_t max_bytes = 64ull << 20;  // larger files are refused (the context could not hold them anyway)
};

// Validates that `bytes` is text: valid UTF-8 with no NUL bytes and few control characters.
// `what` names the source in the error ("notes.md").
Status CheckText(std::string_view bytes, const std::string& what);

// Index of the first byte that is not part of a valid UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view bytes);

Result<Document> LoadDocument(const std::string& path, const DocumentLimits& limits = {});

// Text for a one-line label: newlines shown as "\\n", tabs as spaces, other control characters
// left out; cut after `max_bytes` bytes with "...".
std::string OneLine(const std::string& s, size_t max_bytes);

}  // namespace impress
