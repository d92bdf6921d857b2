// Test helper: runs a reference script under tests/model/ with the reference Python
// ($IMPRESS_PYTHON, else the interpreter the build was configured with).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace impress::test {

inline std::string ReferencePython() {
  if (const char* p = std::getenv("IMPRESS_PYTHON"); p && *p) return p;
#ifdef IMPRESS_PYTHON_DEFAULT
  return IMPRESS_PYTHON_DEFAULT;
#else
  return "";
#endif
}

inline std::string SourceDir() {
  if (const char* p = std::getenv("IMPRESS_SOURCE_DIR"); p && *p) return p;
#ifdef IMPRESS_SOURCE_DIR
  return IMPRESS_SOURCE_DIR;
#else
  return ".";
#endif
}

// Runs `python tests/model/<script> <args>`; returns its exit status. -1 means only "no reference
// python" (the caller may skip); a script killed by signal N returns 128 + N and a failed fork
// 127, so both fail the test like any other non-zero status.
inline int RunReferenceScript(const std::string& script, const std::string& args) {
  const std::string py = ReferencePython();
  if (py.empty() || !std::filesystem::exists(py)) return -1;
  const std::string cmd = "'" + py + "' '" + SourceDir() + "/tests/model/" + script + "' " + args;
  const int rc = std::system(cmd.c_str());
  if (rc == -1) return 127;
  if (WIFSIGNALED(rc)) return 128 + WTERMSIG(rc);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace impress::test
