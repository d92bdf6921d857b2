#include "gui/script.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>
#include <sstream>

#include "gui/snapshot-math.h"
#include "pipeline/system-policy.h"

namespace impress::gui {

namespace {

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

bool ParseDouble(const std::string& v, double* out) {
  const char* b = v.data();
  const char* e = b + v.size();
  auto r = std::from_chars(b, e, *out);
  return r.ec == std::errc() && r.ptr == e;
}

const std::set<std::string> kNoArg = {"again", "regenerate", "new",  "reorder",      "expect-answer",
                                      "quit",  "docs",       "tree", "conversations"};
const std::set<std::string> kWithArg = {"doc",        "ask",    "set",   "frames",   "sleep", "tab",
                                        "screenshot", "pin",    "unpin", "drop-doc", "mode",  "open",
                                        "model",      "picker", "pull",  "private",  "shared"};

}  // namespace

Status ApplySetting(TuningSettings& s, const std::string& key, const std::string& value) {
  PipelineSettings& p = s.pipeline;
  if (key == "system") {
    if (!ParseSystem(value, &p.system))
      return Status::InvalidArgument("set system: '" + value + "' is not one of " + SystemNames(", "));
    return Status::Ok();
  }
  if (key == "policy") {
    auto k = store::ParsePolicyKind(value);
    if (!k.ok()) return k.status().WithContext("set policy");
    s.policy = *k;
    return Status::Ok();
  }
  double v = 0;
  if (!ParseDouble(value, &v)) return Status::InvalidArgument("set " + key + ": '" + value + "' is not a number");
  auto in = [&](double lo, double hi) {
    return v >= lo && v <= hi ? Status::Ok()
                              : Status::InvalidArgument(fmt::format("set {}: {} is outside [{}, {}]", key, v, lo, hi));
  };
  if (key == "alpha") {
    IMPRESS_RETURN_IF_ERROR(in(0, 2));
    p.alpha = float(v);
  } else if (key == "keep") {
    IMPRESS_RETURN_IF_ERROR(in(0.01, 1));
    p.keep = float(v);
  } else if (key == "probe_heads") {
    IMPRESS_RETURN_IF_ERROR(in(1, 64));
    p.probe_heads = int(v);
  } else if (key == "sinks") {
    IMPRESS_RETURN_IF_ERROR(in(0, 1024));
    p.sinks = int(v);
  } else if (key == "recent") {
    IMPRESS_RETURN_IF_ERROR(in(0, 8192));
    p.recent = int(v);
  } else if (key == "device_mb") {
    IMPRESS_RETURN_IF_ERROR(in(0, 1 << 20));
    s.device_budget_mb = v;
  } else if (key == "host_mb") {
    IMPRESS_RETURN_IF_ERROR(in(0, 1 << 22));
    s.host_budget_mb = v;
  } else if (key == "ssd_mb") {
    IMPRESS_RETURN_IF_ERROR(in(1, 1 << 24));
    s.ssd_budget_mb = v;
  } else if (key == "max_tokens") {
    IMPRESS_RETURN_IF_ERROR(in(1, 8192));
    s.max_tokens = int(v);
  } else if (key == "temperature") {
    IMPRESS_RETURN_IF_ERROR(in(0, 5));
    s.sampling.temperature = float(v);
    s.sampling.user_set = true;
  } else if (key == "fidelity_tokens") {
    IMPRESS_RETURN_IF_ERROR(in(0, 256));
    s.fidelity_tokens = int(v);
  } else return Status::InvalidArgument("set: unknown key '" + key + "'");
  return Status::Ok();
}

Result<std::vector<ScriptLine>> ParseScript(const std::string& text, const std::string& what) {
  std::vector<ScriptLine> out;
  std::istringstream in(text);
  std::string raw;
  int n = 0;
  while (std::getline(in, raw)) {
    ++n;
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find_first_of(" \t");
    ScriptLine l{n, line.substr(0, sp), sp == std::string::npos ? "" : Trim(line.substr(sp))};
    auto bad = [&](const std::string& why) { return Status::InvalidArgument(fmt::format("{}:{}: {}", what, n, why)); };
    if (l.verb == "wait") {
      double v = 0;
      if (!l.arg.empty() && (!ParseDouble(l.arg, &v) || v <= 0)) return bad("wait takes a positive number of seconds");
    } else if (kNoArg.count(l.verb)) {
      if (!l.arg.empty()) return bad("'" + l.verb + "' takes no argument");
    } else if (kWithArg.count(l.verb)) {
      if (l.arg.empty()) return bad("'" + l.verb + "' needs an argument");
      double v = 0;
      if ((l.verb == "frames" || l.verb == "sleep") && (!ParseDouble(l.arg, &v) || v < 0))
        return bad("'" + l.verb + "' takes a non-negative number");
      if (l.verb == "tab") {
        const auto& names = InspectorTabNames();
        if (std::find(names.begin(), names.end(), l.arg) == names.end()) return bad("unknown tab '" + l.arg + "'");
      }
      if (l.verb == "set") {
        const size_t k = l.arg.find_first_of(" \t");
        if (k == std::string::npos) return bad("set needs KEY VALUE");
        TuningSettings probe;
        if (Status st = ApplySetting(probe, l.arg.substr(0, k), Trim(l.arg.substr(k))); !st.ok())
          return bad(st.message());
      }
    } else {
      return bad("unknown command '" + l.verb + "'");
    }
    out.push_back(std::move(l));
  }
  return out;
}

ScriptRunner::ScriptRunner(std::vector<ScriptLine> lines, std::FILE* out) : lines_(std::move(lines)), out_(out) {}

bool ScriptRunner::Fail(const ScriptLine& l, const std::string& why) {
  failed_ = true;
  error_ = fmt::format("script line {} ({} {}): {}", l.line, l.verb, l.arg, why);
  return false;
}

void ScriptRunner::PrintNewAnswers(const AppSnapshot& s) {
  const uint64_t n_new =
      std::min<uint64_t>(s.messages_total - std::min(s.messages_total, n_messages_seen_), s.messages.size());
  for (size_t i = s.messages.size() - n_new; i < s.messages.size(); ++i)
    std::fprintf(out_, "message: %s\n", s.messages[i].c_str());
  n_messages_seen_ = s.messages_total;
  if (s.chat_epoch != chat_epoch_seen_) {  // the chat was cut: entries after chat_kept are new
    n_chat_seen_ = std::min(n_chat_seen_, s.chat_kept);
    chat_epoch_seen_ = s.chat_epoch;
  }
  for (; n_chat_seen_ < s.chat.size(); ++n_chat_seen_) {
    const ChatEntry& e = s.chat[n_chat_seen_];
    if (e.saved) {
      std::string one_line = e.text;
      std::replace(one_line.begin(), one_line.end(), '\n', ' ');
      std::fprintf(out_, "saved %s: %s\n", e.role.c_str(), one_line.c_str());
    } else if (e.role == "assistant" && !e.streaming) {
      ++n_printed_;
      std::string one_line = e.text;
      std::replace(one_line.begin(), one_line.end(), '\n', ' ');
      std::fprintf(out_, "answer %d: %s\n", n_printed_, one_line.c_str());
      if (e.request) {
        const RequestReport& r = e.request->report;
        std::fprintf(out_, "  [%s] TTFT %.0f ms, %.1f tok/s, %s, probe passed %d/%zu layers, stop %s\n",
                     e.request->label.c_str(), r.ttft_ms, e.request->tokens_per_s, ReuseSummary(r).c_str(),
                     CountPassed(r.layers), r.layers.size(), e.request->stop_reason.c_str());
        if (!e.request->passages.empty()) {
          std::string names;
          for (const std::string& n : e.request->passages) names += (names.empty() ? "" : "; ") + n;
          std::fprintf(out_, "  passages: %s\n", names.c_str());
        }
        if (e.request->has_fidelity)
          std::fprintf(out_, "  fidelity: first token %s, KL %.4f, %d/%d greedy tokens equal\n",
                       e.request->fidelity.first_token_match ? "matches" : "differs", e.request->fidelity.kl_divergence,
                       e.request->fidelity.n_continuation_match, e.request->fidelity.n_continuation);
      }
    } else if (e.role == "error") {
      std::fprintf(out_, "error: %s\n", e.text.c_str());
    }
  }
  std::fflush(out_);
}

bool ScriptRunner::Tick(const AppSnapshot& s, UiState& ui, UiActions& actions, ScriptHost& host) {
  const auto now = std::chrono::steady_clock::now();
  if (failed_) return false;
  if (frames_left_ > 0) {
    --frames_left_;
    return true;
  }
  if (now < sleep_until_) return true;
  while (pc_ < lines_.size()) {
    const ScriptLine& l = lines_[pc_];
    if (l.verb == "wait") {
      if (!actions.commands.empty()) return true;  // let this frame send them first
      if (!waiting_) {
        waiting_ = true;
        double secs = kDefaultWaitSeconds;
        if (!l.arg.empty()) secs = std::stod(l.arg);
        wait_until_ = now + std::chrono::milliseconds(int64_t(secs * 1000));
      }
      if (s.phase == WorkerPhase::kFailed) return Fail(l, "the worker failed: " + s.status);
      const bool done = s.commands_done >= host.commands_sent() && (s.phase == WorkerPhase::kIdle);
      if (!done) {
        if (now > wait_until_) return Fail(l, "timed out waiting for the worker (" + s.status + ")");
        return true;  // next frame
      }
      waiting_ = false;
      PrintNewAnswers(s);
      ++pc_;
      frames_left_ = 2;  // let the panels draw the new snapshot before the next line
      return true;
    }
    ++pc_;
    if (l.verb == "doc") actions.commands.push_back(MakeCommand(Command::Kind::kAddDocument, l.arg));
    else if (l.verb == "model") actions.commands.push_back(MakeCommand(Command::Kind::kLoadModel, l.arg));
    else if (l.verb == "pull") actions.pull_model = l.arg;  // as the picker's Download button
    else if (l.verb == "ask") actions.commands.push_back(MakeCommand(Command::Kind::kAsk, l.arg));
    else if (l.verb == "again") actions.commands.push_back(MakeCommand(Command::Kind::kAskAgain));
    else if (l.verb == "regenerate") actions.commands.push_back(MakeCommand(Command::Kind::kRegenerate));
    else if (l.verb == "new") actions.commands.push_back(MakeCommand(Command::Kind::kNewConversation));
    else if (l.verb == "reorder") actions.commands.push_back(MakeCommand(Command::Kind::kReorderNow));
    else if (l.verb == "pin" || l.verb == "unpin")
      actions.commands.push_back(MakeCommand(Command::Kind::kPinDocument, {}, std::stoi(l.arg) - 1, l.verb == "pin"));
    else if (l.verb == "private" || l.verb == "shared")
      actions.commands.push_back(
          MakeCommand(Command::Kind::kSetPrivate, {}, std::stoi(l.arg) - 1, l.verb == "private"));
    else if (l.verb == "drop-doc")
      actions.commands.push_back(MakeCommand(Command::Kind::kDropDocumentCache, {}, std::stoi(l.arg) - 1));
    else if (l.verb == "mode")
      actions.commands.push_back(MakeCommand(Command::Kind::kSetRetrieval, {}, -1, l.arg == "retrieval"));
    else if (l.verb == "open") {
      const size_t k = size_t(std::stoi(l.arg) - 1);
      if (k >= s.conversations.size())
        return Fail(l, fmt::format("there are {} saved conversations", s.conversations.size()));
      actions.commands.push_back(ConversationCommand(Command::Kind::kOpenConversation, s.conversations[k].id));
    } else if (l.verb == "docs") {
      PrintNewAnswers(s);
      for (size_t i = 0; i < s.documents.size(); ++i) {
        const DocumentEntry& d = s.documents[i];
        std::fprintf(out_, "document %zu: %s | %d tokens | span %d-%d | cached %llu device %llu host %llu | %s%s%s\n",
                     i + 1, d.name.c_str(), d.n_tokens, d.span_begin, d.span_end, (unsigned long long)d.tokens_cached,
                     (unsigned long long)d.tokens_device, (unsigned long long)d.tokens_host,
                     d.pinned ? "pinned | " : "", d.is_private ? "private | " : "", d.residency.c_str());
      }
      std::fflush(out_);
    } else if (l.verb == "tree") {
      PrintNewAnswers(s);
      if (!s.tree) std::fprintf(out_, "tree: none\n");
      else {
        uint64_t tokens = 0, pinned = 0;
        for (const TreeRow& r : s.tree->rows) {
          tokens += r.n_tokens;
          if (r.pinned) pinned += r.n_tokens;
        }
        std::fprintf(out_, "tree: %zu nodes, %llu tokens, %llu pinned tokens\n", s.tree->rows.size(),
                     (unsigned long long)tokens, (unsigned long long)pinned);
      }
      std::fflush(out_);
    } else if (l.verb == "conversations") {
      PrintNewAnswers(s);
      for (const ConversationEntry& c : s.conversations)
        std::fprintf(out_, "conversation %lld: %s | %d turns | %d documents%s\n", (long long)c.id, c.title.c_str(),
                     c.n_turns, c.n_documents, c.id == s.conversation_id ? " | open" : "");
      std::fflush(out_);
    } else if (l.verb == "set") {
      if (ui.settings.synced_version == 0) {
        ui.settings.edit = s.settings;
        ui.settings.synced_version = 1;
      }
      const size_t k = l.arg.find_first_of(" \t");
      if (Status st = ApplySetting(ui.settings.edit, l.arg.substr(0, k), Trim(l.arg.substr(k))); !st.ok())
        return Fail(l, st.message());
      actions.commands.push_back(SettingsCommand(ui.settings.edit));
    } else if (l.verb == "frames") {
      frames_left_ = int(std::stod(l.arg));
      return true;
    } else if (l.verb == "sleep") {
      sleep_until_ = now + std::chrono::milliseconds(int64_t(std::stod(l.arg)));
      return true;
    } else if (l.verb == "picker") {
      // The "Open model" dialog on a folder, or on a model's folder with that model selected.
      std::error_code ec;
      const bool folder = std::filesystem::is_directory(l.arg, ec) &&
                          !std::filesystem::exists(std::filesystem::path(l.arg) / "config.json", ec);
      ui.model.dir = folder ? l.arg : std::filesystem::path(l.arg).parent_path().string();
      ui.model.selected = folder ? std::string() : l.arg;
      ui.model.estimated_at = -1;
      ui.model.open_requested = true;
      frames_left_ = 3;  // the popup opens, lays out, then draws its listing
      return true;
    } else if (l.verb == "tab") {
      const auto& names = InspectorTabNames();
      ui.inspector_tab = int(std::find(names.begin(), names.end(), l.arg) - names.begin());
      frames_left_ = 2;
      return true;
    } else if (l.verb == "screenshot") {
      host.RequestScreenshot(l.arg);
      frames_left_ = 1;
      return true;
    } else if (l.verb == "expect-answer") {
      PrintNewAnswers(s);
      const auto it = std::find_if(s.chat.rbegin(), s.chat.rend(),
                                   [](const ChatEntry& e) { return e.role == "assistant" || e.role == "error"; });
      if (it == s.chat.rend() || it->role != "assistant" || it->text.empty())
        return Fail(l, "the last answer is missing or empty");
    } else if (l.verb == "quit") {
      PrintNewAnswers(s);
      pc_ = lines_.size();
      return false;
    }
  }
  PrintNewAnswers(s);
  return false;
}

}  // namespace impress::gui
