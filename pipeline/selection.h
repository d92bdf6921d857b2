// The pure math of importance identification (docs/design.md section 3): keep ratio to k, top-k index
// sets, mean pairwise Jaccard of the probe heads' sets, the threshold t = (p / (2 - p))^alpha, the
// pass/fallback verdict, summed normalised importance, and the final token selection with
// attention sinks and a recent window counted toward k.
//
// No store, no backend, no model: plain values in, plain values out, so every rule here can be
// checked against a brute-force reference. Importance rows are H2O's (column sums of the softmax
// attention weights over the query rows), one row of n prefix tokens per head, row-major.
//
// The per-layer path (the *Into functions and JudgeProbe with a SelectionScratch) runs in time
// linear in n: partial selection of the k-th value instead of sorts, Jaccard over bitsets, and no
// allocation once the scratch has grown to the prefix length. The vector-returning forms give the
// same results and exist for callers off the hot path. Values are finite (no NaN).
//
// Thread contract: free functions without shared state; safe from any thread. A SelectionScratch
// belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace impress {

// The keep ratio actually used for n prefix tokens: prefixes shorter than 256 tokens keep at
// least half (docs/design.md section 3), so a 100-token prefix is not cut to 25 tokens.
float EffectiveKeep(int n, float keep);

// k = ceil(EffectiveKeep(n, keep) * n), clamped to [1, n]: at least one token is kept and never
// more than there are. 0 when n <= 0.
int KeepCount(int n, float keep);

// t = (p / (2 - p))^alpha: the expected Jaccard index of two random k-of-n sets (p = k/n) raised to
// alpha. p <= 0 gives 0 and p >= 1 gives 1 (whatever alpha); otherwise alpha = 0 gives 1 and a
// larger alpha gives a lower t.
double JaccardThreshold(double p, double alpha);

// Mean over all pairs a < b of |A ∩ B| / |A ∪ B|; two empty sets count as 1. Fewer than two sets
// give 1 (nothing disagrees). Each set holds distinct indices in [0, n).
double MeanPairwiseJaccard(const std::vector<std::vector<int>>& sets, int n);

// Indices of the k largest values, in ascending index order. Ties go to the lower index, so the
// result is the first k of a stable sort by descending value. k is clamped to [0, size].
std::vector<int> TopK(std::span<const float> values, int k);

// Per-head importance rows (n_heads x n, row-major) -> for each token, the sum over heads of its
// share of that head's row total (each row normalised to sum 1 first, so no head dominates by
// scale). A row summing to zero (or less) contributes nothing. Returns n values.
std::vector<float> SumNormalisedImportance(std::span<const float> per_head, int n_heads, int n);

// Buffers the per-layer selection reuses (one pipeline keeps one): sized to the largest prefix
// seen, never shrunk.
struct SelectionScratch {
  std::vector<float> values;     // a copy that partial selection may reorder
  std::vector<uint32_t> hist;    // radix select's counts
  std::vector<uint32_t> keys;    // radix select's candidates after its first pass
  std::vector<uint64_t> bits;    // one n-bit set per probe head
  std::vector<double> mass;      // per read group: summed score
  std::vector<uint32_t> order;   // read groups not forced, by descending mass
  std::vector<uint8_t> keep;     // per read group: kept
  std::vector<uint32_t> size;    // per read group: its tokens
  std::vector<uint32_t> tokens;  // token-level selection, the target of group selection
};

// Sets bit i of `bits` (n = values.size() bits, ceil(n / 64) words, cleared first) for exactly the
// indices TopK(values, k) returns. Linear time: the k-th largest value by a radix select over the
// values' order (finite values), then one pass (ties at that value go to the lower indices).
void TopKBits(std::span<const float> values, int k, SelectionScratch& scratch, uint64_t* bits);

// What the probe heads say about one layer (docs/design.md section 3, steps 2-4).
struct ProbeVerdict {
  double s = 0;         // mean pairwise Jaccard of the heads' top-k sets
  double t = 0;         // JaccardThreshold(k / n, alpha)
  bool passed = false;  // s >= t: select from the probe heads alone; else fall back
};
// Takes each head's top-k set of its importance row (per_head: n_heads x n, row-major), compares
// their mean pairwise Jaccard with the threshold for p = k / n. Requires 0 < k <= n.
ProbeVerdict JudgeProbe(std::span<const float> per_head, int n_heads, int n, int k, double alpha);
// The same verdict with reused buffers: top-k sets as bitsets (TopKBits), Jaccard by popcount.
ProbeVerdict JudgeProbe(std::span<const float> per_head, int n_heads, int n, int k, double alpha,
                        SelectionScratch& scratch);

// SumNormalisedImportance into *out (resized to n, its capacity reused).
void SumNormalisedImportanceInto(std::span<const float> per_head, int n_heads, int n, std::vector<float>* out);
// The same normalisation, combined by the largest share over the heads (head_max) or the sum.
void CombineNormalisedImportanceInto(std::span<const float> per_head, int n_heads, int n, bool head_max,
                                     std::vector<float>* out);

// The keep by attention mass: the tokens SelectTokens forces (the `sinks` first and `recent` last
// ones), plus the fewest of the others whose scores, taken largest first, sum to at least `target`
// (a share in [0, 1]) of those others' sum; then clamped to [KeepCount(n, min_keep),
// KeepCount(n, max_keep)] (the floor also keeps short prefixes at half, as KeepCount does). The
// forced tokens are left out of the mass because the first token alone holds most of it. Scores are
// non-negative importance (SumNormalisedImportance); an all-zero row needs no token, so it gets
// the forced ones and the floor. Linear expected time (partial selection by mass), scratch.values.
int MassKeepCount(std::span<const float> score, double target, float min_keep, float max_keep, int sinks, int recent,
                  SelectionScratch& scratch);

// The tokens a layer keeps, ascending: first the `sinks` first tokens, then the `recent` last ones
// (from the end backwards), then the best of the rest by `score` (ties: lower index first). All of
// them count toward k: if sinks and recent alone reach k, sinks win first, then the latest tokens.
// k is clamped to [0, n] (n = score.size()); negative sinks or recent mean none.
std::vector<uint32_t> SelectTokens(std::span<const float> score, int k, int sinks, int recent);
// The same into *out (cleared first, capacity reused): forced ranges computed directly, the best of
// the rest by a radix select of the threshold value.
void SelectTokensInto(std::span<const float> score, int k, int sinks, int recent, SelectionScratch& scratch,
                      std::vector<uint32_t>* out);

// Score pooling: out[i] is the sum (or, with `max`, the largest) of in[j] over the `width` tokens
// centred on i (an even width is rounded up to the next odd one; the window is clipped at both
// ends). A token next to an important one then ranks near it, so a selection keeps short spans
// (the several tokens of a name, a number, a clause) rather than their single best-scored token.
// width <= 1 copies; a width above kMaxPoolWidth counts as kMaxPoolWidth. O(n * width).
// follow > 0 stretches the window that many tokens further back, so the `follow` tokens after an
// important one rank with it too (what follows a matched cue is often what answers the question);
// follow is capped at kMaxPoolWidth and needs width > 1.
inline constexpr int kMaxPoolWidth = 63;

void PoolScoresInto(std::span<const float> in, int width, bool max, std::vector<float>* out, int follow = 0);

// How many read groups SelectGroups keeps: until their importance mass reaches the mass that
// SelectTokens keeps (kMass: as much importance as token by token, in more tokens), or until
// their tokens reach k (kTokens: the keep ratio's bytes, whole groups by mass).
enum class GroupBudget { kMass, kTokens };
// "mass" / "tokens", the names settings, flags and reports use; ParseGroupBudget accepts those
// two and nothing else (false, *out untouched).
const char* GroupBudgetName(GroupBudget budget);
bool ParseGroupBudget(std::string_view name, GroupBudget* out);

// I/O-aware selection: the unit selected is the unit read. `group[i]` names token i's read group
// (tokens whose K and V records share disk blocks; ids in [0, n_groups)). The target is the
// importance mass M that SelectTokens(score, k, sinks, recent) keeps. Whole groups are kept: first
// every group holding one of SelectTokens' sinks or recent tokens, then groups by descending
// summed score (ties: lower id), until the kept mass reaches M (or every group is kept). Returns
// every member of every kept group, ascending: more tokens than k, in fewer blocks. With
// GroupBudget::kTokens the groups after the forced ones are added in the same order until the kept
// tokens number at least k (the last group may pass k by less than its size).
std::vector<uint32_t> SelectGroups(std::span<const float> score, int k, int sinks, int recent,
                                   std::span<const uint32_t> group, GroupBudget budget = GroupBudget::kMass);
// The same into *out (cleared first, capacity reused).
void SelectGroupsInto(std::span<const float> score, int k, int sinks, int recent, std::span<const uint32_t> group,
                      SelectionScratch& scratch, std::vector<uint32_t>* out, GroupBudget budget = GroupBudget::kMass);

}  // namespace impress
