// impress generate / impress chat: one answer, or a terminal conversation, over attached
// documents with the model's chat template.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <iostream>

#include "app/commands.h"
#include "app/progress-bar.h"
#include "engine/compute/forward.h"
#include "engine/pipeline/conversation.h"
#include "engine/pipeline/model-context.h"

namespace impress::app {
namespace {

std::atomic<bool> g_interrupted{false};

struct GenerateArgs {
  std::string prompt, prompt_file;
  std::vector<std::string> docs;
  int max_tokens = 256;
  int n_ctx = 0;
  bool json = false;
  std::string backend = "cpu";
};

void AddGenerationOptions(CLI::App* cmd, GenerateArgs* a) {
  cmd->add_option("--doc", a->docs, "attach a text document as context (repeatable)");
  cmd->add_option("--max-tokens", a->max_tokens, "most tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--ctx", a->n_ctx, "context length (0 = the model's)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", a->backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
}

// Everything one answer needs, loaded once.
struct Session {
  std::unique_ptr<ModelContext> ctx;
  std::unique_ptr<Generator> gen;
  Conversation conversation;
};

Result<Session> OpenSession(const CommonOptions& common, const GenerateArgs& args) {
  Session s;
  for (const std::string& path : args.docs) {
    IMPRESS_ASSIGN_OR_RETURN(Document doc, LoadDocument(path));
    s.conversation.AddDocument(std::move(doc));
  }
  {
    ProgressBar bar("loading model");
    IMPRESS_ASSIGN_OR_RETURN(s.ctx, ModelContext::Load(ResolveModelPath(common),
                                                       ModelContextOptions{.n_threads = common.threads,
                                                                           .backend = args.backend},
                                                       bar.AsFn()));
  }
  IMPRESS_ASSIGN_OR_RETURN(s.gen, Generator::Create(s.ctx->model(), s.ctx->backend(),
                                                    GeneratorOptions{.n_ctx = args.n_ctx}));
  return s;
}

struct Answer {
  std::string text;
  GenerateResult result;
  int n_reused = 0;
};

// Prefills what the generator's cache does not already hold, then generates, streaming text
// to `out` when given.
Result<Answer> Ask(Session& s, const CommonOptions& common, const GenerateArgs& args, const PromptTokens& prompt,
                   std::ostream* out) {
  const Tokenizer& tok = s.ctx->tokenizer();
  if (int64_t(prompt.tokens.size()) + args.max_tokens > s.gen->n_ctx()) {
    return Status::OutOfRange(fmt::format(
        "the prompt is {} tokens and up to {} more are asked for, but the context holds {} tokens; "
        "attach less text or lower --max-tokens",
        prompt.tokens.size(), args.max_tokens, s.gen->n_ctx()));
  }
  s.gen->Reset();
  GenerateOptions go;
  go.max_tokens = args.max_tokens;
  go.sampling = SamplerOptions{.temperature = common.temperature,
                               .top_k = common.top_k,
                               .top_p = common.top_p,
                               .repeat_penalty = common.repeat_penalty,
                               .seed = common.seed};
  go.stop_tokens = s.ctx->stop_tokens();
  go.cancel = &g_interrupted;
  StreamDecoder decoder(tok);
  Answer answer;
  std::unique_ptr<ProgressBar> bar;
  if (prompt.tokens.size() > 256) bar = std::make_unique<ProgressBar>("prefill");
  go.on_prefill_progress = [&](uint64_t done, uint64_t total, std::string_view what) {
    if (bar) bar->Update(done, total, what);
    return true;
  };
  go.on_token = [&](int32_t id) {
    if (bar) bar.reset();
    if (tok.IsEndOfGeneration(id)) return true;
    std::string piece = decoder.Push(id);
    answer.text += piece;
    if (out) *out << piece << std::flush;
    return true;
  };
  IMPRESS_ASSIGN_OR_RETURN(answer.result, s.gen->Generate(prompt.tokens, go));
  const std::string rest = decoder.Flush();
  answer.text += rest;
  if (out) *out << rest << std::flush;
  return answer;
}

double TokPerSec(int n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }

void PrintStats(const Answer& a) {
  const auto& r = a.result;
  const int n_decode = std::max<int>(0, int(r.tokens.size()) - 1);
  std::cerr << fmt::format("\n[TTFT {:.0f} ms | prefill {} tokens at {:.0f} tok/s | decode {:.1f} tok/s]\n", r.ttft_ms,
                           r.n_prompt, TokPerSec(r.n_prompt, r.prefill_ms), TokPerSec(n_decode, r.decode_ms));
}

nlohmann::json AnswerJson(const Answer& a) {
  const auto& r = a.result;
  const int n_decode = std::max<int>(0, int(r.tokens.size()) - 1);
  return {{"text", a.text},
          {"tokens", r.tokens},
          {"n_prompt", r.n_prompt},
          {"ttft_ms", r.ttft_ms},
          {"prefill_ms", r.prefill_ms},
          {"decode_ms", r.decode_ms},
          {"prefill_tok_s", TokPerSec(r.n_prompt, r.prefill_ms)},
          {"decode_tok_s", TokPerSec(n_decode, r.decode_ms)},
          {"reused_tokens", a.n_reused},
          {"system", "recomp"}};
}

void OnSigint(int) { g_interrupted.store(true); }

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
    }
    auto s = OpenSession(*common, *gargs);
    if (!s.ok()) return fail(s.status());
    const PromptTokens tokens =
        s->conversation.Build(prompt, s->ctx->tokenizer(), s->ctx->chat_template(), common->raw);
    std::signal(SIGINT, OnSigint);
    auto a = Ask(*s, *common, *gargs, tokens, gargs->json ? nullptr : &std::cout);
    if (!a.ok()) return fail(a.status());
    if (gargs->json) {
      std::cout << AnswerJson(*a).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "\n";
      PrintStats(*a);
    }
  });

  auto cargs = std::make_shared<GenerateArgs>();
  CLI::App* chat = app.add_subcommand("chat", "chat in the terminal over attached documents");
  AddCommonOptions(chat, common);
  AddGenerationOptions(chat, cargs.get());
  chat->callback([=] {
    ConfigureLogging(*common);
    auto s = OpenSession(*common, *cargs);
    if (!s.ok()) {
      spdlog::error("{}", s.status().ToString());
      *exit_code = 1;
      return;
    }
    std::signal(SIGINT, OnSigint);
    const bool tty = isatty(STDIN_FILENO) == 1;
    std::cerr << fmt::format("IMPRESS chat: {} ({} document(s) attached). Ctrl-C stops an answer; /reset "
                             "forgets the conversation; /quit or Ctrl-D leaves.\n",
                             s->ctx->config().name, s->conversation.documents().size());
    std::string line;
    while (true) {
      if (tty) std::cerr << "\n> " << std::flush;
      if (!std::getline(std::cin, line)) break;
      if (line.empty()) continue;
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        s->conversation.ClearTurns();
        continue;
      }
      g_interrupted.store(false);
      const PromptTokens tokens =
          s->conversation.Build(line, s->ctx->tokenizer(), s->ctx->chat_template(), common->raw);
      auto a = Ask(*s, *common, *cargs, tokens, &std::cout);
      if (!a.ok()) {
        spdlog::error("{}", a.status().ToString());
        continue;  // the conversation stays usable
      }
      std::cout << "\n";
      PrintStats(*a);
      s->conversation.AddTurn("user", line);
      s->conversation.AddTurn("assistant", a->text);
    }
  });
}

}  // namespace impress::app
