#include "engine/compute/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace impress {

SamplerOptions ChatSamplerDefaults() {
  SamplerOptions o;
  o.temperature = 0.7f;
  o.top_k = 40;
  o.top_p = 0.9f;
  o.min_p = 0.05f;
  return o;
}

RepetitionGuard::RepetitionGuard(const RepetitionGuardOptions& options) :
    opt_(options),
    recent_(size_t(std::max(1, options.max_period)), -1),
    run_(size_t(std::max(1, options.max_period)) + 1, 0) {}

bool RepetitionGuard::Push(int32_t token) {
  if (period_ > 0) return true;
  const size_t cap = recent_.size();
  // run_[p] counts the tokens in a row that equal the token p positions earlier: a block of p
  // tokens repeated r times leaves run_[p] = (r - 1) * p.
  for (size_t p = 1; p <= cap && p <= n_; ++p) {
    const int32_t earlier = recent_[(n_ - p) % cap];
    run_[p] = earlier == token ? run_[p] + 1 : 0;
  }
  recent_[n_ % cap] = token;
  ++n_;
  if (!opt_.enabled) return false;
  for (size_t p = 1; p <= cap && p <= n_; ++p) {
    const int64_t span = int64_t(run_[p]) + int64_t(p);
    if (span >= opt_.min_tokens && span >= int64_t(opt_.min_repeats) * int64_t(p)) {
      period_ = int(p);
      return true;
    }
  }
  return false;
}

Sampler::Sampler(const SamplerOptions& options) : opt_(options), rng_(options.seed) {}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int n = static_cast<int>(logits.size());
  if (n == 0) return 0;
  work_.assign(logits.begin(), logits.end());
  if (opt_.repeat_penalty != 1.0f && opt_.repeat_last_n != 0) {
    const size_t n_look =
        opt_.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(opt_.repeat_last_n));
    std::unordered_set<int32_t> seen(history.end() - n_look, history.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= n) continue;
      work_[t] = work_[t] > 0 ? work_[t] / opt_.repeat_penalty : work_[t] * opt_.repeat_penalty;
    }
  }
  if (opt_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  }
  // Candidates sorted by logit (only the top k when k is set).
  idx_.resize(n);
  std::iota(idx_.begin(), idx_.end(), 0);
  int k = (opt_.top_k > 0 && opt_.top_k < n) ? opt_.top_k : n;
  auto by_logit = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  std::partial_sort(idx_.begin(), idx_.begin() + k, idx_.end(), by_logit);
  idx_.resize(k);
  // Softmax with temperature over the candidates.
  const float mx = work_[idx_[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp(double(work_[idx_[i]] - mx) / opt_.temperature);
  for (double& v : p) v /= sum;
  // Min-p: the candidates at least min_p times as likely as the best (p is sorted).
  if (opt_.min_p > 0.0f) {
    const double floor = p[0] * double(opt_.min_p);
    int keep = 1;
    while (keep < k && p[keep] >= floor) ++keep;
    if (keep < k) {
      k = keep;
      p.resize(k);
      sum = std::accumulate(p.begin(), p.end(), 0.0);
      for (double& v : p) v /= sum;
    }
  }
  // Top-p: the smallest prefix reaching top_p (at least one token).
  if (opt_.top_p < 1.0f) {
    double acc = 0;
    int keep = k;
    for (int i = 0; i < k; ++i) {
      acc += p[i];
      if (acc >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
    k = keep;
    p.resize(k);
    sum = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& v : p) v /= sum;
  }
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double u = uni(rng_), acc = 0;
  for (int i = 0; i < k; ++i) {
    acc += p[i];
    if (u < acc) return idx_[i];
  }
  return idx_[k - 1];
}

}  // namespace impress
