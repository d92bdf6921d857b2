// PrefixStore::Impl: the read path. Match/Release, per-layer reads (planned under the lock,
// waited and gathered outside it, or gathered chunk by chunk as they arrive) and importance
// reports. What reads leave in the memory tiers: prefix-store-admit.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "store/prefix-store-impl.h"

namespace impress::store {

namespace {

// The runs of a source's rows (output row, record index) whose records lie one after another in
// memory (record(index) gives a record's bytes, rec_bytes apart) and go to consecutive output
// rows (out_rows as GatherSource takes them; rows going nowhere are left out): fn(first record's
// bytes, first output row, count) once per run. A group selection keeps whole 4 KiB groups and
// a probe read takes every record, so most of a read comes in runs copied at once.
template <class Record, class Fn>
void ForRecordRuns(const std::vector<std::pair<uint32_t, uint32_t>>& rows, std::span<const uint32_t> out_rows,
                   size_t rec_bytes, const Record& record, const Fn& fn) {
  const auto out_row = [&](uint32_t row) { return out_rows.empty() ? size_t(row) : size_t(out_rows[row]); };
  for (size_t i = 0; i < rows.size();) {
    const auto [row, rec] = rows[i];
    const size_t to = out_row(row);
    if (to == PrefixStore::kSkipRow) {
      ++i;
      continue;
    }
    const uint8_t* first = record(rec);
    size_t m = 1;
    for (; i + m < rows.size(); ++m) {
      const auto [next_row, next_rec] = rows[i + m];
      if (out_row(next_row) != to + m || next_rec != rec + m || record(next_rec) != first + m * rec_bytes) break;
    }
    fn(first, to, m);
    i += m;
  }
}

}  // namespace

// ==================================================================== match

MatchHandle PrefixStore::Impl::Match(std::span<const Token> tokens) {
  WaitForAdmissions();  // what earlier requests read is in the memory tiers before this one plans
  uint64_t n_remote = 0;
  std::shared_ptr<const RemotePrefix> remote = team ? StagedFor(tokens, &n_remote) : nullptr;
  MutexLock lk(&mu);
  MatchResult m = tree.Match(ns, tokens, true);
  MatchHandle h;
  for (const auto& sp : m.path) dirty_nodes.insert(sp.node);
  if (remote && n_remote > m.n_matched) {
    // The team tier holds more of it than the local tiers: every read of this request goes there.
    HandleState hs;
    hs.n_matched = n_remote;
    hs.remote = std::move(remote);
    h.id = next_handle++;
    h.n_matched = n_remote;
    h.remote = true;
    handles[h.id] = std::move(hs);
    return h;
  }
  if (m.n_matched == 0) return h;
  if (!tree.Lock(m.last_node).ok()) return h;
  HandleState hs;
  hs.last_node = m.last_node;
  hs.n_matched = m.n_matched;
  for (const auto& sp : m.path) {
    auto it = segs.find(sp.segment);
    if (it == segs.end()) break;  // cannot happen: the tree names only live segments
    hs.spans.push_back({sp, it->second.layout});
  }
  h.id = next_handle++;
  h.n_matched = m.n_matched;
  handles[h.id] = std::move(hs);
  return h;
}

Status PrefixStore::Impl::Release(MatchHandle& h) {
  if (h.id == 0) return Status::Ok();
  if (h.remote) {
    std::shared_ptr<const RemotePrefix> remote;
    {
      MutexLock lk(&mu);
      auto it = handles.find(h.id);
      if (it == handles.end())
        return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown or released");
      remote = std::move(it->second.remote);
      handles.erase(it);
    }
    h.id = 0;
    if (remote) FillAfterRemote(std::move(remote));
    return Status::Ok();
  }
  MutexLock lk(&mu);
  auto it = handles.find(h.id);
  if (it == handles.end())
    return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown or released");
  Status s = tree.Unlock(it->second.last_node);
  handles.erase(it);
  h.id = 0;
  TryPendingTruncationsLocked();
  return s;
}

// The handle's state, after checking the handle and the layer index.
Result<const HandleState*> PrefixStore::Impl::HandleLocked(const MatchHandle& h, int il) {
  auto hit = handles.find(h.id);
  if (hit == handles.end()) return Status::InvalidArgument("store: match handle " + std::to_string(h.id) + " unknown");
  if (il < 0 || il >= opt.n_layer)
    return Status::InvalidArgument("store: layer " + std::to_string(il) + " out of range");
  return &hit->second;
}

// ==================================================================== submit

Result<ReadTicket> PrefixStore::Impl::SubmitProbeKeys(const MatchHandle& h, int il, uint8_t* records_into) {
  MutexLock lk(&mu);
  IMPRESS_ASSIGN_OR_RETURN(const HandleState* hs, HandleLocked(h, il));
  if (hs->remote) return SubmitRemoteLocked(*hs, il, /*probe=*/true, {}, false, false);
  auto pr = std::make_unique<PendingRead>();
  pr->probe = true;
  pr->n_rows = hs->n_matched;
  if (records_into) {
    pr->into.emplace();
    pr->into->probe_records = records_into;
  }
  for (const auto& sv : hs->spans) {
    const ExtentPtr& e = sv.layout->probes[size_t(il)];
    if (!e) return Status::Internal("store: probe keys of segment " + std::to_string(sv.span.segment) + " missing");
    if (bad_chunks.count({sv.span.segment, 0, uint32_t(il), UINT32_MAX}))
      return Status::Corruption("store: probe keys of segment " + std::to_string(sv.span.segment) + " layer " +
                                std::to_string(il) + " are corrupt");
    ReadSource s;
    s.cid = ProbeCid(sv.span.segment, uint32_t(il));
    s.segment = sv.span.segment;
    s.layer = uint32_t(il);
    s.index = UINT32_MAX;
    s.ext = e;
    for (uint64_t r = 0; r < sv.span.length; ++r)
      s.rows.push_back({uint32_t(sv.span.depth + r), uint32_t(sv.span.seg_begin + r)});
    const uint64_t wanted = sv.span.length * probe_rec_bytes;
    pr->stats.useful_bytes += wanted;
    // The probe keys are tier-managed like a chunk: read on every IMPRESS request, they rank high.
    // A tier admits an extent whole, so admitting one read from the SSD reads every record of the
    // segment. A request that wants only a short part of a long segment (a conversation's system
    // prompt, matched as the start of a stored document) reads its own records and leaves the
    // tiers alone: for a 31K-token document the whole extents were 2 MB a layer, 58 MB a request,
    // where the 14 tokens of a system prompt needed 14 records a layer.
    const bool resident = blocks[size_t(Tier::kDevice)].count(s.cid) || blocks[size_t(Tier::kHost)].count(s.cid);
    if (resident || wanted * kProbeAdmitShare >= ProbeMemBytes(e)) {
      AccessResult ar = tiers.Access(s.cid, ProbeMemBytes(e));
      for (const auto& m : ar.moves) {
        if (m.chunk == s.cid && m.from == Tier::kSsd && m.to != Tier::kSsd) s.install = m.to;
        else ApplyMoveLocked(m);
      }
    }
    for (Tier t : {Tier::kDevice, Tier::kHost}) {
      auto b = blocks[size_t(t)].find(s.cid);
      if (b != blocks[size_t(t)].end()) {
        s.block = b->second;
        (t == Tier::kDevice ? pr->stats.chunks_device : pr->stats.chunks_host)++;
        break;
      }
    }
    if (!s.block) {
      ++pr->stats.chunks_ssd;
      if (s.install != Tier::kSsd) {
        s.whole = true;
        s.runs = {{0, s.ext->ext.length / kBlockBytes}};
      } else {
        const uint64_t a = kChunkHeaderBytes + sv.span.seg_begin * probe_rec_bytes;
        s.runs = RunsFor({{a, a + sv.span.length * probe_rec_bytes}});
      }
    }
    pr->sources.push_back(std::move(s));
  }
  return SubmitLocked(std::move(pr));
}

Result<ReadTicket> PrefixStore::Impl::SubmitReadAllKeys(const MatchHandle& h, int il) {
  std::vector<uint32_t> pos(h.n_matched);
  std::iota(pos.begin(), pos.end(), 0u);
  return SubmitReadKV(h, il, pos, true, false, std::nullopt);
}

Result<std::vector<uint32_t>> PrefixStore::Impl::ReadGroups(const MatchHandle& h, int il, uint32_t group_tokens) {
  if (group_tokens == 0) return Status::InvalidArgument("store: read groups of 0 tokens");
  const uint32_t g = std::min(group_tokens, C);  // a group never spans two chunks
  MutexLock lk(&mu);
  IMPRESS_ASSIGN_OR_RETURN(const HandleState* hs, HandleLocked(h, il));
  if (hs->remote) return RemoteGroups(*hs, uint32_t(il), g);
  std::vector<uint32_t> out(hs->n_matched);
  uint32_t next = 0;
  const uint32_t per_chunk = (C + g - 1) / g;
  // Chunk and group sizes are powers of two in practice: shifts then, not two divisions a token.
  const bool pow2 = std::has_single_bit(C) && std::has_single_bit(g);
  const int g_shift = std::countr_zero(g);
  std::vector<uint32_t> id;  // group key -> dense id, reused across spans
  for (const auto& sv : hs->spans) {
    // Slot s of chunk c lies in group (c, (s % C) / g): numbered densely per span, in slot order.
    // Keys first (into `out`), then the ids of the keys present, ascending: linear, no map.
    uint32_t max_key = 0;
    for (uint64_t r = 0; r < sv.span.length; ++r) {
      const uint32_t slot = sv.layout->Slot(uint32_t(il), sv.span.seg_begin + r);
      // With powers of two, (slot / C) * (C / g) + (slot % C) / g is slot / g.
      const uint32_t key = pow2 ? slot >> g_shift : (slot / C) * per_chunk + (slot % C) / g;
      out[sv.span.depth + r] = key;
      max_key = std::max(max_key, key);
    }
    constexpr uint32_t kAbsent = ~0u;
    id.assign(size_t(max_key) + 1, kAbsent);
    for (uint64_t r = 0; r < sv.span.length; ++r) id[out[sv.span.depth + r]] = 0;
    for (uint32_t& x : id)
      if (x != kAbsent) x = next++;
    for (uint64_t r = 0; r < sv.span.length; ++r) out[sv.span.depth + r] = id[out[sv.span.depth + r]];
  }
  return out;
}

uint32_t PrefixStore::Impl::BlockGroupTokens() const {
  // The fewest tokens whose records fill whole blocks; when that passes a chunk (records of a
  // size prime to 4 KiB, e.g. int8 with its scales), about one block's worth.
  const uint32_t g = uint32_t(kBlockBytes / std::gcd(uint64_t(k_bytes), uint64_t(kBlockBytes)));
  if (g > C) return std::clamp(kBlockBytes / k_bytes, 1u, C);
  return std::max(g, 1u);
}

Result<ReadTicket> PrefixStore::Impl::SubmitReadKV(const MatchHandle& h, int il, std::span<const uint32_t> positions,
                                                   bool want_k, bool want_v, std::optional<ReadInto> into) {
  PendingRead* early = nullptr;  // a read whose memory-tier rows are placed now, unlocked
  Result<ReadTicket> t = [&]() -> Result<ReadTicket> {
    MutexLock lk(&mu);
    IMPRESS_ASSIGN_OR_RETURN(const HandleState* hs, HandleLocked(h, il));
    if (!want_k && !want_v) return Status::InvalidArgument("store: a KV read must want K, V or both");
    if (hs->remote) {
      if (into && into->arrivals)
        return Status::InvalidArgument("store: a read of a remote match cannot report rows as they arrive");
      return SubmitRemoteLocked(*hs, il, /*probe=*/false, positions, want_k, want_v);
    }
    auto pr = std::make_unique<PendingRead>();
    pr->want_k = want_k;
    pr->want_v = want_v;
    pr->n_rows = positions.size();
    if (into && !into->rows.empty() && into->rows.size() != positions.size())
      return Status::InvalidArgument("store: a read's output rows do not match its positions");
    pr->into = std::move(into);
    IMPRESS_RETURN_IF_ERROR(PlanKVSourcesLocked(*hs, uint32_t(il), positions, pr.get()));
    const uint64_t want_bytes = (want_k ? k_bytes : 0) + (want_v ? k_bytes : 0);
    pr->stats.useful_bytes = positions.size() * want_bytes;
    PlanTierReadsLocked(pr.get());
    PendingRead* p = pr.get();
    IMPRESS_ASSIGN_OR_RETURN(const ReadTicket ticket, SubmitLocked(std::move(pr)));
    if (p->into && p->into->arrivals) early = p;
    return ticket;
  }();
  // The rows the memory tiers hold go in place before the caller computes on them; the disk's
  // follow as their chunks arrive (ServeArrived).
  if (t.ok() && early) ServeFromMemory(*early);
  return t;
}

// One source per chunk the positions fall in (in the layout the handle pinned), with the rows
// each chunk serves.
Status PrefixStore::Impl::PlanKVSourcesLocked(const HandleState& hs, uint32_t il, std::span<const uint32_t> positions,
                                              PendingRead* pr) {
  // Sources by chunk index, for the segment of the span the positions are in (they come span by
  // span, ascending): source + 1, 0 for none yet. A segment met again in a later span finds the
  // sources made for it before.
  std::vector<uint32_t>& source_of = plan_sources_;
  uint64_t segment = ~uint64_t{0};
  size_t sp = 0;
  for (size_t r = 0; r < positions.size(); ++r) {
    const uint64_t p = positions[r];
    if (p >= hs.n_matched || (r > 0 && p <= positions[r - 1]))
      return Status::InvalidArgument("store: position " + std::to_string(p) + " is out of range (" +
                                     std::to_string(hs.n_matched) + " matched) or not ascending");
    while (sp < hs.spans.size() && p >= hs.spans[sp].span.depth + hs.spans[sp].span.length) ++sp;
    const SpanView& sv = hs.spans[sp];
    const std::vector<ExtentPtr>& chunks = sv.layout->chunks[il];
    if (sv.span.segment != segment) {
      segment = sv.span.segment;
      source_of.assign(chunks.size(), 0);
      for (size_t i = 0; i < pr->sources.size(); ++i)
        if (pr->sources[i].segment == segment && pr->sources[i].index < source_of.size())
          source_of[pr->sources[i].index] = uint32_t(i + 1);
    }
    const uint64_t off = sv.span.seg_begin + (p - sv.span.depth);
    const uint32_t slot = sv.layout->Slot(il, off);
    const uint32_t idx = slot / C;
    if (idx >= chunks.size())
      return Status::Internal("store: slot " + std::to_string(slot) + " of segment " + std::to_string(segment) +
                              " lies past its chunks");
    if (source_of[idx] == 0) {
      ReadSource s;
      s.cid = Cid(segment, il, idx);
      s.segment = segment;
      s.layer = il;
      s.index = idx;
      s.generation = sv.layout->generation;
      s.ext = chunks[idx];
      if (!s.ext)
        return Status::Internal("store: chunk " + std::to_string(idx) + " of segment " + std::to_string(s.segment) +
                                " was freed while locked");
      if (bad_chunks.count({s.segment, s.generation, s.layer, idx}))
        return Status::Corruption("store: chunk " + std::to_string(idx) + " of segment " + std::to_string(s.segment) +
                                  " layer " + std::to_string(il) + " failed its checksum and is not served");
      pr->sources.push_back(std::move(s));
      source_of[idx] = uint32_t(pr->sources.size());
    }
    pr->sources[source_of[idx] - 1].rows.push_back({uint32_t(r), slot - idx * C});
  }
  return Status::Ok();
}

// Per source: tells the tier manager of the access (applying the moves it decides), serves it
// from a memory tier when one holds it, and plans the disk blocks of the records it lacks. A chunk
// admitted from the SSD costs only the blocks the request wanted (not a read of the whole chunk):
// the tier keeps what was read, and later reads bring the rest.
void PrefixStore::Impl::PlanTierReadsLocked(PendingRead* pr) {
  for (auto& s : pr->sources) {
    // The important ratio comes from ReportImportance after the request. Until a chunk's first
    // report, a read of part of its values is the selection and ranks it now; otherwise a chunk
    // read once would rank with the optimistic prior (1.0) above a popular chunk read at a small
    // fraction. A read of every slot, or of keys only (the fallback), says nothing.
    std::optional<double> fraction;
    const uint32_t n_slots = s.ext->ext.n_slots;
    if (pr->want_v && n_slots > 0 && s.rows.size() < n_slots) {
      auto cs = tiers.Stats(s.cid);
      if (!cs || cs->n_importance_reports == 0) fraction = double(s.rows.size()) / double(n_slots);
    }
    AccessResult ar = tiers.Access(s.cid, ChunkMemBytes(s.ext), fraction);
    for (const auto& m : ar.moves) {
      if (m.chunk == s.cid && m.from == Tier::kSsd && m.to != Tier::kSsd) s.install = m.to;
      else ApplyMoveLocked(m);
    }
    Tier found = Tier::kSsd;
    for (Tier t : {Tier::kDevice, Tier::kHost}) {
      auto b = blocks[size_t(t)].find(s.cid);
      if (b != blocks[size_t(t)].end() && b->second->generation == s.generation) {
        s.block = b->second;
        found = t;
        break;
      }
    }
    // Only the blocks of the records wanted and not in memory: a key-only read never touches a
    // V block, and a chunk a tier holds whole reads nothing.
    const ChunkLayout lay = KVLayout(n_slots);
    BlockMask& mask = plan_blocks_;
    mask.Reset(s.ext->ext.length);
    for (auto [row, w] : s.rows) {
      const uint64_t at = uint64_t(w) * k_bytes;
      if (pr->want_k && !(s.block && s.block->HasK(w))) mask.Mark(lay.k_offset + at, lay.k_offset + at + k_bytes);
      if (pr->want_v && !(s.block && s.block->HasV(w))) mask.Mark(lay.v_offset + at, lay.v_offset + at + k_bytes);
    }
    if (mask.Empty()) {
      (found == Tier::kDevice ? pr->stats.chunks_device : pr->stats.chunks_host)++;
      continue;
    }
    ++pr->stats.chunks_ssd;
    // Every record of the chunk wanted and none in memory: the whole extent, in one run.
    s.whole = s.install != Tier::kSsd && !s.block && pr->want_k && pr->want_v && s.rows.size() == n_slots;
    s.runs = s.whole ? std::vector<std::pair<uint32_t, uint32_t>>{{0, s.ext->ext.length / kBlockBytes}}
                     : mask.Runs(opt.read_gap_blocks);
  }
}

Result<ReadTicket> PrefixStore::Impl::SubmitLocked(std::unique_ptr<PendingRead> pr) {
  // One buffer holds every block the read brings, run after run: memory for the bytes read, not
  // for the chunks they lie in, and one buffer the pool can hand to the next read.
  uint64_t total = 0;
  for (const auto& s : pr->sources)
    for (auto [b, n] : s.runs) total += uint64_t(n) * kBlockBytes;
  if (total > 0) {
    pr->buf = GetBuffer(total);
    if (!pr->buf.data()) return Status::ResourceExhausted("store: out of memory for a read buffer");
  }
  std::vector<ReadOp> ops;
  uint64_t at = 0;
  for (auto& s : pr->sources) {
    if (s.runs.empty()) continue;  // served from a memory tier
    File* f = files->file(s.ext->ext.file);
    if (!f) return Status::Internal("store: data file " + std::to_string(s.ext->ext.file) + " is not open");
    s.read = pr->buf.data() + at;
    s.block_at.assign(s.ext->ext.length / kBlockBytes, 0);
    uint32_t in_read = 0;
    for (auto [b, n] : s.runs) {
      ops.push_back(ReadOp{f, s.ext->ext.offset + uint64_t(b) * kBlockBytes, n * kBlockBytes, s.read + in_read,
                           uint32_t(&s - pr->sources.data())});
      for (uint32_t x = 0; x < n; ++x) s.block_at[b + x] = in_read + x * kBlockBytes;
      in_read += n * kBlockBytes;
      pr->stats.ssd_bytes += uint64_t(n) * kBlockBytes;
    }
    at += in_read;
  }
  pr->stats.n_ios = uint32_t(ops.size());
  st.ssd_bytes_read += pr->stats.ssd_bytes;
  st.chunk_reads += pr->stats.chunks_ssd;
  ++st.n_reads;
  ReadEngine::GroupDone on_group;
  if (pr->into) {
    pr->served.assign(pr->sources.size(), 0);
    on_group = [this, p = pr.get()](uint32_t g) { ServeArrived(*p, g); };  // the read outlives its batch
  }
  pr->ticket = io->Submit(std::move(ops), std::move(on_group));
  if (pr->into && pr->into->arrivals)
    pr->into->arrivals->SetFinishedProbe([e = io.get(), tk = pr->ticket] { return e->Finished(tk); });
  ReadTicket t = next_ticket++;
  reads[t] = std::move(pr);
  return t;
}

// Block runs covering the byte ranges [a, b) (chunk-relative) of the given records; runs at most
// max_gap_blocks apart are joined (the blocks between are read too).
std::vector<std::pair<uint32_t, uint32_t>> PrefixStore::Impl::RunsFor(
    const std::vector<std::pair<uint64_t, uint64_t>>& ranges, uint32_t max_gap_blocks) {
  uint64_t end = 0;
  for (auto [a, b] : ranges) end = std::max(end, b);
  BlockMask mask;
  mask.Reset(end);
  for (auto [a, b] : ranges) mask.Mark(a, b);
  return mask.Runs(max_gap_blocks);
}

void BlockMask::Reset(uint64_t bytes) {
  words_.assign(size_t((bytes + kBlockBytes - 1) / kBlockBytes + 63) / 64, 0);
  empty_ = true;
}

void BlockMask::Mark(uint64_t a, uint64_t b) {
  if (b <= a) return;
  const uint64_t last = (b - 1) / kBlockBytes;
  if (last / 64 >= words_.size()) words_.resize(size_t(last / 64 + 1), 0);
  for (uint64_t x = a / kBlockBytes; x <= last; ++x) words_[size_t(x >> 6)] |= uint64_t{1} << (x & 63);
  empty_ = false;
}

std::vector<std::pair<uint32_t, uint32_t>> BlockMask::Runs(uint32_t max_gap_blocks) const {
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (size_t w = 0; w < words_.size(); ++w) {
    for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
      const uint32_t x = uint32_t(w * 64 + size_t(std::countr_zero(bits)));
      if (!runs.empty() && x - (runs.back().first + runs.back().second) <= max_gap_blocks) {
        runs.back().second = x - runs.back().first + 1;
      } else {
        runs.push_back({x, 1});
      }
    }
  }
  return runs;
}

// ==================================================================== wait

Result<ReadResult> PrefixStore::Impl::Wait(ReadTicket t) {
  size_t n_k = 0, n_v = 0;
  {
    MutexLock lk(&mu);
    auto it = reads.find(t);
    if (it == reads.end())
      return Status::InvalidArgument("store: read ticket " + std::to_string(t) + " unknown or already waited");
    const PendingRead& pr = *it->second;
    const size_t row = (pr.probe ? opt.probe_kv_heads.size() : size_t(opt.n_head_kv)) * size_t(opt.head_dim);
    n_k = pr.probe || pr.want_k ? pr.n_rows * row : 0;
    n_v = !pr.probe && pr.want_v ? pr.n_rows * row : 0;
  }
  ReadResult out;
  out.k.resize(n_k);
  out.v.resize(n_v);
  IMPRESS_ASSIGN_OR_RETURN(out.stats, WaitInto(t, out.k.data(), out.v.data()));
  return out;
}

Result<ReadStats> PrefixStore::Impl::WaitInto(ReadTicket t, f16_t* k_out, f16_t* v_out, uint8_t* probe_records,
                                              std::span<const uint32_t> out_rows) {
  std::unique_ptr<PendingRead> pr;
  {
    MutexLock lk(&mu);
    auto it = reads.find(t);
    if (it == reads.end())
      return Status::InvalidArgument("store: read ticket " + std::to_string(t) + " unknown or already waited");
    if (probe_records && !it->second->probe)
      return Status::InvalidArgument("store: read ticket " + std::to_string(t) + " is not a probe read");
    if (!out_rows.empty() && (it->second->probe || out_rows.size() != it->second->n_rows))  // the ticket stays
      return Status::InvalidArgument("store: read ticket " + std::to_string(t) + ": output rows do not match the read");
    if (const auto& in = it->second->into;
        in && (in->k != k_out || in->v != v_out || in->probe_records != probe_records ||
               !std::equal(in->rows.begin(), in->rows.end(), out_rows.begin(), out_rows.end())))
      return Status::InvalidArgument("store: read ticket " + std::to_string(t) +
                                     ": waited into other buffers than it was submitted for");
    pr = std::move(it->second);
    reads.erase(it);
  }
  if (pr->remote) return WaitRemote(*pr, k_out, v_out, probe_records, out_rows);
  ReadTiming timing;
  Status io_st = io->Wait(pr->ticket, &timing);
  pr->stats.submitted = timing.submitted;
  pr->stats.completed = timing.completed;
  // The read's buffers go back to the pool on return, unless the admitter takes them (below).
  struct Recycle {
    Impl& im;
    std::unique_ptr<PendingRead>& pr;
    ~Recycle() {
      if (pr) im.RecycleBuffers(*pr);
    }
  } recycle{*this, pr};
  const ReadStats stats = pr->stats;
  if (!io_st.ok()) return io_st.WithContext("store read");
  IMPRESS_RETURN_IF_ERROR(VerifyRead(*pr));  // before serving a byte of it
  if (pr->probe) {
    for (size_t g = 0; g < pr->sources.size(); ++g)
      if (pr->served.empty() || !pr->served[g]) PlaceProbeRecords(pr->sources[g], probe_records, k_out);
  } else {
    GatherKV(*pr, k_out, v_out, out_rows);
  }
  if (HasAdmissions(*pr)) QueueAdmission(std::move(pr));
  return stats;
}

void PrefixStore::Impl::RecycleBuffers(PendingRead& pr) {
  for (auto& s : pr.sources) s.read = nullptr;
  PutBuffer(std::move(pr.buf));
}

// Checks every source read from disk; a failure drops the chunk (probe keys: the segment's
// prefix) and truncates the tree there.
Status PrefixStore::Impl::VerifyRead(PendingRead& pr) {
  for (auto& s : pr.sources) {
    if (s.runs.empty() || (!pr.served.empty() && pr.served[size_t(&s - pr.sources.data())])) continue;
    Status v = VerifySource(s, pr.probe);
    if (v.ok()) continue;
    MutexLock lk(&mu);
    if (pr.probe) {
      bad_chunks.insert({s.segment, 0, s.layer, UINT32_MAX});
      ++st.chunks_dropped_corrupt;
      spdlog::error("store: {} -- prefix truncated at segment {}", v.ToString(), s.segment);
      pending_truncations.insert({s.segment, 0});
      TryPendingTruncationsLocked();
    } else {
      MarkCorruptLocked(s, v);
    }
    return v;
  }
  return Status::Ok();
}

// A tier block's records: read in place where its memory is the host's, else copied into tmp.
// The block is published whole and never written again, so reading it needs only the reference
// the read holds.
const uint8_t* PrefixStore::Impl::BlockRecords(const TierBlock& b, std::vector<uint8_t>& tmp) {
  if (const void* view = b.mem->HostView(b.p)) return static_cast<const uint8_t*>(view);
  tmp.resize(b.n);
  b.mem->CopyOut(tmp.data(), b.p, b.n);
  return tmp.data();
}

// A probe read's records of one source in position order: as stored into `records`, or (null)
// decoded into k_out; from a tier block (the records it holds) or the chunk image the disk read.
void PrefixStore::Impl::PlaceProbeRecords(const ReadSource& s, uint8_t* records, f16_t* k_out) const {
  const int n_probe = int(opt.probe_kv_heads.size());
  const size_t pe = size_t(n_probe) * size_t(opt.head_dim);
  std::vector<uint8_t> tmp;
  // A memory tier's records (n_slots, n_probe, head_dim); null: those the disk read brought.
  const uint8_t* recs = s.block ? BlockRecords(*s.block, tmp) : nullptr;
  const auto record = [&](uint32_t rec) {
    return recs ? recs + size_t(rec) * probe_rec_bytes : s.At(kChunkHeaderBytes + uint64_t(rec) * probe_rec_bytes);
  };
  ForRecordRuns(s.rows, {}, probe_rec_bytes, record, [&](const uint8_t* r, size_t row, size_t m) {
    if (records) {
      std::memcpy(records + row * probe_rec_bytes, r, m * probe_rec_bytes);
      return;
    }
    for (size_t x = 0; x < m; ++x)
      DecodeRecord(probe_enc, r + x * probe_rec_bytes, n_probe, opt.head_dim, k_out + (row + x) * pe);
  });
}

// Copies each requested row's K and/or V, in the caller's order, from tier blocks (the records
// they hold) or chunk images (the rest); sources served as they arrived are done already.
void PrefixStore::Impl::GatherKV(PendingRead& pr, f16_t* k_out, f16_t* v_out,
                                 std::span<const uint32_t> out_rows) const {
  for (size_t g = 0; g < pr.sources.size(); ++g)
    if (pr.served.empty() || !pr.served[g]) GatherSource(pr, pr.sources[g], k_out, v_out, out_rows);
}

void PrefixStore::Impl::GatherSource(const PendingRead& pr, const ReadSource& s, f16_t* k_out, f16_t* v_out,
                                     std::span<const uint32_t> out_rows) const {
  const int nh = opt.n_head_kv, hd = opt.head_dim;
  const size_t row_elems = size_t(nh) * size_t(hd);
  std::vector<uint8_t> tmp;
  const uint8_t *kb = nullptr, *vb = nullptr;  // the K and V regions in memory
  if (s.block) {
    kb = BlockRecords(*s.block, tmp);
    vb = kb + size_t(s.ext->ext.n_slots) * k_bytes;
  }
  const ChunkLayout lay = KVLayout(s.ext->ext.n_slots);    // where the disk image has them
  const bool plain = opt.kv_encoding == KVEncoding::kF16;  // a record is its row's bytes
  const auto place = [&](f16_t* out, auto record) {
    ForRecordRuns(s.rows, out_rows, k_bytes, record, [&](const uint8_t* r, size_t to, size_t m) {
      if (plain) {
        std::memcpy(out + to * row_elems, r, m * k_bytes);
        return;
      }
      for (size_t x = 0; x < m; ++x) DecodeRecord(opt.kv_encoding, r + x * k_bytes, nh, hd, out + (to + x) * row_elems);
    });
  };
  if (pr.want_k && k_out) {
    place(k_out, [&](uint32_t w) {
      const size_t at = size_t(w) * k_bytes;
      return s.block && s.block->HasK(w) ? kb + at : s.At(lay.k_offset + at);
    });
  }
  if (pr.want_v && v_out) {
    place(v_out, [&](uint32_t w) {
      const size_t at = size_t(w) * k_bytes;
      return s.block && s.block->HasV(w) ? vb + at : s.At(lay.v_offset + at);
    });
  }
}

// Checked as WaitInto would (a failure is left to it: it drops the chunk under the lock), then
// copied to where the read was asked to put it.
void PrefixStore::Impl::ServeArrived(PendingRead& pr, uint32_t g) const {
  const ReadSource& s = pr.sources[g];
  if (!VerifySource(s, pr.probe).ok()) return;
  if (pr.probe) {
    PlaceProbeRecords(s, pr.into->probe_records, nullptr);
    pr.served[g] = 1;
    return;
  }
  GatherSource(pr, s, pr.into->k, pr.into->v, pr.into->rows);
  pr.served[g] = 1;
  ReportArrived(pr, s);
}

void PrefixStore::Impl::ServeFromMemory(PendingRead& pr) const {
  for (size_t g = 0; g < pr.sources.size(); ++g) {
    const ReadSource& s = pr.sources[g];
    if (!s.runs.empty()) continue;  // the disk brings (some of) it
    GatherSource(pr, s, pr.into->k, pr.into->v, pr.into->rows);
    pr.served[g] = 1;
    ReportArrived(pr, s);
  }
}

void PrefixStore::Impl::ReportArrived(const PendingRead& pr, const ReadSource& s) {
  if (!pr.into->arrivals) return;
  thread_local std::vector<uint32_t> out;
  out.clear();
  for (auto [row, w] : s.rows) {
    const uint32_t to = pr.into->rows.empty() ? row : pr.into->rows[row];
    if (to != kSkipRow) out.push_back(to);
  }
  pr.into->arrivals->Arrived(out);
}

Status PrefixStore::Impl::VerifySource(const ReadSource& s, bool probe) const {
  const std::string what = std::string(probe ? "probe keys" : "chunk") + " of segment " + std::to_string(s.segment) +
                           " layer " + std::to_string(s.layer) + " index " + std::to_string(s.index);
  if (s.whole) {
    ChunkHeader h = probe ? HeaderFor(ChunkKind::kProbe, s.segment, 0, s.layer, 0, 0, s.ext->ext.n_slots, false)
                          : HeaderFor(ChunkKind::kKV, s.segment, s.generation, s.layer, s.index, s.ext->ext.slot_begin,
                                      s.ext->ext.n_slots, false);
    return VerifyChunk(s.At(0), s.ext->ext, h, what);
  }
  for (auto [b, n] : s.runs)
    IMPRESS_RETURN_IF_ERROR(VerifyBlocks(s.At(uint64_t(b) * kBlockBytes), s.ext->ext, b, n, what));
  return Status::Ok();
}

void PrefixStore::Impl::MarkCorruptLocked(const ReadSource& s, const Status& why) {
  bad_chunks.insert({s.segment, s.generation, s.layer, s.index});
  ++st.chunks_dropped_corrupt;
  uint64_t first = UINT64_MAX;
  auto it = segs.find(s.segment);
  if (it != segs.end() && it->second.layout->generation == s.generation) {
    const SegLayout& l = *it->second.layout;
    if (s.ext && s.ext == (s.layer < l.probes.size() ? l.probes[s.layer] : nullptr)) first = 0;
    else if (s.ext)
      for (uint32_t k = 0; k < s.ext->ext.n_slots; ++k)
        first = std::min<uint64_t>(first, l.Orig(s.layer, s.ext->ext.slot_begin + k));
  }
  if (first == UINT64_MAX) first = 0;
  spdlog::error("store: {} -- chunk dropped, prefix truncated at segment {} offset {}", why.ToString(), s.segment,
                first);
  pending_truncations.insert({s.segment, first});
  DropChunkLocked(s.cid);
  TryPendingTruncationsLocked();
}

// Read buffers are reused: a fresh one costs page faults, and pinning its pages for the disk, on
// the request's path. Sizes round up to 64 KiB; a pooled buffer serves any read of at least half
// its size.
AlignedBuffer PrefixStore::Impl::GetBuffer(size_t n) {
  constexpr size_t kGrain = 64 * 1024;
  n = (n + kGrain - 1) / kGrain * kGrain;
  {
    MutexLock lk(&pool_mu);
    auto it = pool.lower_bound(n);
    if (it != pool.end() && it->first / 2 <= n) {
      AlignedBuffer b = std::move(it->second);
      pool_bytes -= it->first;
      pool.erase(it);
      return b;
    }
  }
  return AlignedBuffer(n, /*zero=*/false);
}

void PrefixStore::Impl::PutBuffer(AlignedBuffer b) {
  if (!b.data()) return;
  MutexLock lk(&pool_mu);
  if (pool_bytes + b.size() > kReadPoolBytes) return;
  pool_bytes += b.size();
  const size_t n = b.size();
  pool.emplace(n, std::move(b));
}

// ==================================================================== importance

Status PrefixStore::Impl::ReportImportance(const MatchHandle& h, int il, std::span<const uint32_t> selected,
                                           std::span<const float> scores) {
  if (!scores.empty() && scores.size() != selected.size())
    return Status::InvalidArgument("store: importance scores and selected positions differ in length");
  MutexLock lk(&mu);
  IMPRESS_ASSIGN_OR_RETURN(const HandleState* hsp, HandleLocked(h, il));
  const HandleState& hs = *hsp;
  if (hs.remote) return Status::Ok();  // nothing of it is stored here yet
  std::vector<float> w(hs.n_matched, 0.0f);
  for (size_t i = 0; i < selected.size(); ++i) {
    if (selected[i] >= hs.n_matched)
      return Status::InvalidArgument("store: selected position " + std::to_string(selected[i]) + " out of range");
    w[selected[i]] = scores.empty() ? 1.0f : scores[i];
  }
  std::map<ChunkId, std::pair<uint32_t, uint32_t>> per_chunk;  // (selected, matched)
  std::vector<std::pair<uint32_t, uint32_t>> span_chunks;      // the same for one span, by chunk index
  for (const auto& sv : hs.spans) {
    auto sit = segs.find(sv.span.segment);
    if (sit == segs.end()) continue;
    SegState& ss = sit->second;
    const bool same_layout = ss.layout->generation == sv.layout->generation;
    const size_t at = size_t(il) * ss.n_tokens;  // this layer's statistics
    span_chunks.assign(NChunks(ss.n_tokens), {0, 0});
    for (uint64_t r = 0; r < sv.span.length; ++r) {
      const uint64_t off = sv.span.seg_begin + r;
      const float x = w[sv.span.depth + r];
      ss.imp_sum[at + off] += x;
      ss.imp_count[at + off] += 1;
      if (!same_layout) continue;
      const size_t chunk = ss.layout->Slot(uint32_t(il), off) / C;
      if (chunk >= span_chunks.size()) span_chunks.resize(chunk + 1, {0, 0});
      span_chunks[chunk].first += x > 0 ? 1 : 0;
      span_chunks[chunk].second += 1;
    }
    for (size_t k = 0; k < span_chunks.size(); ++k) {  // a std::map insert per token was ~1.6 ms a layer at 32K
      if (span_chunks[k].second == 0) continue;
      auto& pc = per_chunk[Cid(sv.span.segment, uint32_t(il), uint32_t(k))];
      pc.first += span_chunks[k].first;
      pc.second += span_chunks[k].second;
    }
    dirty_segs.insert(sv.span.segment);
  }
  for (auto& [cid, c] : per_chunk) (void)tiers.ReportImportance(cid, double(c.first) / double(c.second));
  return Status::Ok();
}

// The tier a read of this chunk would be served from now (what the memory tiers really hold).
Tier PrefixStore::Impl::ServedFromLocked(ChunkId cid, uint64_t generation) const {
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    auto b = blocks[size_t(t)].find(cid);
    if (b != blocks[size_t(t)].end() && b->second->generation == generation) return t;
  }
  return Tier::kSsd;
}

}  // namespace impress::store
