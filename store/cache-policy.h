// Cache policies for the device and host tiers: chunk identity, per-chunk access statistics, and
// one-method strategies that turn statistics into an eviction priority (SGLang style: the policy
// only ranks, the TierManager decides, the store moves bytes).
//
// Policies: IMPRESS score (frequency x important_ratio, docs/design.md section 4), LRU, LFU.
//
// Thread contract: CachePolicy objects are immutable after construction (safe to share);
// ChunkStats are plain values owned by whoever holds them (the TierManager).
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"

namespace impress::store {

// A chunk: layer `layer`'s K/V for segment offsets [index*C, (index+1)*C) of segment `segment`
// (see store/radix-tree.h for segments). Packed into 64 bits for maps, heaps and the catalog:
//   bits 63..28 segment (36 bits), 27..18 layer (10 bits), 17..0 chunk index (18 bits).
// Limits: segment id < 2^36, layer < 1024, chunk index < 262144 (16.7M tokens at C = 64).
using ChunkId = uint64_t;

struct ChunkKey {
  uint64_t segment = 0;
  uint32_t layer = 0;
  uint32_t index = 0;

  static constexpr int kSegmentBits = 36;
  static constexpr int kLayerBits = 10;
  static constexpr int kIndexBits = 18;

  bool Packable() const {
    return segment < (uint64_t(1) << kSegmentBits) && layer < (1u << kLayerBits) && index < (1u << kIndexBits);
  }
  // Requires Packable() (checked by Make()).
  ChunkId Pack() const { return (segment << (kLayerBits + kIndexBits)) | (uint64_t(layer) << kIndexBits) | index; }
  static ChunkKey Unpack(ChunkId id) {
    return {id >> (kLayerBits + kIndexBits), uint32_t((id >> kIndexBits) & ((1u << kLayerBits) - 1)),
            uint32_t(id & ((1u << kIndexBits) - 1))};
  }
  // Checked construction: an error naming the field that does not fit.
  static Result<ChunkId> Make(uint64_t segment, uint32_t layer, uint32_t index);

  friend bool operator==(const ChunkKey&, const ChunkKey&) = default;
};

// What every policy may look at; the TierManager keeps one per chunk it has seen.
struct ChunkStats {
  uint64_t frequency = 0;                           // accesses so far
  double important_ratio = kInitialImportantRatio;  // EMA of the fraction of tokens selected
  uint64_t n_importance_reports = 0;
  uint64_t last_access = 0;  // logical clock of the last access (0 = never)
  uint64_t bytes = 0;        // size of the chunk in a memory tier

  // Before any report a chunk counts as fully important (optimistic, so fresh KV is not thrown
  // out before the pipeline had a chance to say what it selected).
  static constexpr double kInitialImportantRatio = 1.0;
};

// The EMA weight of a new observation: ratio = (1 - w) * ratio + w * fraction, except that the
// first report replaces the prior outright. w = 0.25 gives about a 4-access memory: a chunk whose
// importance changes is re-ranked within a few requests, while one odd question does not flip it.
inline constexpr double kImportantRatioEmaWeight = 0.25;

// Updates `s` for one access at logical time `tick`.
void RecordAccess(ChunkStats& s, uint64_t tick);
// Folds one observation (fraction of the chunk's tokens selected, in [0, 1]) into the EMA.
// InvalidArgument (and no change) for NaN or values outside [0, 1].
Status RecordImportance(ChunkStats& s, double fraction_selected, double ema_weight = kImportantRatioEmaWeight);

// Eviction priority: the smaller one is evicted first; compared lexicographically.
struct Priority {
  double primary = 0;
  double secondary = 0;  // tie-break (recency)
  friend auto operator<=>(const Priority&, const Priority&) = default;
};

enum class PolicyKind { kImpress, kLru, kLfu };

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual PolicyKind kind() const = 0;
  virtual std::string_view name() const = 0;
  // The chunk's value to keep: a pure function of its statistics.
  virtual Priority Rank(const ChunkStats& s) const = 0;
};

// IMPRESS: (frequency x important_ratio, last_access). LRU: (last_access, 0).
// LFU: (frequency, last_access).
std::unique_ptr<CachePolicy> MakeCachePolicy(PolicyKind kind);
// "impress" (or "score"), "lru", "lfu"; anything else is InvalidArgument naming the value.
Result<PolicyKind> ParsePolicyKind(std::string_view name);
std::string_view PolicyKindName(PolicyKind kind);

}  // namespace impress::store
