// PrefixStore::Impl: what reads leave in the memory tiers. The admitter installs the chunks a
// read brought from the SSD (decided under the lock, copied outside it), and the tier manager's
// moves are applied as reads cause them.
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "store/prefix-store-impl.h"

namespace impress::store {

namespace {

// The admitter's copies can wait: at a lower priority they run while requests wait for the disk or
// between requests, and do not take a core from a request's compute (a 32K-token question admits
// about 0.4 GB). Best effort: where refused, the thread keeps the default priority.
void LowerThreadPriority() {
  if (::setpriority(PRIO_PROCESS, ::gettid(), 10) != 0)
    spdlog::debug("store: the admitter keeps the default priority ({})", std::strerror(errno));
}

}  // namespace

// Whether a read brought from the SSD something a memory tier is to keep (see WantInstallLocked).
bool PrefixStore::Impl::HasAdmissions(const PendingRead& pr) {
  for (const auto& s : pr.sources) {
    if (s.runs.empty()) continue;
    if (pr.probe ? s.whole && s.install != Tier::kSsd : s.block || s.install != Tier::kSsd) return true;
  }
  return false;
}

void PrefixStore::Impl::QueueAdmission(std::unique_ptr<PendingRead> pr) {
  MutexLock lk(&admit_mu);
  if (admit_stop) {
    RecycleBuffers(*pr);
    return;
  }
  admit_q_bytes += pr->buf.size();
  admit_q.push_back(std::move(pr));
  admit_cv.SignalAll();
}

bool PrefixStore::Impl::AdmissionsHeldLocked() const {
  return admit_holds > 0 && admit_waiters == 0 && admit_q_bytes < PrefixStore::kHeldAdmissionBytes;
}

void PrefixStore::Impl::HoldAdmissions(bool hold) {
  MutexLock lk(&admit_mu);
  admit_holds += hold ? 1 : -1;
  admit_cv.SignalAll();
}

// The admitter: installs each queued read's chunks, one chunk per hold of mu, so readers and
// writers wait at most one chunk's copy for it.
void PrefixStore::Impl::AdmitLoop() {
  LowerThreadPriority();
  for (;;) {
    std::unique_ptr<PendingRead> pr;
    {
      MutexLock lk(&admit_mu);
      admit_busy = false;
      admit_cv.SignalAll();  // WaitForAdmissions: maybe drained
      while (!admit_stop && (admit_q.empty() || AdmissionsHeldLocked())) admit_cv.Wait(&admit_mu);
      if (admit_stop) {
        for (auto& q : admit_q) RecycleBuffers(*q);
        admit_q.clear();
        admit_q_bytes = 0;
        admit_cv.SignalAll();
        return;
      }
      pr = std::move(admit_q.front());
      admit_q.pop_front();
      admit_q_bytes -= pr->buf.size();
      admit_busy = true;
    }
    for (const auto& s : pr->sources) InstallSource(*pr, s);
    RecycleBuffers(*pr);
  }
}

void PrefixStore::Impl::WaitForAdmissions() {
  MutexLock lk(&admit_mu);
  ++admit_waiters;
  admit_cv.SignalAll();  // a held queue gives way
  while (!admit_stop && (admit_busy || !admit_q.empty())) admit_cv.Wait(&admit_mu);
  --admit_waiters;
}

// What a read brought from the SSD is kept in the memory tiers: the chunks the tier manager
// admitted during planning (if still current), and the records a tier's block lacked.
// Whether chunk s, as this read brought it, is to be installed now, and where: *t the tier, *base the
// block a partial read adds its rows to (null: a new block).
bool PrefixStore::Impl::WantInstallLocked(const PendingRead& pr, const ReadSource& s, Tier* t, BlockPtr* base) {
  if (s.runs.empty()) return false;  // nothing read from the SSD
  auto sit = segs.find(s.segment);
  if (sit == segs.end() || (!pr.probe && sit->second.layout->generation != s.generation)) return false;
  *base = nullptr;
  if (!pr.probe && s.block) {  // fill in the block, if a tier still holds this very one
    for (Tier x : {Tier::kDevice, Tier::kHost}) {
      auto b = blocks[size_t(x)].find(s.cid);
      if (b != blocks[size_t(x)].end() && b->second == s.block) {
        *t = x;
        *base = s.block;
        return true;
      }
    }
    return false;
  }
  if (pr.probe && !s.whole) return false;
  *t = s.install;
  return s.install != Tier::kSsd && tiers.Where(s.cid) == s.install && !blocks[size_t(s.install)].count(s.cid);
}

// Decided under mu, copied without it (a chunk's copy must not stall the readers), published under
// it if still wanted.
void PrefixStore::Impl::InstallSource(const PendingRead& pr, const ReadSource& s) {
  Tier t = Tier::kSsd;
  BlockPtr base;
  {
    MutexLock lk(&mu);
    if (!WantInstallLocked(pr, s, &t, &base)) return;
  }
  BlockPtr b = pr.probe ? MakeProbeBlock(s, t) : MakeKVBlock(pr, s, t, base);
  if (!b) return;  // out of memory: the chunk is simply not cached
  MutexLock lk(&mu);
  Tier now = Tier::kSsd;
  BlockPtr now_base;
  if (WantInstallLocked(pr, s, &now, &now_base) && now == t && now_base == base)
    blocks[size_t(t)][s.cid] = std::move(b);
}

BlockPtr PrefixStore::Impl::MakeProbeBlock(const ReadSource& s, Tier t) {
  auto& mem = t == Tier::kDevice ? device_mem : host_mem;
  auto b = std::make_shared<TierBlock>();
  b->mem = mem;
  b->n = size_t(s.ext->ext.n_slots) * probe_rec_bytes;
  b->generation = s.generation;
  b->p = mem->Alloc(b->n);
  if (!b->p) return nullptr;
  mem->CopyIn(b->p, s.At(kChunkHeaderBytes), b->n);  // the probe records, without the header (read whole)
  return b;
}

// A new block of tier t for chunk s: `base`'s records (none when null) plus those this read brought
// (every one for a whole read).
BlockPtr PrefixStore::Impl::MakeKVBlock(const PendingRead& pr, const ReadSource& s, Tier t, const BlockPtr& base) {
  const uint32_t n_slots = s.ext->ext.n_slots;
  const size_t region = size_t(n_slots) * k_bytes;
  auto& mem = t == Tier::kDevice ? device_mem : host_mem;
  auto b = std::make_shared<TierBlock>();
  b->mem = mem;
  b->n = 2 * region;
  b->generation = s.generation;
  b->p = mem->Alloc(b->n);
  if (!b->p) return nullptr;
  // Host memory is written in place (the block is not published yet); another space through a copy.
  std::vector<uint8_t> staging;
  uint8_t* dst = static_cast<uint8_t*>(b->p);
  if (!mem->HostView(b->p)) {
    staging.resize(b->n);
    dst = staging.data();
  }
  const ChunkLayout lay = KVLayout(n_slots);
  if (s.whole) {
    std::memcpy(dst, s.At(lay.k_offset), region);  // read whole: one run
    std::memcpy(dst + region, s.At(lay.v_offset), region);
  } else {
    // A block a partial read starts is written whole (zeros where no record is yet): a page never
    // written would map the zero page when a later copy reads it, and the write that reuses its
    // memory after the block is freed would then fault and flush every core's TLB.
    if (base) base->mem->CopyOut(dst, base->p, base->n);
    else if (staging.empty()) std::memset(dst, 0, b->n);
    b->k_have = base && !base->k_have.empty() ? base->k_have : std::vector<bool>(n_slots, base != nullptr);
    b->v_have = base && !base->v_have.empty() ? base->v_have : std::vector<bool>(n_slots, base != nullptr);
    for (auto [row, w] : s.rows) {
      const size_t at = size_t(w) * k_bytes;
      if (pr.want_k && !b->k_have[w]) {
        std::memcpy(dst + at, s.At(lay.k_offset + at), k_bytes);
        b->k_have[w] = true;
      }
      if (pr.want_v && !b->v_have[w]) {
        std::memcpy(dst + region + at, s.At(lay.v_offset + at), k_bytes);
        b->v_have[w] = true;
      }
    }
    auto all = [](const std::vector<bool>& v) { return std::find(v.begin(), v.end(), false) == v.end(); };
    if (all(b->k_have)) b->k_have.clear();
    if (all(b->v_have)) b->v_have.clear();
  }
  if (!staging.empty()) mem->CopyIn(b->p, staging.data(), b->n);
  return b;
}

// ==================================================================== tier moves

void PrefixStore::Impl::ApplyMoveLocked(const TierMove& m) {
  auto& from = blocks[size_t(m.from)];
  auto it = from.find(m.chunk);
  if (m.to == Tier::kSsd) {
    if (it != from.end()) from.erase(it);
    return;
  }
  if (m.from == Tier::kSsd || it == from.end()) return;  // staged copies are installed after their read
  BlockPtr src = it->second;
  from.erase(it);
  auto& mem = m.to == Tier::kDevice ? device_mem : host_mem;
  if (src->mem->PlainHost() && mem->PlainHost()) {
    // Both tiers are host memory (the CPU backend's device tier): the block changes tier, its
    // bytes stay where they are (a read holding it still reads them; it frees into its own space).
    blocks[size_t(m.to)][m.chunk] = std::move(src);
    return;
  }
  auto b = std::make_shared<TierBlock>();
  b->mem = mem;
  b->n = src->n;
  b->generation = src->generation;
  b->k_have = src->k_have;
  b->v_have = src->v_have;
  b->p = mem->Alloc(src->n);
  if (!b->p) return;  // out of memory: the chunk is simply not cached
  std::vector<uint8_t> tmp(src->n);
  src->mem->CopyOut(tmp.data(), src->p, src->n);
  mem->CopyIn(b->p, tmp.data(), src->n);
  blocks[size_t(m.to)][m.chunk] = std::move(b);
}

void PrefixStore::Impl::ApplyMovesLocked(const std::vector<TierMove>& moves) {
  for (const auto& m : moves) ApplyMoveLocked(m);
}

void PrefixStore::Impl::DropChunkLocked(ChunkId cid) {
  if (auto m = tiers.Remove(cid)) ApplyMoveLocked(*m);
  blocks[size_t(Tier::kHost)].erase(cid);
  blocks[size_t(Tier::kDevice)].erase(cid);
}

}  // namespace impress::store
