// ScriptRunner: the `impress gui --script FILE` command language, for CI and demos. The UI
// thread runs it between frames, so a script drives the real window exactly as a user would
// (commands to the worker, settings through the Settings panel's state, screenshots of frames).
//
//   # comment                 doc PATH            ask TEXT          again (ask again + fidelity)
//   regenerate                new                 reorder           set KEY VALUE
//   wait [SECONDS]            (until the worker has done everything sent; prints new answers.
//                              SECONDS only guards against a hang: default kDefaultWaitSeconds)
//   frames N                  sleep MS            tab ttft|tiers|tree
//   screenshot PATH           expect-answer       quit
//   pin N / unpin N / drop-doc N   (document N's cache, 1-based)
//   private N / shared N          (document N never / may go to the team KV tier)     mode documents|retrieval
//   docs / tree / conversations    (print the documents' residency, the radix tree's totals, the saved conversations)
//   open N                    (reopen saved conversation N of the list, most recent first)
//   model PATH                (switch to the model at PATH, as the model picker's Load does)
//   picker PATH               (open the model picker on a folder, or with the model at PATH selected)
//   pull NAME                 (start downloading the known model NAME, as the picker's Download does)
// set keys: alpha keep probe_heads sinks recent system policy device_mb host_mb ssd_mb
//           max_tokens temperature fidelity_tokens
//
// Thread contract: UI thread only.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "gui/panels.h"

namespace impress::gui {

struct ScriptLine {
  int line = 0;  // 1-based, for messages
  std::string verb;
  std::string arg;  // the rest of the line, trimmed
};

// Checks every verb and argument up front, so a typo fails before the model loads.
// Errors name `what` (the file) and the line.
Result<std::vector<ScriptLine>> ParseScript(const std::string& text, const std::string& what);

// Applies `set KEY VALUE` to settings; InvalidArgument naming the key or value.
Status ApplySetting(TuningSettings& s, const std::string& key, const std::string& value);

// What the runner needs from the frame loop.
struct ScriptHost {
  virtual ~ScriptHost() = default;
  virtual uint64_t commands_sent() const = 0;
  virtual void RequestScreenshot(const std::string& path) = 0;  // taken after this frame renders
};

class ScriptRunner {
 public:
  // A `wait` without SECONDS fails after this long: a hang guard, far above any answer's time on
  // a loaded machine (checks wait for the worker's event, never for a time).
  static constexpr double kDefaultWaitSeconds = 3600;

  ScriptRunner(std::vector<ScriptLine> lines, std::FILE* out);
  // One step per frame. Returns false when the script is finished (quit, end, or failure).
  bool Tick(const AppSnapshot& s, UiState& ui, UiActions& actions, ScriptHost& host);
  bool failed() const { return failed_; }
  const std::string& error() const { return error_; }
  int answers_printed() const { return n_printed_; }

 private:
  bool Fail(const ScriptLine& l, const std::string& why);
  void PrintNewAnswers(const AppSnapshot& s);

  std::vector<ScriptLine> lines_;
  std::FILE* out_;
  size_t pc_ = 0;         // next line
  int frames_left_ = 0;   // frames to wait before the next line
  bool waiting_ = false;  // inside `wait`
  std::chrono::steady_clock::time_point wait_until_;
  std::chrono::steady_clock::time_point sleep_until_;
  size_t n_chat_seen_ = 0;        // chat entries already scanned for answers
  uint64_t chat_epoch_seen_ = 0;  // AppSnapshot::chat_epoch when n_chat_seen_ was last valid
  uint64_t n_messages_seen_ = 0;  // messages already printed
  int n_printed_ = 0;
  bool failed_ = false;
  std::string error_;
};

}  // namespace impress::gui
