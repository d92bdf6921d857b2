// Cache policies: see cache-policy.h.
#include "store/cache-policy.h"

#include <cmath>
#include <string>

namespace impress::store {

Result<ChunkId> ChunkKey::Make(uint64_t segment, uint32_t layer, uint32_t index) {
  const ChunkKey key{segment, layer, index};
  if (key.Packable()) return key.Pack();
  std::string what;
  if (segment >= (uint64_t(1) << kSegmentBits)) {
    what = "segment id " + std::to_string(segment) + " needs more than " + std::to_string(kSegmentBits) + " bits";
  } else if (layer >= (1u << kLayerBits)) {
    what = "layer " + std::to_string(layer) + " is not below " + std::to_string(1u << kLayerBits);
  } else {
    what = "chunk index " + std::to_string(index) + " is not below " + std::to_string(1u << kIndexBits);
  }
  return Status::OutOfRange("chunk key: " + what);
}

void RecordAccess(ChunkStats& s, uint64_t tick) {
  s.frequency += 1;
  s.last_access = tick;
}

Status RecordImportance(ChunkStats& s, double fraction, double ema_weight) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {  // also rejects NaN
    return Status::InvalidArgument("importance report: fraction selected " + std::to_string(fraction) +
                                   " is not in [0, 1]");
  }
  if (!(ema_weight > 0.0 && ema_weight <= 1.0)) {
    return Status::InvalidArgument("importance report: EMA weight " + std::to_string(ema_weight) + " is not in (0, 1]");
  }
  if (s.n_importance_reports == 0) {
    s.important_ratio = fraction;  // the first observation replaces the prior
  } else {
    s.important_ratio = (1.0 - ema_weight) * s.important_ratio + ema_weight * fraction;
  }
  s.n_importance_reports += 1;
  return Status::Ok();
}

namespace {

// IMPRESS: keep the chunks that are both hot and important (docs/design.md section 4).
class ImpressPolicy final : public CachePolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kImpress; }
  std::string_view name() const override { return "impress"; }
  Priority Rank(const ChunkStats& s) const override {
    return {double(s.frequency) * s.important_ratio, double(s.last_access)};
  }
};

class LruPolicy final : public CachePolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kLru; }
  std::string_view name() const override { return "lru"; }
  Priority Rank(const ChunkStats& s) const override { return {double(s.last_access), 0.0}; }
};

class LfuPolicy final : public CachePolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::kLfu; }
  std::string_view name() const override { return "lfu"; }
  Priority Rank(const ChunkStats& s) const override { return {double(s.frequency), double(s.last_access)}; }
};

}  // namespace

std::unique_ptr<CachePolicy> MakeCachePolicy(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kImpress: return std::make_unique<ImpressPolicy>();
    case PolicyKind::kLru: return std::make_unique<LruPolicy>();
    case PolicyKind::kLfu: return std::make_unique<LfuPolicy>();
  }
  return std::make_unique<ImpressPolicy>();
}

Result<PolicyKind> ParsePolicyKind(std::string_view name) {
  if (name == "impress" || name == "score") return PolicyKind::kImpress;
  if (name == "lru") return PolicyKind::kLru;
  if (name == "lfu") return PolicyKind::kLfu;
  return Status::InvalidArgument("cache policy '" + std::string(name) + "' is not one of impress, score, lru, lfu");
}

std::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kImpress: return "impress";
    case PolicyKind::kLru: return "lru";
    case PolicyKind::kLfu: return "lfu";
  }
  return "unknown";
}

}  // namespace impress::store
