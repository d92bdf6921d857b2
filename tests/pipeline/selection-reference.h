// Naive references of the selection rules (pipeline/selection.h) shared by the selection tests:
// the token rule spelled out step by step and the group rule by brute force.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "pipeline/selection.h"

namespace impress::selection_reference {

// The tokens the selection rule forces, one step at a time: sinks (0, 1, ...) then recent (n-1,
// n-2, ...), each only while fewer than k (clamped to [0, n]) are taken; a token that is both
// counts once.
inline std::set<int> NaiveForced(int n, int k, int sinks, int recent) {
  k = std::clamp(k, 0, n);
  std::set<int> taken;
  std::vector<int> forced;
  for (int i = 0; i < sinks && i < n; ++i) forced.push_back(i);
  for (int j = 0; j < recent && j < n; ++j) forced.push_back(n - 1 - j);
  for (int i : forced) {
    if (int(taken.size()) < k) taken.insert(i);
  }
  return taken;
}

// The selection rule: the forced tokens, then the rest by a stable sort of descending score
// while fewer than k are taken.
inline std::vector<uint32_t> NaiveSelect(const std::vector<float>& score, int k, int sinks, int recent) {
  const int n = int(score.size());
  k = std::clamp(k, 0, n);
  std::set<int> taken = NaiveForced(n, k, sinks, recent);
  std::vector<int> rest;
  for (int i = 0; i < n; ++i) {
    if (!taken.count(i)) rest.push_back(i);
  }
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return score[size_t(a)] > score[size_t(b)]; });
  for (int i : rest) {
    if (int(taken.size()) >= k) break;
    taken.insert(i);
  }
  return std::vector<uint32_t>(taken.begin(), taken.end());
}

inline double Mass(const std::vector<float>& score, const std::vector<uint32_t>& sel) {
  double m = 0;
  for (uint32_t i : sel) m += score[i];
  return m;
}

// Groups of gsize consecutive slots, the slots in a random (stored) order: token i's group is its
// slot's.
inline std::vector<uint32_t> ShuffledGroups(std::mt19937& rng, int n, int gsize) {
  std::vector<uint32_t> slot(static_cast<size_t>(n));
  std::iota(slot.begin(), slot.end(), 0u);
  std::shuffle(slot.begin(), slot.end(), rng);
  std::vector<uint32_t> group(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) group[size_t(i)] = slot[size_t(i)] / uint32_t(gsize);
  return group;
}

// The group selection by its rule in selection.h, by brute force: the target is the mass of the
// tokens NaiveSelect keeps; the groups holding its forced tokens are kept; the other groups are
// ranked by summed score (descending, ties: lower id), and the shortest prefix of that ranking is
// taken whose members bring the kept mass, summed anew over every kept token, to the target
// (within a relative 1e-6: the same scores summed in another order differ in the last bits), or
// the whole ranking when none does. With GroupBudget::kTokens the shortest prefix whose members
// number at least k (clamped to n). Returns the members of the kept groups, ascending.
inline std::vector<uint32_t> NaiveSelectGroups(const std::vector<float>& score, int k, int sinks, int recent,
                                               const std::vector<uint32_t>& group,
                                               GroupBudget budget = GroupBudget::kMass) {
  const int n = int(score.size());
  if (n == 0 || group.size() != score.size()) return NaiveSelect(score, k, sinks, recent);
  const double target = Mass(score, NaiveSelect(score, k, sinks, recent));
  std::map<uint32_t, double> group_mass;
  for (int i = 0; i < n; ++i) group_mass[group[size_t(i)]] += score[size_t(i)];
  std::set<uint32_t> forced;
  for (int i : NaiveForced(n, k, sinks, recent)) forced.insert(group[size_t(i)]);
  std::vector<uint32_t> ranked;
  for (const auto& [g, m] : group_mass) {
    if (!forced.count(g)) ranked.push_back(g);
  }
  std::sort(ranked.begin(), ranked.end(), [&](uint32_t a, uint32_t b) {
    return group_mass[a] != group_mass[b] ? group_mass[a] > group_mass[b] : a < b;
  });
  const uint32_t n_ids = group_mass.rbegin()->first + 1;
  auto members = [&](size_t taken) {  // the members of the forced groups and the first `taken` ranked
    std::vector<uint8_t> kept(n_ids, 0);
    for (uint32_t g : forced) kept[g] = 1;
    for (size_t j = 0; j < taken; ++j) kept[ranked[j]] = 1;
    std::vector<uint32_t> out;
    for (int i = 0; i < n; ++i) {
      if (kept[group[size_t(i)]]) out.push_back(uint32_t(i));
    }
    return out;
  };
  // Scores are non-negative, so the kept mass grows with every group added: the shortest
  // prefix that reaches the target is found by bisection (the whole ranking always qualifies).
  // (With kTokens, the count of members grows likewise.)
  const auto enough = [&](size_t taken) {
    return budget == GroupBudget::kTokens ? int(members(taken).size()) >= std::min(k, n)
                                          : Mass(score, members(taken)) >= target * (1 - 1e-6);
  };
  size_t lo = 0, hi = ranked.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (enough(mid)) hi = mid;
    else lo = mid + 1;
  }
  return members(lo);
}

}  // namespace impress::selection_reference
