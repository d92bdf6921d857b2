// Remote matches (TeamOptions::selective, docs/team-tier.md): a prefix only the team tier holds,
// staged by FillFromTeam, is read per layer as the request's Match asks: the probe values whole,
// the selected rows as GETRANGEs of their 4 KiB blocks, on the team worker thread in submission
// order. Releasing the match fills the whole prefix in the background; inserts past the staged
// prefix wait for it (DeferInsert).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "store/prefix-store-team-state.h"

namespace impress::store {

using Clock = TeamClock;

std::shared_ptr<const RemotePrefix> PrefixStore::Impl::StagedFor(std::span<const Token> tokens, uint64_t* n) {
  *n = 0;
  std::shared_ptr<const RemotePrefix> rp;
  {
    MutexLock lk(&team->mu);
    rp = team->staged;
  }
  if (!rp) return nullptr;
  const size_t k = std::min(rp->tokens.size(), tokens.size());
  if (k == 0 || !std::equal(tokens.begin(), tokens.begin() + std::ptrdiff_t(k), rp->tokens.begin())) return nullptr;
  *n = k;
  return rp;
}

Result<ReadTicket> PrefixStore::Impl::SubmitRemoteLocked(const HandleState& hs, int il, bool probe,
                                                         std::span<const uint32_t> positions, bool want_k,
                                                         bool want_v) {
  for (uint32_t p : positions)
    if (p >= hs.n_matched) return Status::InvalidArgument("store: position " + std::to_string(p) + " out of range");
  auto rr = std::make_shared<RemoteRead>();
  rr->probe = probe;
  rr->want_k = want_k;
  rr->want_v = want_v;
  rr->positions.assign(positions.begin(), positions.end());
  rr->submitted = Clock::now();
  auto pr = std::make_unique<PendingRead>();
  pr->probe = probe;
  pr->want_k = want_k;
  pr->want_v = want_v;
  pr->n_rows = probe ? hs.n_matched : positions.size();
  pr->stats.useful_bytes =
      probe ? hs.n_matched * probe_rec_bytes : positions.size() * ((want_k ? k_bytes : 0) + (want_v ? k_bytes : 0));
  pr->remote = rr;
  std::shared_ptr<const RemotePrefix> rp = hs.remote;
  team->Post(/*fill=*/false, [this, rp, rr, il] { RunRemoteRead(*rp, uint32_t(il), *rr); });
  ++st.n_reads;
  const ReadTicket t = next_ticket++;
  reads[t] = std::move(pr);
  return t;
}

// Probe reads: every span's probe value of the layer, whole (small), in one pipelined request.
// KV reads: per span the 4 KiB blocks of the wanted rows (GETRANGE), all spans in one request.
// Values are in the span's token order; every byte is verified before it is used.
void PrefixStore::Impl::RunRemoteRead(const RemotePrefix& rp, uint32_t il, RemoteRead& rr) {
  if (rp.failed.load()) {
    rr.completed = Clock::now();
    rr.done.set_value(Status::IOError("team tier: an earlier read of this prefix failed"));
    return;
  }
  TeamTier& tier = *rp.tier;
  const uint64_t before = tier.stats().bytes_read;
  const uint64_t n = rp.tokens.size();
  Status s = Status::Ok();
  if (rr.probe) {
    std::vector<TeamChunkRef> refs;
    for (const TeamDescriptor& d : rp.spans) refs.push_back({&d, il});
    auto vals = tier.ReadChunks(refs, TeamPiece::kProbe);
    rr.k.resize(n * probe_rec_bytes);
    rr.spans = uint32_t(refs.size());
    for (size_t sp = 0; sp < rp.spans.size() && s.ok(); ++sp) {
      if (!vals[sp].ok()) {
        s = vals[sp].status();
        break;
      }
      const ChunkHeader hdr = tier.ExpectedHeader(rp.spans[sp], il, TeamPiece::kProbe);
      const uint64_t first = uint64_t(sp) * C, count = std::min<uint64_t>(rp.spans[sp].tokens.size(), n - first);
      if (hdr.record_bytes != probe_rec_bytes) {
        s = Status::Corruption("team tier: probe records of another size");
        break;
      }
      std::memcpy(rr.k.data() + first * probe_rec_bytes, vals[sp]->data() + LayoutOf(hdr).k_offset,
                  count * probe_rec_bytes);
    }
  } else {
    const uint32_t rb = RecordBytes(opt.kv_encoding, opt.n_head_kv, opt.head_dim);
    std::vector<std::vector<uint32_t>> rows(rp.spans.size());
    std::vector<std::vector<size_t>> at(rp.spans.size());  // output row of each
    for (size_t i = 0; i < rr.positions.size(); ++i) {
      const uint32_t p = rr.positions[i];
      rows[p / C].push_back(p % C);
      at[p / C].push_back(i);
    }
    std::vector<TeamRowsRef> refs;
    std::vector<size_t> ref_span;
    for (size_t sp = 0; sp < rows.size(); ++sp)
      if (!rows[sp].empty()) {
        refs.push_back({&rp.spans[sp], rows[sp]});
        ref_span.push_back(sp);
      }
    rr.spans = uint32_t(refs.size());
    auto vals = tier.ReadRowsMany(refs, il, rr.want_k, rr.want_v);
    if (rr.want_k) rr.k.resize(rr.positions.size() * rb);
    if (rr.want_v) rr.v.resize(rr.positions.size() * rb);
    for (size_t i = 0; i < refs.size() && s.ok(); ++i) {
      if (!vals[i].ok()) {
        s = vals[i].status();
        break;
      }
      const uint8_t* src = vals[i]->data();
      const std::vector<size_t>& out = at[ref_span[i]];
      for (std::vector<uint8_t>* dst : {rr.want_k ? &rr.k : nullptr, rr.want_v ? &rr.v : nullptr}) {
        if (!dst) continue;
        for (size_t j = 0; j < out.size(); ++j, src += rb) std::memcpy(dst->data() + out[j] * rb, src, rb);
      }
    }
  }
  rr.bytes = tier.stats().bytes_read - before;
  rr.completed = Clock::now();
  {
    MutexLock lk(&team->mu);
    team->counts.bytes_read += rr.bytes;
    ++team->counts.requests;
    team->counts.request_us +=
        uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(rr.completed - rr.submitted).count());
    if (!s.ok()) {
      // The request falls back (its prefill computes the prefix): a match of this prefix no longer
      // goes to the team tier until it is staged again.
      if (team->staged.get() == &rp) team->staged.reset();
      if (s.code() == Status::Code::kCorruption) ++team->counts.corrupt;
    }
  }
  if (!s.ok()) {
    rp.failed.store(true);
    spdlog::warn("team tier: reading layer {} of a remote prefix failed; computing it instead: {}", il, s.ToString());
    team->Failed(s);
  } else {
    team->Reached();
  }
  rr.done.set_value(s);
}

Result<ReadStats> PrefixStore::Impl::WaitRemote(PendingRead& pr, f16_t* k_out, f16_t* v_out, uint8_t* probe_records,
                                                std::span<const uint32_t> out_rows) {
  RemoteRead& rr = *pr.remote;
  const Status s = rr.result.get();
  ReadStats stats = pr.stats;
  stats.submitted = rr.submitted;
  stats.completed = rr.completed;
  stats.team_bytes = rr.bytes;
  stats.chunks_team = rr.spans;
  if (!s.ok()) return Status::IOError("team tier read: " + s.message());
  const size_t n = size_t(pr.n_rows);
  if (pr.probe) {
    const int n_probe = int(opt.probe_kv_heads.size());
    const size_t pe = size_t(n_probe) * size_t(opt.head_dim);
    if (probe_records) {
      std::memcpy(probe_records, rr.k.data(), n * probe_rec_bytes);
    } else {
      for (size_t r = 0; r < n; ++r)
        DecodeRecord(probe_enc, rr.k.data() + r * probe_rec_bytes, n_probe, opt.head_dim, k_out + r * pe);
    }
    return stats;
  }
  const uint32_t rb = RecordBytes(opt.kv_encoding, opt.n_head_kv, opt.head_dim);
  const size_t row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  for (size_t r = 0; r < n; ++r) {
    const size_t to = out_rows.empty() ? r : size_t(out_rows[r]);
    if (to == kSkipRow) continue;
    if (pr.want_k && k_out)
      DecodeRecord(opt.kv_encoding, rr.k.data() + r * rb, opt.n_head_kv, opt.head_dim, k_out + to * row);
    if (pr.want_v && v_out)
      DecodeRecord(opt.kv_encoding, rr.v.data() + r * rb, opt.n_head_kv, opt.head_dim, v_out + to * row);
  }
  return stats;
}

// The read groups of a remote match, numbered densely from 0 in order of their keys per unit.
//  - TeamOptions::publisher_groups, when every span carries the publisher's write order: the
//    publisher's groups (ReadGroups on its store): slot s of a segment lies in group
//    (s / C, (s % C) / group), numbered per segment in slot order.
//  - Otherwise, when the values hold their rows in the write order: runs of `group` consecutive
//    rows of each span's value, so a group is a run of bytes and holds tokens of like importance.
//  - Without a write order: runs of `group` consecutive tokens of each span.
std::vector<uint32_t> PrefixStore::Impl::RemoteGroups(const HandleState& hs, uint32_t il, uint32_t group_tokens) const {
  const std::vector<TeamDescriptor>& spans = hs.remote->spans;
  const size_t n = size_t(hs.n_matched);
  std::vector<uint32_t> out(n), unit(n);
  const uint32_t per_chunk = (C + group_tokens - 1) / group_tokens;
  bool ordered = true, rows_in_order = true;
  for (size_t sp = 0; sp * C < n; ++sp) {
    const bool here = sp < spans.size();
    ordered = ordered && here && spans[sp].order_segment.size() == spans[sp].tokens.size() &&
              il < spans[sp].order_slot.size() && spans[sp].order_slot[il].size() == spans[sp].tokens.size();
    rows_in_order = rows_in_order && here && spans[sp].rows_in_order && il < spans[sp].row.size();
  }
  for (size_t p = 0; p < n; ++p) {
    const TeamDescriptor& d = spans[p / C];
    const uint32_t r = uint32_t(p % C);
    if (ordered && team->opt.publisher_groups) {
      const uint32_t slot = d.order_slot[il][r];
      unit[p] = d.order_segment[r];
      out[p] = (slot / C) * per_chunk + (slot % C) / group_tokens;
    } else {
      unit[p] = uint32_t(p / C);
      out[p] = (rows_in_order ? d.row[il][r] : r) / group_tokens;
    }
  }
  uint32_t next = 0;
  std::vector<uint32_t> keys;
  for (size_t a = 0; a < n;) {
    size_t b = a + 1;
    while (b < n && unit[b] == unit[a]) ++b;
    keys.assign(out.begin() + std::ptrdiff_t(a), out.begin() + std::ptrdiff_t(b));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (size_t p = a; p < b; ++p)
      out[p] = next + uint32_t(std::lower_bound(keys.begin(), keys.end(), out[p]) - keys.begin());
    next += uint32_t(keys.size());
    a = b;
  }
  return out;
}

void PrefixStore::Impl::FillAfterRemote(std::shared_ptr<const RemotePrefix> rp) {
  team->Post(/*fill=*/true, [this, rp] {
    if (rp->failed.load()) {  // the request computed the prefix (and stored it)
      MutexLock lk(&team->mu);
      team->deferred.clear();
      return;
    }
    const TeamFill f = FillWhole(rp->tokens, /*stage=*/false);
    if (!f.status.ok()) spdlog::info("team tier: background fill stopped: {}", f.status.ToString());
    std::vector<DeferredInsert> ready;
    {
      MutexLock lk(&team->mu);
      if (team->staged == rp) team->staged.reset();
      ready.swap(team->deferred);
    }
    for (DeferredInsert& d : ready) {
      std::vector<LayerKV> layers(d.k.size());
      for (size_t l = 0; l < layers.size(); ++l)
        layers[l] = {d.k[l].data(), d.v[l].data(), d.importance.empty() ? nullptr : d.importance[l].data()};
      auto r = Insert(d.tokens, d.start, layers, 0);
      if (!r.ok()) {
        spdlog::info("team tier: KV computed past the team's prefix not stored: {}", r.status().ToString());
        continue;
      }
      if (r->n_written > 0) PublishToTeam(d.tokens, d.start, layers, d.io);
    }
  });
}

bool PrefixStore::Impl::DeferInsert(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                                    const InsertOptions& io) {
  if (!team || start > tokens.size()) return false;
  uint64_t n_staged = 0;
  if (!StagedFor(tokens, &n_staged) || n_staged < start) return false;
  DeferredInsert d;
  d.tokens.assign(tokens.begin(), tokens.end());
  d.start = start;
  d.io = io;
  const size_t rows = (tokens.size() - start) * size_t(opt.n_head_kv) * size_t(opt.head_dim);
  for (const LayerKV& l : layers) {
    d.k.emplace_back(l.k, l.k + rows);
    d.v.emplace_back(l.v, l.v + rows);
    if (l.importance) d.importance.emplace_back(l.importance, l.importance + (tokens.size() - start));
  }
  if (d.importance.size() != layers.size()) d.importance.clear();
  MutexLock lk(&team->mu);
  if (team->deferred.size() >= TeamState::kMaxDeferred) return false;
  team->deferred.push_back(std::move(d));
  return true;
}

}  // namespace impress::store
