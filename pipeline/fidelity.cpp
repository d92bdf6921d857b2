#include "pipeline/fidelity.h"

#include <algorithm>
#include <cmath>

#include "pipeline/impress-pipeline.h"

namespace impress {

namespace {

// One greedy run: the first token's logits, then `n_continue` argmax tokens (the first is the
// argmax of those logits; each later one comes from a Decode of the previous).
struct GreedyRun {
  RequestReport report;
  std::vector<float> first_logits;
  std::vector<int32_t> tokens;
};

int32_t Argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Result<GreedyRun> RunGreedy(ImpressPipeline& pipeline, const PipelineRequest& request, const PipelineSettings& s,
                            int n_continue, const std::atomic<bool>* cancel) {
  GreedyRun run;
  std::vector<float> logits;
  IMPRESS_ASSIGN_OR_RETURN(run.report, pipeline.Prefill(request, s, n_continue, &logits, {}, cancel));
  run.first_logits = logits;
  for (int i = 0; i < n_continue; ++i) {
    if (cancel && cancel->load()) return Status::Cancelled("fidelity check stopped");
    const int32_t tok = Argmax(logits);
    run.tokens.push_back(tok);
    if (i + 1 < n_continue) IMPRESS_RETURN_IF_ERROR(pipeline.Decode(tok, &logits));
  }
  return run;
}

}  // namespace

std::vector<double> LogSoftmax(std::span<const float> logits) {
  if (logits.empty()) return {};
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
  return out;
}

double KlDivergence(std::span<const double> log_p, std::span<const double> log_q) {
  double kl = 0;
  for (size_t i = 0; i < std::min(log_p.size(), log_q.size()); ++i) kl += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
  return std::max(0.0, kl);
}

Result<FidelityReport> CheckFidelity(ImpressPipeline& pipeline, const PipelineRequest& request,
                                     const PipelineSettings& settings, int n_continue,
                                     const std::atomic<bool>* cancel) {
  PipelineSettings s = settings;
  s.report_importance = false;
  PipelineSettings full = s;
  full.system = pipeline.store() ? SystemKind::kAsLike : SystemKind::kRecomp;
  full.keep = 1.0f;
  IMPRESS_ASSIGN_OR_RETURN(GreedyRun a, RunGreedy(pipeline, request, s, n_continue, cancel));
  IMPRESS_ASSIGN_OR_RETURN(GreedyRun b, RunGreedy(pipeline, request, full, n_continue, cancel));

  FidelityReport f;
  f.report = std::move(a.report);
  f.report_full = std::move(b.report);
  f.first_token = a.tokens.empty() ? -1 : a.tokens[0];
  f.first_token_full = b.tokens.empty() ? -1 : b.tokens[0];
  f.first_token_match = f.first_token == f.first_token_full;
  f.kl_divergence = KlDivergence(LogSoftmax(b.first_logits), LogSoftmax(a.first_logits));
  f.n_continuation = n_continue;
  while (f.n_continuation_match < n_continue &&
         a.tokens[size_t(f.n_continuation_match)] == b.tokens[size_t(f.n_continuation_match)]) {
    ++f.n_continuation_match;
  }
  return f;
}

}  // namespace impress
