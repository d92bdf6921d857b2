// The fidelity check: how far a request's answer under a selective system (IMPRESS, AS+H2O, any
// keep ratio) is from the same request over the full prefix KV. It runs the pipeline twice and
// compares the first-token distributions (KL divergence) and the greedy continuations.
//
// Thread contract: CheckFidelity drives the pipeline it is given, so it has the pipeline's
// contract (external synchronization: nothing else may use that pipeline meanwhile).
// LogSoftmax and KlDivergence are pure and safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "pipeline/report.h"

namespace impress {

class ImpressPipeline;
struct PipelineRequest;
struct PipelineSettings;

// Agreement of a request's answer with the same request over the full prefix KV.
struct FidelityReport {
  bool first_token_match = false;
  int32_t first_token = -1, first_token_full = -1;
  double kl_divergence = 0;      // KL(full || this) of the next-token distributions, nats
  int n_continuation = 0;        // greedy tokens compared
  int n_continuation_match = 0;  // identical leading tokens
  RequestReport report, report_full;
};

// Runs `request` with `settings` and with the full prefix KV (AS-like, keep 1; ReComp when the
// pipeline has no store), greedy, for `n_continue` tokens each; nothing is stored and the store's
// importance statistics are left alone.
// `cancel` (optional) stops either run within a layer batch or a decode step: Cancelled.
Result<FidelityReport> CheckFidelity(ImpressPipeline& pipeline, const PipelineRequest& request,
                                     const PipelineSettings& settings, int n_continue,
                                     const std::atomic<bool>* cancel = nullptr);

// log softmax(logits), in double: logits[i] - log sum_j exp(logits[j]), shifted by the maximum so
// large logits do not overflow. Empty in, empty out.
std::vector<double> LogSoftmax(std::span<const float> logits);

// KL(p || q) = sum_i p_i (log p_i - log q_i) in nats, from log-probabilities of the same length;
// clamped at 0 (rounding can make identical distributions come out a hair negative).
double KlDivergence(std::span<const double> log_p, std::span<const double> log_q);

}  // namespace impress
