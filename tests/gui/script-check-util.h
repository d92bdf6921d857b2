// Helpers shared by the scripted GUI checks (tests/gui/gui-*-check.cpp): where the default model
// is, whether a program is on PATH, running a command for its output, and one answer's report.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/default-model.h"

namespace impress::gui::check {

using ::impress::test_support::DefaultModel;

inline bool OnPath(const std::string& exe) {
  return std::system(("command -v " + exe + " >/dev/null 2>&1").c_str()) == 0;
}

// stdout and stderr of `cmd` (append 2>&1 to get both); *status = pclose's status.
inline std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

// The report printed under "answer N:" (its indented lines: TTFT, passages, fidelity), so
// each answer's checks read that answer's report and no later one. "" if there is none.
inline std::string AnswerReport(const std::string& out, int n) {
  const std::string tag = "answer " + std::to_string(n) + ":";
  size_t at = out.find(tag);
  if (at == std::string::npos) return "";
  at = out.find('\n', at);
  std::string report;
  while (at != std::string::npos && out.compare(at + 1, 2, "  ") == 0) {
    const size_t end = out.find('\n', at + 1);
    report += out.substr(at + 1, end == std::string::npos ? std::string::npos : end - at);
    at = end;
  }
  return report;
}

}  // namespace impress::gui::check
