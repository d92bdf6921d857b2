#include "engine/compute/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace impress {

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
