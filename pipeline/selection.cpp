#include "pipeline/selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace impress {

namespace {

// The order TopK and SelectTokens rank by: larger value first, then the lower index.
struct RankByValue {
  std::span<const float> v;
  bool operator()(int a, int b) const { return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b); }
};

}  // namespace

float EffectiveKeep(int n, float keep) {
  constexpr int kShortPrefix = 256;
  return n < kShortPrefix ? std::max(keep, 0.5f) : keep;
}

int KeepCount(int n, float keep) {
  if (n <= 0) return 0;
  return std::clamp(int(std::ceil(double(EffectiveKeep(n, keep)) * n)), 1, n);
}

double JaccardThreshold(double p, double alpha) {
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  return std::pow(p / (2.0 - p), alpha);
}

double MeanPairwiseJaccard(const std::vector<std::vector<int>>& sets, int n) {
  if (sets.size() < 2) return 1.0;
  // One membership mask per left-hand set makes each pair O(|B|) instead of a set intersection.
  std::vector<uint8_t> mark(size_t(std::max(n, 0)));
  double sum = 0;
  int pairs = 0;
  for (size_t a = 0; a < sets.size(); ++a) {
    std::fill(mark.begin(), mark.end(), 0);
    for (int i : sets[a]) mark[size_t(i)] = 1;
    for (size_t b = a + 1; b < sets.size(); ++b) {
      size_t inter = 0;
      for (int i : sets[b]) inter += mark[size_t(i)];
      const size_t uni = sets[a].size() + sets[b].size() - inter;
      sum += uni ? double(inter) / double(uni) : 1.0;
      ++pairs;
    }
  }
  return sum / pairs;
}

std::vector<int> TopK(std::span<const float> values, int k) {
  const int n = int(values.size());
  k = std::clamp(k, 0, n);
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), RankByValue{values});
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<float> SumNormalisedImportance(std::span<const float> per_head, int n_heads, int n) {
  std::vector<float> sum(size_t(std::max(n, 0)), 0.0f);
  for (int h = 0; h < n_heads; ++h) {
    const float* row = per_head.data() + size_t(h) * size_t(n);
    double total = 0;
    for (int i = 0; i < n; ++i) total += row[i];
    const float inv = total > 0 ? float(1.0 / total) : 0.0f;
    for (int i = 0; i < n; ++i) sum[size_t(i)] += row[i] * inv;
  }
  return sum;
}

ProbeVerdict JudgeProbe(std::span<const float> per_head, int n_heads, int n, int k, double alpha) {
  std::vector<std::vector<int>> sets;
  sets.reserve(size_t(std::max(n_heads, 0)));
  for (int h = 0; h < n_heads; ++h) sets.push_back(TopK(per_head.subspan(size_t(h) * size_t(n), size_t(n)), k));
  ProbeVerdict v;
  v.s = MeanPairwiseJaccard(sets, n);
  v.t = JaccardThreshold(double(k) / n, alpha);
  v.passed = v.s >= v.t;
  return v;
}

std::vector<uint32_t> SelectTokens(std::span<const float> score, int k, int sinks, int recent) {
  const int n = int(score.size());
  k = std::clamp(k, 0, n);
  std::vector<uint8_t> take(size_t(n), 0);
  int taken = 0;
  auto force = [&](int i) {
    if (taken < k && !take[size_t(i)]) {
      take[size_t(i)] = 1;
      ++taken;
    }
  };
  for (int i = 0; i < std::clamp(sinks, 0, n); ++i) force(i);
  for (int i = n - 1; i >= n - std::clamp(recent, 0, n); --i) force(i);
  if (taken < k) {
    std::vector<int> rest;
    rest.reserve(size_t(n));
    for (int i = 0; i < n; ++i) {
      if (!take[size_t(i)]) rest.push_back(i);
    }
    const int want = std::min<int>(k - taken, int(rest.size()));
    std::nth_element(rest.begin(), rest.begin() + want, rest.end(), RankByValue{score});
    for (int j = 0; j < want; ++j) take[size_t(rest[size_t(j)])] = 1;
  }
  std::vector<uint32_t> out;
  out.reserve(size_t(k));
  for (int i = 0; i < n; ++i) {
    if (take[size_t(i)]) out.push_back(uint32_t(i));
  }
  return out;
}

std::vector<uint32_t> SelectGroups(std::span<const float> score, int k, int sinks, int recent,
                                   std::span<const uint32_t> group) {
  const size_t n = score.size();
  if (group.size() != n || n == 0) return SelectTokens(score, k, sinks, recent);
  const uint32_t n_groups = *std::max_element(group.begin(), group.end()) + 1;
  std::vector<double> mass(n_groups, 0.0);
  for (size_t i = 0; i < n; ++i) mass[group[i]] += score[i];
  // The target: what token-level selection keeps; its sinks and recent tokens force their groups.
  double target = 0;
  std::vector<uint8_t> keep(n_groups, 0);
  const int n_forced = std::clamp(sinks, 0, int(n)) + std::clamp(recent, 0, int(n));
  for (uint32_t i : SelectTokens(score, k, sinks, recent)) target += score[i];
  for (uint32_t i : SelectTokens(std::vector<float>(n, 0.0f), std::min(k, n_forced), sinks, recent)) keep[group[i]] = 1;
  double kept = 0;
  for (uint32_t g = 0; g < n_groups; ++g) kept += keep[g] ? mass[g] : 0.0;
  std::vector<uint32_t> order;
  for (uint32_t g = 0; g < n_groups; ++g)
    if (!keep[g]) order.push_back(g);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return mass[a] > mass[b]; });
  // Compared with a relative tolerance: the same tokens summed in another order differ in the last bits.
  for (size_t j = 0; j < order.size() && kept < target * (1 - 1e-6); ++j) {
    keep[order[j]] = 1;
    kept += mass[order[j]];
  }
  std::vector<uint32_t> out;
  for (size_t i = 0; i < n; ++i)
    if (keep[group[i]]) out.push_back(uint32_t(i));
  return out;
}

}  // namespace impress
