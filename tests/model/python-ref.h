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

// Runs `python tests/model/<script> <args>`; returns its exit status (-1 when it could not run).
inline int RunReferenceScript(const std::string& script, const std::string& args) {
  const std::string py = ReferencePython();
  if (py.empty() || !std::filesystem::exists(py)) return -1;
  const std::string cmd = "'" + py + "' '" + SourceDir() + "/tests/model/" + script + "' " + args;
  const int rc = std::system(cmd.c_str());
  return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace impress::test
