// TierManager: the placement policy of the device and host memory tiers (docs/design.md section 4).
//
// Owns: per-chunk statistics, which tier (if any) holds each chunk, byte accounting against the
// two budgets, two min-heaps (device, host) keyed by the CachePolicy's priority, and counters.
// It moves no bytes: every call returns the moves the store must carry out (mechanism apart from
// policy). The SSD holds every chunk; the device and host tiers are exclusive of each other.
//
// The access algorithm (Access()), for a chunk found ...
//   - in device: use it; update its score.
//   - in host: the store copies it to device for this request; update score; if the device has
//     room for it, or its priority beats the device minimum (strictly greater than each device
//     chunk that must leave to make room), it is promoted host -> device and those device chunks
//     are demoted device -> host (the swap of the paper).
//   - on SSD only: the store reads it into host and copies the needed vectors to device; update
//     score; then it is admitted to device if that has room or it beats the device minimum(s),
//     else to host on the same rule, else to neither (the staging copy is discarded).
// A chunk leaving device by demotion goes to host by the same rule (room, or beats the host
// minimum(s)); a host chunk pushed out is dropped (it stays on SSD). A chunk bigger than a
// tier's budget never enters that tier.
//
// Pinned chunks (SetPinned: the store pins the chunks of pinned radix nodes) rank above every
// unpinned chunk under every policy: their priority is (+inf, the policy's primary), so they are
// admitted whenever they fit and leave a tier last; among themselves the policy still ranks.
//
// Moves in one result are listed in the order to apply them. The budgets hold once all of them
// are applied; in between, a swap may overshoot a tier by at most the bytes being swapped.
//
// Thread contract: requires external synchronization (the store's mutex). Nothing here blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/status.h"
#include "store/cache-policy.h"

namespace impress::store {

enum class Tier : uint8_t {
  kSsd = 0,  // in no memory tier (the SSD always has it)
  kHost = 1,
  kDevice = 2,
};
std::string_view TierName(Tier t);

// Move `chunk` (`bytes` big) from one tier to another:
//   kSsd -> kHost / kDevice: keep the copy just read from SSD (staged in host) in that tier;
//   kHost -> kDevice: promotion; kDevice -> kHost: demotion;
//   kHost / kDevice -> kSsd: drop the tier's copy and free its memory.
struct TierMove {
  ChunkId chunk = 0;
  Tier from = Tier::kSsd;
  Tier to = Tier::kSsd;
  uint64_t bytes = 0;
  friend bool operator==(const TierMove&, const TierMove&) = default;
};

struct AccessResult {
  Tier found_in = Tier::kSsd;        // where the request's data comes from (kSsd: an SSD read)
  Tier resident_after = Tier::kSsd;  // the chunk's tier after the moves
  std::vector<TierMove> moves;       // residency changes to apply, in order
  Priority priority;                 // the chunk's priority after the update
};

struct TierCounters {
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t n_chunks = 0;
  uint64_t hits = 0;    // accesses that found the chunk in this tier
  uint64_t misses = 0;  // device: accesses not in device; host: accesses in neither tier
  uint64_t hit_bytes = 0;
  uint64_t admissions = 0;  // chunks that entered the tier (from SSD, promotion or demotion)
  uint64_t evictions = 0;   // chunks that left the tier to make room or on a budget shrink
};

struct TierStats {
  TierCounters device;
  TierCounters host;
  uint64_t n_accesses = 0;
  uint64_t ssd_reads = 0;  // accesses served from SSD
  uint64_t ssd_read_bytes = 0;
  uint64_t n_chunks_known = 0;  // chunks with statistics
};

class TierManager {
 public:
  TierManager(std::unique_ptr<CachePolicy> policy, uint64_t device_budget_bytes, uint64_t host_budget_bytes);
  ~TierManager();
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  // One access of `chunk` (`bytes` big in memory) by a request; runs the algorithm above.
  // `fraction_selected` (in [0, 1]), when the caller already knows it, is folded into the
  // important ratio before the placement decision; out-of-range values are ignored (and counted
  // as no report). A resident chunk keeps its recorded size; `bytes` updates it otherwise.
  AccessResult Access(ChunkId chunk, uint64_t bytes, std::optional<double> fraction_selected = std::nullopt);

  // A chunk just written whose KV is still in memory (`bytes` big): placed in device if that
  // has room, else in host if that has room, else in neither. Nothing is pushed out for it: the
  // policy ranks chunks only when something must leave, and a fresh chunk has no access to rank
  // by yet. Counts no access (no hit, no miss). A chunk already resident stays where it is.
  // Returns the tier it is in afterwards; the store installs the bytes (kSsd: nothing to do).
  Tier AdmitFresh(ChunkId chunk, uint64_t bytes);

  // After a request: the fraction of the chunk's tokens the pipeline selected. Updates the EMA
  // and re-keys the chunk in its heap; moves nothing (placement changes on the next access).
  // Unknown chunks get statistics (frequency 0). InvalidArgument for NaN or outside [0, 1].
  Status ReportImportance(ChunkId chunk, double fraction_selected);

  // Changes a budget; shrinking evicts lowest-priority chunks (device ones are demoted to host
  // when they win a place there, else dropped). Returns the moves to apply.
  std::vector<TierMove> SetBudget(Tier tier, uint64_t bytes);

  // Switches policy (e.g. the GUI knob): re-keys both heaps; moves nothing.
  void SetPolicy(std::unique_ptr<CachePolicy> policy);
  const CachePolicy& policy() const { return *policy_; }

  // The chunk no longer exists (SSD eviction, rewritten by reorder): forgets its statistics
  // unless `keep_stats`, and returns the drop to apply if a memory tier held it.
  std::optional<TierMove> Remove(ChunkId chunk, bool keep_stats = false);

  // Marks a chunk pinned or not (it need not be known yet; Remove() forgets the mark) and
  // re-keys it; moves nothing.
  void SetPinned(ChunkId chunk, bool pinned);
  bool IsPinned(ChunkId chunk) const { return pinned_.count(chunk) != 0; }
  // The key the heaps use: the policy's rank, lifted above every unpinned chunk when pinned.
  Priority Key(ChunkId chunk, const ChunkStats& s) const;

  Tier Where(ChunkId chunk) const;
  std::optional<ChunkStats> Stats(ChunkId chunk) const;
  // Statistics loaded from the catalog on open (the chunk is in no memory tier yet).
  void RestoreStats(ChunkId chunk, const ChunkStats& stats);
  // Every chunk with statistics, for persisting them.
  std::vector<std::pair<ChunkId, ChunkStats>> AllStats() const;

  // The lowest-priority chunk of a memory tier, if any.
  std::optional<std::pair<ChunkId, Priority>> Min(Tier tier) const;
  std::vector<ChunkId> Resident(Tier tier) const;  // ascending priority

  TierStats stats() const;
  void ResetCounters();  // hits, misses, evictions...; keeps residency and chunk statistics
  uint64_t clock() const { return clock_; }

  // Checks accounting, heaps and exclusivity; for tests.
  Status Validate() const;

 private:
  struct Entry {
    ChunkStats stats;
    Tier tier = Tier::kSsd;
    Priority priority;  // key in its tier's heap while resident
  };
  using Heap = std::set<std::pair<Priority, ChunkId>>;  // an updatable min-heap

  struct TierState {
    Heap heap;
    TierCounters counters;
  };
  TierState& state(Tier t) { return t == Tier::kDevice ? device_ : host_; }
  const TierState& state(Tier t) const { return t == Tier::kDevice ? device_ : host_; }

  void Rekey(ChunkId id, Entry& e);
  void Place(ChunkId id, Entry& e, Tier to);
  void Unplace(ChunkId id, Entry& e);
  // Victims (ascending priority) that must leave `tier` so `bytes` more fit, all of priority
  // strictly below `p` (ignoring `self`); nullopt if that is impossible.
  std::optional<std::vector<ChunkId>> VictimsFor(Tier tier, uint64_t bytes, const Priority& p, ChunkId self) const;
  // Places a chunk (currently in `from`, not in `tier`) into `tier` if it wins room there,
  // demoting/dropping the victims; returns whether it was placed.
  bool TryAdmit(ChunkId id, Entry& e, Tier tier, std::vector<TierMove>& moves);
  void Demote(ChunkId id, Entry& e, std::vector<TierMove>& moves);

  std::unique_ptr<CachePolicy> policy_;
  std::unordered_map<ChunkId, Entry> entries_;
  std::unordered_set<ChunkId> pinned_;
  TierState device_;
  TierState host_;
  uint64_t n_accesses_ = 0;
  uint64_t ssd_reads_ = 0;
  uint64_t ssd_read_bytes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace impress::store
