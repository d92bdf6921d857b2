// TierManager: see tier-manager.h for the access algorithm it implements.
#include "store/tier-manager.h"

#include <limits>
#include <string>

namespace impress::store {

std::string_view TierName(Tier t) {
  switch (t) {
    case Tier::kSsd: return "ssd";
    case Tier::kHost: return "host";
    case Tier::kDevice: return "device";
  }
  return "unknown";
}

TierManager::TierManager(std::unique_ptr<CachePolicy> policy, uint64_t device_budget_bytes,
                         uint64_t host_budget_bytes) :
    policy_(policy ? std::move(policy) : MakeCachePolicy(PolicyKind::kImpress)) {
  device_.counters.budget_bytes = device_budget_bytes;
  host_.counters.budget_bytes = host_budget_bytes;
}

TierManager::~TierManager() = default;

Priority TierManager::Key(ChunkId id, const ChunkStats& s) const {
  const Priority p = policy_->Rank(s);
  if (pinned_.count(id) == 0) return p;
  return {std::numeric_limits<double>::infinity(), p.primary};
}

void TierManager::SetPinned(ChunkId id, bool pinned) {
  const bool was = pinned_.count(id) != 0;
  if (was == pinned) return;
  if (pinned) pinned_.insert(id);
  else pinned_.erase(id);
  auto it = entries_.find(id);
  if (it != entries_.end()) Rekey(id, it->second);
}

void TierManager::Rekey(ChunkId id, Entry& e) {
  const Priority p = Key(id, e.stats);
  if (e.tier != Tier::kSsd) {
    Heap& heap = state(e.tier).heap;
    heap.erase({e.priority, id});
    heap.insert({p, id});
  }
  e.priority = p;
}

void TierManager::Place(ChunkId id, Entry& e, Tier to) {
  TierState& st = state(to);
  e.tier = to;
  e.priority = Key(id, e.stats);
  st.heap.insert({e.priority, id});
  st.counters.used_bytes += e.stats.bytes;
  st.counters.n_chunks += 1;
  st.counters.admissions += 1;
}

void TierManager::Unplace(ChunkId id, Entry& e) {
  if (e.tier == Tier::kSsd) return;
  TierState& st = state(e.tier);
  st.heap.erase({e.priority, id});
  st.counters.used_bytes -= e.stats.bytes;
  st.counters.n_chunks -= 1;
  e.tier = Tier::kSsd;
}

std::optional<std::vector<ChunkId>> TierManager::VictimsFor(Tier tier, uint64_t bytes, const Priority& p,
                                                            ChunkId self) const {
  const TierState& st = state(tier);
  const uint64_t budget = st.counters.budget_bytes;
  if (bytes > budget) return std::nullopt;
  std::vector<ChunkId> victims;
  if (st.counters.used_bytes + bytes <= budget) return victims;  // room already
  const uint64_t need = st.counters.used_bytes + bytes - budget;
  uint64_t freed = 0;
  for (const auto& [prio, id] : st.heap) {
    if (id == self) continue;
    if (!(p > prio)) return std::nullopt;  // must beat every chunk it pushes out
    victims.push_back(id);
    freed += entries_.at(id).stats.bytes;
    if (freed >= need) return victims;
  }
  return std::nullopt;
}

void TierManager::Demote(ChunkId id, Entry& e, std::vector<TierMove>& moves) {
  // `e` has just left the device tier (e.tier == kSsd): it goes to host if it wins room there.
  auto victims = VictimsFor(Tier::kHost, e.stats.bytes, e.priority, id);
  if (!victims) {
    moves.push_back({id, Tier::kDevice, Tier::kSsd, e.stats.bytes});
    return;
  }
  for (ChunkId v : *victims) {
    Entry& ve = entries_.at(v);
    Unplace(v, ve);
    host_.counters.evictions += 1;
    moves.push_back({v, Tier::kHost, Tier::kSsd, ve.stats.bytes});
  }
  Place(id, e, Tier::kHost);
  moves.push_back({id, Tier::kDevice, Tier::kHost, e.stats.bytes});
}

bool TierManager::TryAdmit(ChunkId id, Entry& e, Tier tier, std::vector<TierMove>& moves) {
  auto victims = VictimsFor(tier, e.stats.bytes, e.priority, id);
  if (!victims) return false;
  const Tier from = e.tier;
  Unplace(id, e);  // a host chunk being promoted frees its host room first (the swap)
  for (ChunkId v : *victims) {
    Entry& ve = entries_.at(v);
    Unplace(v, ve);
    state(tier).counters.evictions += 1;
    if (tier == Tier::kDevice) {
      Demote(v, ve, moves);
    } else {
      moves.push_back({v, Tier::kHost, Tier::kSsd, ve.stats.bytes});
    }
  }
  Place(id, e, tier);
  moves.push_back({id, from, tier, e.stats.bytes});
  return true;
}

AccessResult TierManager::Access(ChunkId id, uint64_t bytes, std::optional<double> fraction_selected) {
  ++clock_;
  ++n_accesses_;
  Entry& e = entries_[id];
  if (e.tier == Tier::kSsd) e.stats.bytes = bytes;
  RecordAccess(e.stats, clock_);
  if (fraction_selected) (void)RecordImportance(e.stats, *fraction_selected);
  Rekey(id, e);  // "update score"

  AccessResult r;
  r.found_in = e.tier;
  const uint64_t b = e.stats.bytes;
  switch (e.tier) {
    case Tier::kDevice:
      device_.counters.hits += 1;
      device_.counters.hit_bytes += b;
      break;
    case Tier::kHost:
      device_.counters.misses += 1;
      host_.counters.hits += 1;
      host_.counters.hit_bytes += b;
      // Copied to device for this request; promoted (swapping out the device minimum) if it
      // beats it.
      TryAdmit(id, e, Tier::kDevice, r.moves);
      break;
    case Tier::kSsd:
      device_.counters.misses += 1;
      host_.counters.misses += 1;
      ssd_reads_ += 1;
      ssd_read_bytes_ += b;
      // Read into host, needed vectors copied to device; its tier: device, host or neither.
      if (!TryAdmit(id, e, Tier::kDevice, r.moves)) TryAdmit(id, e, Tier::kHost, r.moves);
      break;
  }
  r.resident_after = e.tier;
  r.priority = e.priority;
  return r;
}

Tier TierManager::AdmitFresh(ChunkId id, uint64_t bytes) {
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.tier != Tier::kSsd) return it->second.tier;
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    const TierCounters& c = state(t).counters;
    if (c.used_bytes + bytes > c.budget_bytes) continue;
    Entry& e = entries_[id];  // statistics only for chunks placed: the rest stay unknown
    e.stats.bytes = bytes;
    Place(id, e, t);
    return t;
  }
  return Tier::kSsd;
}

Status TierManager::ReportImportance(ChunkId id, double fraction_selected) {
  ChunkStats probe;
  IMPRESS_RETURN_IF_ERROR(RecordImportance(probe, fraction_selected));  // validates only
  Entry& e = entries_[id];
  IMPRESS_RETURN_IF_ERROR(RecordImportance(e.stats, fraction_selected));
  Rekey(id, e);
  return Status::Ok();
}

std::vector<TierMove> TierManager::SetBudget(Tier tier, uint64_t bytes) {
  std::vector<TierMove> moves;
  if (tier == Tier::kSsd) return moves;  // the SSD budget belongs to the store
  TierState& st = state(tier);
  st.counters.budget_bytes = bytes;
  while (st.counters.used_bytes > st.counters.budget_bytes && !st.heap.empty()) {
    const ChunkId v = st.heap.begin()->second;
    Entry& ve = entries_.at(v);
    Unplace(v, ve);
    st.counters.evictions += 1;
    if (tier == Tier::kDevice) {
      Demote(v, ve, moves);
    } else {
      moves.push_back({v, Tier::kHost, Tier::kSsd, ve.stats.bytes});
    }
  }
  return moves;
}

void TierManager::SetPolicy(std::unique_ptr<CachePolicy> policy) {
  if (!policy) return;
  policy_ = std::move(policy);
  for (auto& [id, e] : entries_) Rekey(id, e);
}

std::optional<TierMove> TierManager::Remove(ChunkId id, bool keep_stats) {
  if (!keep_stats) pinned_.erase(id);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  std::optional<TierMove> move;
  Entry& e = it->second;
  if (e.tier != Tier::kSsd) {
    move = TierMove{id, e.tier, Tier::kSsd, e.stats.bytes};
    Unplace(id, e);
  }
  if (!keep_stats) entries_.erase(it);
  return move;
}

Tier TierManager::Where(ChunkId id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? Tier::kSsd : it->second.tier;
}

std::optional<ChunkStats> TierManager::Stats(ChunkId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.stats;
}

void TierManager::RestoreStats(ChunkId id, const ChunkStats& stats) {
  Entry& e = entries_[id];
  const uint64_t bytes = e.stats.bytes;
  e.stats = stats;
  if (e.tier != Tier::kSsd) e.stats.bytes = bytes;  // a resident chunk keeps its accounted size
  if (e.stats.last_access > clock_) clock_ = e.stats.last_access;
  Rekey(id, e);
}

std::vector<std::pair<ChunkId, ChunkStats>> TierManager::AllStats() const {
  std::vector<std::pair<ChunkId, ChunkStats>> out;
  out.reserve(entries_.size());
  for (auto& [id, e] : entries_) out.push_back({id, e.stats});
  return out;
}

std::optional<std::pair<ChunkId, Priority>> TierManager::Min(Tier tier) const {
  if (tier == Tier::kSsd) return std::nullopt;
  const Heap& heap = state(tier).heap;
  if (heap.empty()) return std::nullopt;
  return std::make_pair(heap.begin()->second, heap.begin()->first);
}

std::vector<ChunkId> TierManager::Resident(Tier tier) const {
  std::vector<ChunkId> out;
  if (tier == Tier::kSsd) return out;
  for (auto& [p, id] : state(tier).heap) out.push_back(id);
  return out;
}

TierStats TierManager::stats() const {
  TierStats s;
  s.device = device_.counters;
  s.host = host_.counters;
  s.n_accesses = n_accesses_;
  s.ssd_reads = ssd_reads_;
  s.ssd_read_bytes = ssd_read_bytes_;
  s.n_chunks_known = entries_.size();
  return s;
}

void TierManager::ResetCounters() {
  for (TierState* st : {&device_, &host_}) {
    TierCounters& c = st->counters;
    c.hits = c.misses = c.hit_bytes = c.admissions = c.evictions = 0;
  }
  n_accesses_ = ssd_reads_ = ssd_read_bytes_ = 0;
}

Status TierManager::Validate() const {
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    const TierState& st = state(t);
    uint64_t used = 0;
    uint64_t n = 0;
    for (auto& [id, e] : entries_) {
      if (e.tier != t) continue;
      used += e.stats.bytes;
      ++n;
      if (st.heap.count({e.priority, id}) == 0) {
        return Status::Internal(std::string(TierName(t)) + " heap misses chunk " + std::to_string(id));
      }
      if (!(e.priority == Key(id, e.stats))) {
        return Status::Internal("stale priority of chunk " + std::to_string(id));
      }
    }
    if (n != st.heap.size() || n != st.counters.n_chunks) {
      return Status::Internal(std::string(TierName(t)) + " chunk count out of date");
    }
    if (used != st.counters.used_bytes) {
      return Status::Internal(std::string(TierName(t)) + " byte count out of date");
    }
    if (used > st.counters.budget_bytes) {
      return Status::Internal(std::string(TierName(t)) + " over budget");
    }
  }
  return Status::Ok();
}

}  // namespace impress::store
