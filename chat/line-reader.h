// Reading the terminal chat's input a line at a time with a cap on a line's length, so that an
// endless line (`impress chat < /dev/zero`) is refused after the cap instead of growing memory
// without bound. Works on any std::istream; one reader per stream (external synchronization).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>

namespace impress {

// The terminal chat's cap: a question longer than this is refused.
inline constexpr size_t kMaxInputLineBytes = size_t(1) << 20;

enum class LineRead {
  kLine,     // *line holds the next line, without its '\n' (the last line may lack one)
  kTooLong,  // the line has more than max_bytes bytes: max_bytes + 1 of them were read and
             // dropped, the rest is still unread (SkipLine drops it); *line is empty
  kEnd,      // end of input (or a read error) before any byte
};

// Reads the next line into *line, reading at most max_bytes + 1 bytes of it. *line never holds
// more than max_bytes bytes; reuse one string so its buffer is allocated once.
LineRead ReadLineCapped(std::istream& in, size_t max_bytes, std::string* line);

// Reads and drops everything up to and including the next '\n' (or to the end of input),
// holding no more than one byte at a time. Returns the number of bytes dropped.
uint64_t SkipLine(std::istream& in);

}  // namespace impress
