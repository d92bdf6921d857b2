// impress generate / impress chat: one answer, or a terminal conversation, over attached
// documents, through the IMPRESS pipeline and the tiered KV store (docs/design.md section 8).
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "chat/chat-commands.h"
#include "chat/chat-controller.h"
#include "chat/chat-session.h"
#include "chat/document.h"
#include "chat/line-reader.h"
#include "chat/report-json.h"
#include "engine/model/model-loader.h"

namespace impress::app {
namespace {

std::atomic<bool> g_interrupted{false};
void OnSigint(int) { g_interrupted.store(true); }

struct GenerateArgs {
  std::string prompt, prompt_file;
  std::vector<std::string> docs;
  std::vector<std::string> private_docs;  // never shared through the team KV tier
  int max_tokens = 256;
  bool json = false;
  int fidelity = 0;  // greedy tokens compared against full KV; 0 = no check
};

void AddGenerationOptions(CLI::App* cmd, GenerateArgs* a) {
  cmd->add_option("--doc", a->docs, "attach a text document as context (repeatable)");
  cmd->add_option("--private-doc", a->private_docs,
                  "attach a text document that never leaves this machine: a question over it neither reads nor "
                  "publishes the team KV tier (repeatable)");
  cmd->add_option("--max-tokens", a->max_tokens, "most tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--fidelity", a->fidelity,
                  "also run the question with the full prefix KV and compare N greedy tokens")
      ->check(CLI::Range(0, 4096));
}

Result<std::unique_ptr<ChatSession>> OpenSession(const CommonOptions& c, const GenerateArgs& args) {
  std::vector<Document> docs;
  for (const std::string& path : args.docs) {
    IMPRESS_ASSIGN_OR_RETURN(Document doc, LoadDocument(path));
    docs.push_back(std::move(doc));
  }
  for (const std::string& path : args.private_docs) {
    IMPRESS_ASSIGN_OR_RETURN(Document doc, LoadDocument(path));
    doc.is_private = true;
    docs.push_back(std::move(doc));
  }
  const ChatSessionOptions o = SessionOptionsFor(c);
  ProgressBar bar("loading model");
  IMPRESS_ASSIGN_OR_RETURN(auto s, ChatSession::Open(o, bar.AsFn()));
  bar.Finish();
  for (Document& d : docs) s->conversation().AddDocument(std::move(d));
  return s;
}

// One question's options: a prefill progress bar in `*bar` for prompts over 512 tokens, gone at
// the answer's first text, which is streamed to stdout when `print_text`.
AskOptions MakeAskOptions(const CommonOptions& c, const GenerateArgs& args, ChatSession& s,
                          std::unique_ptr<ProgressBar>* bar, bool print_text) {
  AskOptions o = AskOptionsFor(c, s.context().tokenizer().generation_defaults());
  o.max_tokens = args.max_tokens;
  o.cancel = &g_interrupted;
  o.on_prefill_progress = [bar](uint64_t d, uint64_t t, std::string_view w) {
    if (!*bar && t > 512) *bar = std::make_unique<ProgressBar>("prefill");
    if (*bar) (*bar)->Update(d, t, w);
    return true;
  };
  o.on_text = [bar, print_text](const std::string& piece) {
    bar->reset();
    if (print_text) std::cout << piece << std::flush;
    return true;
  };
  return o;
}

void PrintStats(const ChatAnswer& a) {
  const RequestReport& r = a.report;
  const TtftBreakdown& b = r.breakdown;
  std::cerr << fmt::format(
      "\n[{} | TTFT {:.0f} ms (match {:.0f}, probe I/O {:.0f}, probe {:.0f}, KV I/O {:.0f}, copy {:.0f}, compute "
      "{:.0f}) "
      "| reused {} of {} prompt tokens (chunks: device {}, host {}, SSD {}; {:.1f} MB read) | probe passed in {}/{} "
      "layers | decode {:.1f} tok/s | stop: {}]\n",
      SystemName(r.system), r.ttft_ms, b.match_ms, b.probe_io_ms, b.probe_compute_ms, b.kv_io_ms, b.copy_ms,
      b.compute_ms, r.n_matched, r.n_prompt, r.chunks_device, r.chunks_host, r.chunks_ssd,
      double(r.ssd_bytes_read) / 1e6, r.n_layers_passed, r.layers.size(), r.decode_tok_s(), a.stop_reason);
  if (r.team_remote)
    std::cerr << fmt::format(
        "[{} prefix tokens read from the team KV tier layer by layer: {} spans, {:.1f} MB; the whole prefix is "
        "filled here in the background]\n",
        r.team_tokens, r.chunks_team, double(r.team_read_bytes) / 1e6);
  else if (r.team_tokens > 0)
    std::cerr << fmt::format("[{} prefix tokens came from the team KV tier]\n", r.team_tokens);
}

nlohmann::json FidelityJson(const FidelityReport& f) {
  return {{"first_token_match", f.first_token_match}, {"first_token", f.first_token},
          {"first_token_full", f.first_token_full},   {"kl_divergence", f.kl_divergence},
          {"continuation_tokens", f.n_continuation},  {"continuation_match", f.n_continuation_match}};
}

// One line per document for /docs: number, name, tokens, whether the context carries it, private,
// and where its KV is cached.
void PrintDocuments(ChatController& ctl, const ModelConfig& config) {
  const std::vector<ChatDocument>& docs = ctl.documents();
  if (docs.empty()) {
    std::cerr << "no documents; /attach PATH adds one\n";
    return;
  }
  const std::vector<DocumentCacheState> caches = ctl.DocumentCaches();
  const ContextBudget b = ctl.budget();
  for (size_t i = 0; i < docs.size(); ++i) {
    const ChatDocument& d = docs[i];
    std::cerr << fmt::format(
        "{}. {}: {} tokens, {}{}{}\n", i + 1, d.doc.name, d.n_tokens, d.attached ? "attached" : "not attached",
        d.doc.is_private ? ", private" : "",
        d.attached && i < caches.size() && !caches[i].residency.empty() ? "; KV " + caches[i].residency : "");
  }
  std::cerr << fmt::format(
      "the context carries {} of {} document tokens ({} tokens, {} kept for the answer); their KV takes {:.1f} MB\n",
      ctl.context_tokens(), std::max(0, b.DocumentRoom()), b.n_ctx, b.max_tokens,
      double(KvBytes(config, ctl.context_tokens())) / 1e6);
}

// `impress chat`: questions and commands (chat/chat-commands.h) from stdin until /quit or its end.
// The documents go through ChatController, so attaching follows the same rules as in the app (a
// document that does not fit beside the others is listed but not attached, and the user is told).
// False when the session could not be opened.
bool RunTerminalChat(const CommonOptions& common, const GenerateArgs& args) {
  std::vector<Document> docs;  // loaded before the model, so a bad --doc fails at once
  for (const auto* paths : {&args.docs, &args.private_docs}) {
    for (const std::string& path : *paths) {
      auto d = LoadDocument(path);
      if (!d.ok()) {
        spdlog::error("{}", d.status().ToString());
        return false;
      }
      d->is_private = paths == &args.private_docs;
      docs.push_back(std::move(*d));
    }
  }
  GenerateArgs no_docs = args;
  no_docs.docs.clear();
  no_docs.private_docs.clear();
  auto s = OpenSession(common, no_docs);
  if (!s.ok()) {
    spdlog::error("{}", s.status().ToString());
    return false;
  }
  ChatEvents events;
  events.notice = [](const std::string& m) { std::cerr << m << "\n"; };
  ChatController ctl(**s, events);
  ctl.set_max_tokens(args.max_tokens);
  // After an add (the controller has told the user how it went): marks the document private when
  // asked, and says what its KV will take.
  auto say_kv = [&](size_t i) {
    const ChatDocument& d = ctl.documents()[i];
    if (d.attached)  // what its prefill will hold in memory, before the first question computes it
      std::cerr << fmt::format("its KV will take {:.1f} MB; the context carries {} document tokens\n",
                               double(KvBytes((*s)->context().config(), d.n_tokens)) / 1e6, ctl.context_tokens());
  };
  auto added = [&](const Result<size_t>& i, bool is_private) {
    if (!i.ok()) return;
    if (is_private) (void)ctl.SetPrivate(*i, true);
    say_kv(*i);
  };
  auto attach = [&](const std::string& path, bool is_private) {
    if (path.empty()) {
      std::cerr << "which file? " << (is_private ? "/private" : "/attach") << " PATH\n";
      return;
    }
    added(ctl.AddDocument(path), is_private);
  };
  for (Document& d : docs) {
    const bool is_private = d.is_private;
    added(ctl.AddDocument(std::move(d)), is_private);
  }
  std::signal(SIGINT, OnSigint);
  const bool tty = isatty(STDIN_FILENO) == 1;
  std::cerr << fmt::format(
      "IMPRESS chat: {} with {} document(s); KV store: {}. /help lists the commands; Ctrl-C stops an answer; "
      "/quit or Ctrl-D leaves.\n",
      (*s)->context().config().name, ctl.documents().size(),
      (*s)->store() ? (common.store_dir.empty() ? DefaultStoreDir() : common.store_dir) : "off");
  std::string line;
  while (true) {
    if (tty) std::cerr << "\n> " << std::flush;
    const LineRead got = ReadLineCapped(std::cin, kMaxInputLineBytes, &line);
    if (got == LineRead::kEnd) break;
    if (got == LineRead::kTooLong) {
      spdlog::error("input line longer than {} MiB refused; ask a shorter question or /attach the text as a document",
                    kMaxInputLineBytes >> 20);
      SkipLine(std::cin);
      continue;
    }
    if (line.empty()) continue;
    const ChatCommand c = ParseChatCommand(line);
    using Kind = ChatCommand::Kind;
    if (c.kind == Kind::kQuit) break;
    switch (c.kind) {
      case Kind::kHelp: std::cerr << ChatCommandHelp(); continue;
      case Kind::kAttach: {
        // A listed document's number attaches it again; anything else is a path (./2 for a file named 2).
        const size_t n = ParseDocumentNumber(c.text);
        if (n > 0 && n <= ctl.documents().size()) {
          if (ctl.SetAttached(n - 1, true).ok()) say_kv(n - 1);  // refusals are noticed
        } else {
          attach(c.text, false);
        }
        continue;
      }
      case Kind::kDetach: {
        const size_t n = ParseDocumentNumber(c.text);
        if (n == 0 || n > ctl.documents().size()) {
          std::cerr << fmt::format("no document {:?}; /docs numbers them 1 to {}\n", c.text, ctl.documents().size());
        } else if (ctl.SetAttached(n - 1, false).ok()) {
          std::cerr << fmt::format("{} left out of the context (/attach {} takes it back)\n",
                                   ctl.documents()[n - 1].doc.name, n);
        }
        continue;
      }
      case Kind::kPrivate: attach(c.text, true); continue;
      case Kind::kDocs: PrintDocuments(ctl, (*s)->context().config()); continue;
      case Kind::kRemove: {
        const size_t n = ParseDocumentNumber(c.text);
        if (n == 0 || n > ctl.documents().size()) {
          std::cerr << fmt::format("no document {:?}; /docs numbers them 1 to {}\n", c.text, ctl.documents().size());
        } else {
          (void)ctl.RemoveDocument(n - 1);  // noticed
        }
        continue;
      }
      case Kind::kReset: ctl.NewConversation(/*keep_documents=*/true); continue;
      case Kind::kUnknown: std::cerr << "unknown command " << c.text << "; /help lists them\n"; continue;
      case Kind::kQuestion:
      case Kind::kQuit: break;
    }
    g_interrupted.store(false);
    std::unique_ptr<ProgressBar> bar;
    const AskOptions ao = MakeAskOptions(common, args, **s, &bar, /*print_text=*/true);
    auto a = ctl.Ask(c.text, ao, "terminal");
    if (!a.ok()) {
      spdlog::error("{}", a.status().ToString());
      continue;  // the conversation stays usable
    }
    std::cout << "\n";
    PrintStats(*a);
  }
  return true;
}

}  // namespace

void RegisterGenerateCommands(CLI::App& app, CommonOptions* common, int* exit_code) {
  auto gargs = std::make_shared<GenerateArgs>();
  CLI::App* gen = app.add_subcommand("generate", "generate one answer");
  AddCommonOptions(gen, common);
  AddGenerationOptions(gen, gargs.get());
  auto* p = gen->add_option("--prompt", gargs->prompt, "the question or prompt");
  gen->add_option("--prompt-file", gargs->prompt_file, "read the prompt from a file")->excludes(p);
  gen->add_flag("--json", gargs->json, "print one JSON object instead of streaming text");
  gen->callback([=] {
    using WallClock = std::chrono::steady_clock;
    const auto t_start = WallClock::now();
    auto ms_since = [](WallClock::time_point t) {
      return std::chrono::duration<double, std::milli>(WallClock::now() - t).count();
    };
    ConfigureLogging(*common);
    auto fail = [&](const Status& st) {
      spdlog::error("{}", st.ToString());
      *exit_code = 1;
    };
    std::string prompt = gargs->prompt;
    if (!gargs->prompt_file.empty()) {
      auto doc = LoadDocument(gargs->prompt_file);
      if (!doc.ok()) return fail(doc.status());
      prompt = doc->text;
    } else if (prompt.empty()) {
      return fail(Status::InvalidArgument("give --prompt TEXT or --prompt-file FILE"));
    } else if (Status text = CheckText(prompt, "--prompt"); !text.ok()) {
      return fail(text);  // refused as --prompt-file refuses a file
    }
    auto s = OpenSession(*common, *gargs);
    if (!s.ok()) return fail(s.status());
    const double open_ms = ms_since(t_start);
    std::signal(SIGINT, OnSigint);
    std::unique_ptr<ProgressBar> bar;
    AskOptions ao = MakeAskOptions(*common, *gargs, **s, &bar, /*print_text=*/!gargs->json);
    ao.remember = false;
    ao.feed_last = false;  // one answer: no turn follows that would read its last token's KV
    std::optional<FidelityReport> fidelity;
    if (gargs->fidelity > 0) {
      auto f = (*s)->Fidelity(prompt, ao, gargs->fidelity);
      if (!f.ok()) return fail(f.status());
      fidelity = *f;
    }
    const auto t_ask = WallClock::now();
    auto a = (*s)->Ask(prompt, ao);
    if (!a.ok()) return fail(a.status());
    const double ask_ms = ms_since(t_ask);
    const auto t_store = WallClock::now();
    if (auto w = (*s)->pipeline().WaitForStore(); !w.ok())
      spdlog::warn("the answer's KV was not stored: {}", w.status().ToString());
    const double store_ms = ms_since(t_store);
    if (gargs->json) {
      nlohmann::json j = RequestReportJson(a->report);
      // Where the command's own time went (closing the store and the process come after): the
      // session's open (model, tokenizer, store), the question (prompt, team lookup, prefill, the
      // answer) and the wait for the answer's KV to be stored.
      j["process_ms"] = {{"open", open_ms},
                         {"ask", ask_ms},
                         {"outside_ttft", ask_ms - a->report.ttft_ms - a->report.team_ms - a->report.decode_ms},
                         {"store", store_ms},
                         {"total", ms_since(t_start)}};
      j["text"] = a->text;
      j["tokens"] = a->tokens;
      j["stop_reason"] = a->stop_reason;
      if (fidelity) j["fidelity"] = FidelityJson(*fidelity);
      if ((*s)->store() && !common->team_url.empty()) {
        // Publishing runs in the background; closing the store waits for it (bounded).
        j["team"] = TeamTierJson((*s)->store()->Stats().team);
      }
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "\n";
      PrintStats(*a);
      if (fidelity) {
        std::cerr << fmt::format("[fidelity vs full KV: first token {}, KL {:.4f}, greedy {}/{} tokens equal]\n",
                                 fidelity->first_token_match ? "matches" : "differs", fidelity->kl_divergence,
                                 fidelity->n_continuation_match, fidelity->n_continuation);
      }
    }
  });

  auto cargs = std::make_shared<GenerateArgs>();
  CLI::App* chat =
      app.add_subcommand("chat", "chat in the terminal over attached documents (/help lists its commands)");
  AddCommonOptions(chat, common);
  AddGenerationOptions(chat, cargs.get());
  chat->callback([=] {
    ConfigureLogging(*common);
    if (!RunTerminalChat(*common, *cargs)) *exit_code = 1;
  });
}

}  // namespace impress::app
