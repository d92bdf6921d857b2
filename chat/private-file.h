// Private files of the chat layer: the saved conversations (conversations.db) and the passage
// index hold the user's documents, questions and answers, so they are created readable by
// their owner only. Stateless functions; any thread.
#pragma once

#include <string>

#include "base/status.h"

namespace impress {

// Prepares `path` for an SQLite database holding private data: creates its missing parent
// folders with mode 0700 and, when the file does not exist, creates it empty with mode 0600
// (a stricter umask still applies). SQLite then gives
// its -wal and -shm files the database file's mode. An existing file is left as it is.
// InvalidArgument when `path` (or a folder on the way) is not a
// regular file (folder); IOError naming the path when the system refuses. SQLite's special
// names ("", ":memory:", "file:" URIs) are left to SQLite.
Status PreparePrivateFile(const std::string& path);

// Removes group and other permissions from the database at `path` and its -wal, -shm and
// -journal files when they are ours (made by an older build, or under a looser umask). Called
// once the file is known to be ours: a foreign file that Open refuses is left unchanged.
Status RestrictToOwner(const std::string& path);

}  // namespace impress
