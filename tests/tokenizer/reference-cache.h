// Test helper: runs a reference script of tests/tokenizer/ with the reference python once and
// caches its output folder in the temp dir, keyed by the script, the default model, the sample
// document and the reference packages' pinned versions, so the many processes ctest starts (one
// per test) share one run.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/default-model.h"

namespace impress::testing_tokenizer {

inline std::string SourceDir() {
  const char* e = std::getenv("IMPRESS_SOURCE_DIR");
  return e ? e : IMPRESS_SOURCE_DIR;
}

using ::impress::test_support::DefaultModel;

inline std::string Python() {
  if (const char* e = std::getenv("IMPRESS_PYTHON"); e && *e) return e;
#ifdef IMPRESS_PYTHON_PATH
  if (*IMPRESS_PYTHON_PATH) return IMPRESS_PYTHON_PATH;
#endif
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/impress/venv/bin/python";
}

inline std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `python tests/tokenizer/<script> MODEL OUT_DIR` unless a cached OUT_DIR exists; the
// script writes OUT_DIR/done last. Returns OUT_DIR, or "" with *skip_reason set (no venv or
// model: skip) or empty (the script failed: a test failure has been added).
inline std::string CachedReference(const std::string& script_name, std::string* skip_reason) {
  namespace fs = std::filesystem;
  const std::string py = Python(), model = DefaultModel();
  const fs::path script = fs::path(SourceDir()) / "tests/tokenizer" / script_name;
  if (!fs::exists(py)) {
    *skip_reason = "no reference python at " + py + " (run scripts/setup.sh)";
    return "";
  }
  if (!fs::exists(model)) {
    *skip_reason = "no default model at " + model;
    return "";
  }
  std::string inputs = ReadAll(script) + model + std::to_string(fs::file_size(model)) +
                       ReadAll(fs::path(SourceDir()) / "assets/docs/gpl-3.0.txt") +
                       ReadAll(fs::path(SourceDir()) / "scripts/requirements-reference.txt");  // package versions
  // Assets the scripts read (chat templates): a change reruns them.
  const fs::path assets = fs::path(SourceDir()) / "tests/tokenizer/templates";
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(assets, ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) inputs += f.filename().string() + ReadAll(f);
  const size_t key = std::hash<std::string>()(inputs);
  const fs::path dir = fs::temp_directory_path() / ("impress-" + script.stem().string() + "-" + std::to_string(key));
  if (fs::exists(dir / "done")) return dir.string();
  const fs::path tmp = dir.string() + ".tmp" + std::to_string(getpid());
  const std::string cmd = "'" + py + "' '" + script.string() + "' '" + model + "' '" + tmp.string() + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    skip_reason->clear();
    ADD_FAILURE() << "reference script failed (rc " << rc << "): " << cmd;
    return "";
  }
  fs::rename(tmp, dir, ec);  // another process may have won the race: use its copy
  if (ec) fs::remove_all(tmp, ec);
  return dir.string();
}

}  // namespace impress::testing_tokenizer
