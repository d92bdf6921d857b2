#include "pipeline/selection.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
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

namespace {

// A float's order as an unsigned key: larger float, larger key (finite values; -0 counts as +0,
// as the comparisons elsewhere do).
inline uint32_t OrderKey(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float FromOrderKey(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The k-th largest of `v` (1 <= k <= size) and how many values equal to it a top-k takes (the
// rest of the top-k is strictly larger). A radix select over the values' order keys, 11 + 11 + 10
// bits: one counting pass over all values picks the top 11 bits; the keys that share them (a small
// part of the values unless most are nearly equal) are gathered, and the two later passes count
// those alone. No reordering, so it costs two passes over n whatever the data.
struct KthValue {
  float value;
  int ties;
};
KthValue KthLargest(std::span<const float> v, int k, SelectionScratch& scratch) {
  constexpr int kShift[3] = {21, 10, 0};
  constexpr uint32_t kBins[3] = {2048, 2048, 1024};
  std::vector<uint32_t>& hist = scratch.hist;
  // Two interleaved counts for the first pass: runs of equal bins (values of one magnitude) then
  // do not wait on each other's increments.
  hist.assign(2 * kBins[0], 0);
  size_t i = 0;
  for (; i + 2 <= v.size(); i += 2) {
    ++hist[OrderKey(v[i]) >> kShift[0]];
    ++hist[kBins[0] + (OrderKey(v[i + 1]) >> kShift[0])];
  }
  if (i < v.size()) ++hist[OrderKey(v[i]) >> kShift[0]];
  for (uint32_t b = 0; b < kBins[0]; ++b) hist[b] += hist[kBins[0] + b];
  int rank = k;  // the wanted value's rank from the top among keys with the chosen bits
  uint32_t b = kBins[0];
  while (b-- > 0) {
    if (int(hist[b]) >= rank) break;
    rank -= int(hist[b]);
  }
  uint32_t prefix = b << kShift[0];  // the key bits chosen so far
  std::vector<uint32_t>& keys = scratch.keys;
  keys.clear();
  for (float f : v) {
    const uint32_t key = OrderKey(f);
    if ((key >> kShift[0]) == b) keys.push_back(key);
  }
  for (int pass = 1; pass < 3; ++pass) {
    const int shift = kShift[pass];
    hist.assign(kBins[pass], 0);
    const int upper = kShift[pass - 1];  // the bits above this pass's are chosen
    for (uint32_t key : keys)
      if ((key >> upper) == (prefix >> upper)) ++hist[(key >> shift) & (kBins[pass] - 1)];
    b = kBins[pass];
    while (b-- > 0) {
      if (int(hist[b]) >= rank) break;
      rank -= int(hist[b]);
    }
    prefix |= b << shift;
  }
  return {FromOrderKey(prefix), rank};
}

// The tokens every selection keeps before scores count: [0, sinks_end) and [recent_begin, n). Sinks
// first, then the latest tokens, all within k.
struct Forced {
  int sinks_end, recent_begin;
};
Forced ForcedRanges(int n, int k, int sinks, int recent) {
  const int s_end = std::min(std::clamp(sinks, 0, n), k);
  return {s_end, std::max({n - std::clamp(recent, 0, n), s_end, n - (k - s_end)})};
}

}  // namespace

void TopKBits(std::span<const float> values, int k, SelectionScratch& scratch, uint64_t* bits) {
  const int n = int(values.size());
  k = std::clamp(k, 0, n);
  std::fill_n(bits, (size_t(n) + 63) / 64, uint64_t{0});
  if (k == 0) return;
  KthValue kth = KthLargest(values, k, scratch);
  // Everything above the k-th value, then its ties from the lowest index on.
  for (int w = 0; w < n; w += 64) {
    uint64_t word = 0;
    const int m = std::min(64, n - w);
    for (int j = 0; j < m; ++j) word |= uint64_t(values[size_t(w + j)] > kth.value) << j;
    bits[size_t(w) >> 6] = word;
  }
  for (int i = 0; i < n && kth.ties > 0; ++i) {
    if (values[size_t(i)] == kth.value) {
      bits[size_t(i) >> 6] |= uint64_t{1} << (i & 63);
      --kth.ties;
    }
  }
}

void CombineNormalisedImportanceInto(std::span<const float> per_head, int n_heads, int n, bool head_max,
                                     std::vector<float>* out) {
  out->assign(size_t(std::max(n, 0)), 0.0f);
  float* acc = out->data();
  for (int h = 0; h < n_heads; ++h) {
    const float* row = per_head.data() + size_t(h) * size_t(n);
    double total = 0;
    for (int i = 0; i < n; ++i) total += row[i];
    const float inv = total > 0 ? float(1.0 / total) : 0.0f;
    if (head_max) {
      for (int i = 0; i < n; ++i) acc[i] = std::max(acc[i], row[i] * inv);
    } else {
      for (int i = 0; i < n; ++i) acc[i] += row[i] * inv;
    }
  }
}

void SumNormalisedImportanceInto(std::span<const float> per_head, int n_heads, int n, std::vector<float>* out) {
  CombineNormalisedImportanceInto(per_head, n_heads, n, false, out);
}

std::vector<float> SumNormalisedImportance(std::span<const float> per_head, int n_heads, int n) {
  std::vector<float> sum;
  SumNormalisedImportanceInto(per_head, n_heads, n, &sum);
  return sum;
}

ProbeVerdict JudgeProbe(std::span<const float> per_head, int n_heads, int n, int k, double alpha,
                        SelectionScratch& scratch) {
  const size_t words = (size_t(std::max(n, 0)) + 63) / 64;
  const size_t n_sets = size_t(std::max(n_heads, 0));
  scratch.bits.resize(words * n_sets);
  std::vector<uint64_t>& bits = scratch.bits;
  for (size_t h = 0; h < n_sets; ++h)
    TopKBits(per_head.subspan(h * size_t(n), size_t(n)), k, scratch, &bits[h * words]);
  // TopKBits sets exactly min(k, n) bits: every set has that size, so no set needs counting.
  const size_t set_size = size_t(std::clamp(k, 0, std::max(n, 0)));
  ProbeVerdict v;
  v.s = 1.0;
  if (n_sets >= 2) {
    // The same pairs, in the same order and arithmetic, as MeanPairwiseJaccard.
    double sum = 0;
    int pairs = 0;
    for (size_t a = 0; a < n_sets; ++a) {
      for (size_t b = a + 1; b < n_sets; ++b) {
        size_t inter = 0;
        for (size_t w = 0; w < words; ++w) inter += size_t(std::popcount(bits[a * words + w] & bits[b * words + w]));
        const size_t uni = 2 * set_size - inter;
        sum += uni ? double(inter) / double(uni) : 1.0;
        ++pairs;
      }
    }
    v.s = sum / pairs;
  }
  v.t = JaccardThreshold(double(k) / n, alpha);
  v.passed = v.s >= v.t;
  return v;
}

ProbeVerdict JudgeProbe(std::span<const float> per_head, int n_heads, int n, int k, double alpha) {
  SelectionScratch scratch;
  return JudgeProbe(per_head, n_heads, n, k, alpha, scratch);
}

int MassKeepCount(std::span<const float> all, double target, float min_keep, float max_keep, int sinks, int recent,
                  SelectionScratch& scratch) {
  const int n = int(all.size());
  if (n <= 0) return 0;
  const int lo = KeepCount(n, min_keep), hi = std::max(lo, KeepCount(n, max_keep));
  // The sinks and the recent window are kept anyway and hold much of the mass (the first token
  // above all): the target is a share of what the others hold.
  const Forced f = ForcedRanges(n, n, sinks, recent);
  const int n_forced = n - (f.recent_begin - f.sinks_end);
  const std::span<const float> score = all.subspan(size_t(f.sinks_end), size_t(f.recent_begin - f.sinks_end));
  const int n_rest = int(score.size());
  double total = 0;
  for (float v : score) total += v;
  const double need = std::clamp(target, 0.0, 1.0) * total;
  int m = 0;
  if (need > 0) {
    // Partial selection by mass: split the undecided values [b, e) at their median; if the upper
    // half (with what is already counted) reaches the need, the answer lies in it, else all of it
    // counts and the answer lies below. Invariant: acc < need.
    std::vector<float>& v = scratch.values;
    v.assign(score.begin(), score.end());
    size_t b = 0, e = v.size();
    double acc = 0;
    m = n_rest;  // if rounding leaves the whole sum just short, every token
    while (true) {
      if (e - b <= 32) {
        std::sort(v.begin() + std::ptrdiff_t(b), v.begin() + std::ptrdiff_t(e), std::greater<float>());
        for (size_t i = b; i < e; ++i) {
          acc += v[i];
          if (acc >= need) {
            m = int(i) + 1;
            break;
          }
        }
        break;
      }
      const size_t mid = b + (e - b) / 2;
      std::nth_element(v.begin() + std::ptrdiff_t(b), v.begin() + std::ptrdiff_t(mid), v.begin() + std::ptrdiff_t(e),
                       std::greater<float>());
      double upper = 0;
      for (size_t i = b; i < mid; ++i) upper += v[i];
      if (acc + upper >= need) {
        e = mid;
      } else {
        acc += upper;
        b = mid;
      }
    }
  }
  return std::clamp(n_forced + m, lo, hi);
}

void SelectTokensInto(std::span<const float> score, int k, int sinks, int recent, SelectionScratch& scratch,
                      std::vector<uint32_t>* out) {
  const int n = int(score.size());
  k = std::clamp(k, 0, n);
  out->clear();
  const Forced f = ForcedRanges(n, k, sinks, recent);
  const int want = k - f.sinks_end - (n - f.recent_begin);
  KthValue kth{0.0f, 0};
  if (want > 0) {
    kth = KthLargest(score.subspan(size_t(f.sinks_end), size_t(f.recent_begin - f.sinks_end)), want, scratch);
  }
  out->reserve(size_t(k));
  for (int i = 0; i < f.sinks_end; ++i) out->push_back(uint32_t(i));
  if (want > 0) {
    for (int i = f.sinks_end; i < f.recent_begin; ++i) {
      const float v = score[size_t(i)];
      if (v > kth.value || (v == kth.value && kth.ties-- > 0)) out->push_back(uint32_t(i));
    }
  }
  for (int i = f.recent_begin; i < n; ++i) out->push_back(uint32_t(i));
}

std::vector<uint32_t> SelectTokens(std::span<const float> score, int k, int sinks, int recent) {
  SelectionScratch scratch;
  std::vector<uint32_t> out;
  SelectTokensInto(score, k, sinks, recent, scratch, &out);
  return out;
}

const char* GroupBudgetName(GroupBudget budget) { return budget == GroupBudget::kTokens ? "tokens" : "mass"; }

bool ParseGroupBudget(std::string_view name, GroupBudget* out) {
  for (const GroupBudget b : {GroupBudget::kMass, GroupBudget::kTokens}) {
    if (name == GroupBudgetName(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

void SelectGroupsInto(std::span<const float> score, int k, int sinks, int recent, std::span<const uint32_t> group,
                      SelectionScratch& scratch, std::vector<uint32_t>* out, GroupBudget budget) {
  const size_t n = score.size();
  if (group.size() != n || n == 0) return SelectTokensInto(score, k, sinks, recent, scratch, out);
  const uint32_t n_groups = *std::max_element(group.begin(), group.end()) + 1;
  std::vector<double>& mass = scratch.mass;
  mass.assign(n_groups, 0.0);
  for (size_t i = 0; i < n; ++i) mass[group[i]] += score[i];
  // The target: what token-level selection keeps; its sinks and recent tokens force their groups.
  double target = 0;
  if (budget == GroupBudget::kMass) {
    SelectTokensInto(score, k, sinks, recent, scratch, &scratch.tokens);
    for (uint32_t i : scratch.tokens) target += score[i];
  }
  std::vector<uint8_t>& keep = scratch.keep;
  keep.assign(n_groups, 0);
  const Forced f = ForcedRanges(int(n), std::clamp(k, 0, int(n)), sinks, recent);
  for (int i = 0; i < f.sinks_end; ++i) keep[group[size_t(i)]] = 1;
  for (size_t i = size_t(f.recent_begin); i < n; ++i) keep[group[i]] = 1;
  double kept = 0;
  for (uint32_t g = 0; g < n_groups; ++g) kept += keep[g] ? mass[g] : 0.0;
  std::vector<uint32_t>& order = scratch.order;
  order.clear();
  for (uint32_t g = 0; g < n_groups; ++g)
    if (!keep[g]) order.push_back(g);
  // The groups by descending mass, equal masses by group (a stable sort's order), sorted only as
  // far as the budget reads: each step places the next stretch (nth_element) and sorts it.
  const auto by_mass = [&](uint32_t a, uint32_t b) { return mass[a] > mass[b] || (mass[a] == mass[b] && a < b); };
  size_t sorted = 0;
  const auto ordered = [&](size_t j) {
    if (j >= sorted) {
      const size_t end = std::min(order.size(), std::max<size_t>(2 * sorted, 64));
      std::nth_element(order.begin() + std::ptrdiff_t(sorted), order.begin() + std::ptrdiff_t(end - 1), order.end(),
                       by_mass);
      std::sort(order.begin() + std::ptrdiff_t(sorted), order.begin() + std::ptrdiff_t(end), by_mass);
      sorted = end;
    }
    return order[j];
  };
  if (budget == GroupBudget::kTokens) {
    std::vector<uint32_t>& size = scratch.size;
    size.assign(n_groups, 0);
    for (size_t i = 0; i < n; ++i) ++size[group[i]];
    int64_t tokens = 0;
    for (uint32_t g = 0; g < n_groups; ++g) tokens += keep[g] ? size[g] : 0;
    for (size_t j = 0; j < order.size() && tokens < int64_t(std::clamp(k, 0, int(n))); ++j) {
      const uint32_t g = ordered(j);
      keep[g] = 1;
      tokens += size[g];
    }
  } else {
    // Compared with a relative tolerance: the same tokens summed in another order differ in the last bits.
    for (size_t j = 0; j < order.size() && kept < target * (1 - 1e-6); ++j) {
      const uint32_t g = ordered(j);
      keep[g] = 1;
      kept += mass[g];
    }
  }
  out->clear();
  for (size_t i = 0; i < n; ++i)
    if (keep[group[i]]) out->push_back(uint32_t(i));
}

std::vector<uint32_t> SelectGroups(std::span<const float> score, int k, int sinks, int recent,
                                   std::span<const uint32_t> group, GroupBudget budget) {
  SelectionScratch scratch;
  std::vector<uint32_t> out;
  SelectGroupsInto(score, k, sinks, recent, group, scratch, &out, budget);
  return out;
}

void PoolScoresInto(std::span<const float> in, int width, bool max, std::vector<float>* out, int follow) {
  const int n = int(in.size());
  out->resize(in.size());
  if (width <= 1) {
    std::copy(in.begin(), in.end(), out->begin());
    return;
  }
  const int r = std::min(width, kMaxPoolWidth) / 2;  // tokens on each side
  const int back = r + std::clamp(follow, 0, kMaxPoolWidth);
  // Each window is combined left to right from its first token, the same order a plain loop uses,
  // so the result is exact against a reference and equal scores stay equal. Where the window is
  // whole ([back, n - r)), that is done one offset at a time across all those tokens (a loop the
  // compiler vectorises); the edges window by window.
  float* o = out->data();
  const float* x = in.data();
  auto window = [&](int i) {
    const int lo = std::max(0, i - back), hi = std::min(n, i + r + 1);
    float v = x[lo];
    for (int j = lo + 1; j < hi; ++j) v = max ? std::max(v, x[j]) : v + x[j];
    o[i] = v;
  };
  const int whole_begin = std::min(back, n), whole_end = std::max(whole_begin, n - r);
  for (int i = 0; i < whole_begin; ++i) window(i);
  for (int i = whole_begin; i < whole_end; ++i) o[i] = x[i - back];
  for (int d = 1; d <= back + r; ++d) {
    const int off = d - back;
    if (max) {
      for (int i = whole_begin; i < whole_end; ++i) o[i] = std::max(o[i], x[i + off]);
    } else {
      for (int i = whole_begin; i < whole_end; ++i) o[i] += x[i + off];
    }
  }
  for (int i = whole_end; i < n; ++i) window(i);
}

}  // namespace impress
