// The store's team KV tier (store/team-tier.h, docs/team-tier.md): publishing what Insert
// stores, and filling a local miss from the team's Redis (PrefixStore::FillFromTeam).
//
// Publishing: after an Insert the new KV goes to a TeamPublisher (a bounded queue and one thread
// of its own), from the span boundary at or before the insert's start; the rows between that
// boundary and the start are read back from this store. Private documents are refused there and
// counted. Nothing waits for Redis but the store's close (bounded by TeamOptions::close_wait).
//
// Publishing carries this store's write order of the published tokens (per token its segment's
// first position and per layer its slot), read from the layout the insert just made.
//
// Filling: the team tier's longest prefix of the query (exact tokens, LongestPrefix) past the
// local match is read a few spans at a time (every value verified whole against its descriptor
// and header) and inserted into this store by Insert once read, one insert per segment of the
// publisher, in the publisher's write order: the chunks and read groups here are then the
// publisher's, so a block-group selection picks the same tokens on both desktops. The memory tiers
// admit it as any fresh KV and the caller's Match finds it. A failure of any kind stops the fill
// where it is: what was verified is inserted, the rest is computed by the caller. After a network failure the
// team tier is not asked again for TeamOptions::retry_pause.
//
// Thread contract: TeamState::mu guards the connection and the counters; fill_mu makes fills one
// at a time. Lock order: fill_mu -> the store's mu; TeamState::mu is never held across a call
// into the store or Redis.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <future>
#include <numeric>

#include "store/prefix-store-team-state.h"

namespace impress::store {

namespace {
using Clock = std::chrono::steady_clock;
// Spans read in one pipelined request: at most this many, and past the first span no more than
// kFillBatchBytes of values, so one request (one TeamOptions::request_timeout) fits a slow link.
constexpr size_t kFillBatchSpans = 8;
constexpr uint64_t kFillBatchBytes = 4ull << 20;

// Releases one of the store's own matches when it goes out of scope.
struct ScopedRelease {
  PrefixStore::Impl* im;
  MatchHandle* h;
  ~ScopedRelease() {
    if (h->id) (void)im->Release(*h);
  }
};
}  // namespace

void PrefixStore::Impl::TeamStateDeleter::operator()(TeamState* t) const { delete t; }

Status PrefixStore::Impl::OpenTeam() {
  if (!opt.team.enabled()) return Status::Ok();
  auto t = std::unique_ptr<TeamState, TeamStateDeleter>(new TeamState());
  t->opt = opt.team;
  TeamTierOptions& to = t->tier_opt;
  IMPRESS_RETURN_IF_ERROR(ParseTeamUrl(opt.team.url, &to.redis));
  IMPRESS_RETURN_IF_ERROR(LoadTeamCredentials(opt.team.credentials_file, &to.redis));
  to.redis.tls_files = opt.team.tls;
  if (to.redis.tls) {
    IMPRESS_RETURN_IF_ERROR(CheckTlsFiles(to.redis.tls_files).WithContext("team tier " + opt.team.url));
  } else if (!opt.team.tls.ca_file.empty() || !opt.team.tls.cert_file.empty()) {
    return Status::InvalidArgument("team tier " + opt.team.url +
                                   ": TLS files given for a plain redis:// URL (rediss:// is TLS)");
  }
  to.redis.connect_timeout = opt.team.connect_timeout;
  to.redis.request_timeout = opt.team.request_timeout;
  to.team = opt.team.team;
  to.ttl = opt.team.ttl;
  to.model.fingerprint = opt.model_fingerprint;
  to.model.n_layer = opt.n_layer;
  to.model.n_head_kv = opt.n_head_kv;
  to.model.head_dim = opt.head_dim;
  to.model.kv_encoding = opt.kv_encoding;
  to.model.probe_encoding = probe_enc;
  to.model.probe_kv_heads = opt.probe_kv_heads;
  to.model.span_tokens = int(C);
  const std::string& name = to.team;
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    return Status::InvalidArgument("team tier: the team name must be 1-64 of [A-Za-z0-9._-]: '" + name + "'");
  if (opt.team.publish && !read_only) {
    TeamPublisherOptions po;
    po.max_queue_bytes = opt.team.publish_queue_bytes;
    t->publisher = std::make_unique<TeamPublisher>(to, po);
  }
  team = std::move(t);
  return Status::Ok();
}

void PrefixStore::Impl::CloseTeam() {
  if (!team) return;
  team->StopWorker();
  if (team->publisher && !team->publisher->WaitIdle(team->opt.close_wait)) {
    const auto ps = team->publisher->stats();
    spdlog::warn("team tier: {} KV copies ({} MiB) not yet published are dropped at close", ps.queued_jobs,
                 ps.queued_bytes >> 20);
  }
  team.reset();
}

bool PrefixStore::Impl::WaitTeamPublished(std::chrono::milliseconds timeout) {
  return !team || !team->publisher || team->publisher->WaitIdle(timeout);
}

// This store's write order of tokens [from, tokens.size()): per token the position where its
// segment begins and per layer its slot there (TeamDescriptor::order_segment / order_slot). Empty
// when the tokens are no longer all cached. Touches nothing (no recency, no lock on the path).
TeamOrder PrefixStore::Impl::WriteOrderOf(std::span<const Token> tokens, uint64_t from) {
  TeamOrder o;
  MutexLock lk(&mu);
  const MatchResult m = tree.Match(ns, tokens, /*touch=*/false);
  if (m.n_matched != tokens.size() || m.n_matched <= from) return o;
  const size_t n = size_t(m.n_matched - from);
  o.segment.resize(n);
  o.slot.assign(size_t(opt.n_layer), std::vector<uint32_t>(n));
  for (const auto& sp : m.path) {
    auto it = segs.find(sp.segment);
    if (it == segs.end()) return {};
    const SegLayout& l = *it->second.layout;
    for (uint64_t r = 0; r < sp.length; ++r) {
      const uint64_t pos = sp.depth + r;
      if (pos < from) continue;
      o.segment[pos - from] = uint32_t(sp.depth - sp.seg_begin);
      for (uint32_t il = 0; il < uint32_t(opt.n_layer); ++il) o.slot[il][pos - from] = l.Slot(il, sp.seg_begin + r);
    }
  }
  return o;
}

void PrefixStore::Impl::PublishToTeam(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                                      const InsertOptions& io) {
  if (!team || !team->publisher || !io.publish || start >= tokens.size()) return;
  TeamPublisher& pub = *team->publisher;
  if (io.private_document) {
    (void)pub.Submit(tokens, start, layers, /*private_document=*/true);  // refused and counted
    return;
  }
  // The write order goes with the KV, so a desktop that fills from the team tier lays the KV out
  // as this store does.
  const uint64_t from = start / C * C;
  TeamOrder order = WriteOrderOf(tokens, from);
  if (from == start) {
    (void)pub.Submit(tokens, start, layers, false, std::move(order));
    PublishPrefixTail(tokens, start, layers, io.shared_prefix);
    return;
  }
  // The span holding `start` begins before it: its first rows are read back from this store, so
  // the chain of spans the team tier holds has no gap.
  MatchHandle h = Match(tokens.subspan(0, start));
  const ScopedRelease releaser{this, &h};
  if (h.n_matched < start) {
    spdlog::debug("team tier: the prefix before new KV is no longer cached; not published");
    return;
  }
  const size_t row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  const size_t n_new = tokens.size() - start;
  std::vector<std::vector<f16_t>> k, v;
  if (Status s = ReadBackKV(h, from, start, &k, &v); !s.ok()) {
    spdlog::warn("team tier: reading back the KV before the new tokens failed; not published: {}", s.ToString());
    return;
  }
  for (size_t il = 0; il < k.size(); ++il) {
    k[il].insert(k[il].end(), layers[il].k, layers[il].k + n_new * row);
    v[il].insert(v[il].end(), layers[il].v, layers[il].v + n_new * row);
  }
  std::vector<LayerKV> all(size_t(opt.n_layer));
  for (size_t il = 0; il < all.size(); ++il) all[il] = {k[il].data(), v[il].data(), nullptr};
  (void)pub.Submit(tokens, from, all, false, std::move(order));
  PublishPrefixTail(tokens, from, all, io.shared_prefix);
}

// The spans of a publish are runs of C tokens from 0, so a prompt's reusable prefix (its
// documents) usually ends inside a span that also holds this question's own tokens, which no
// other question shares: another desktop would match only the prefix's whole spans and compute
// the rest of the documents with its question. So the prefix's last partial span is also
// published on its own (exactly tokens [P / C * C, P)), which the team tier's lookup matches for
// any question over the same documents. `layers` holds the KV of tokens [base, tokens.size()).
void PrefixStore::Impl::PublishPrefixTail(std::span<const Token> tokens, uint64_t base, std::span<const LayerKV> layers,
                                          uint64_t shared_prefix) {
  const uint64_t P = shared_prefix, tail = P / C * C;
  if (P % C == 0 || P >= tokens.size() || tail < base) return;
  const size_t row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  std::vector<LayerKV> part(layers.size());
  for (size_t il = 0; il < layers.size(); ++il)
    part[il] = {layers[il].k + (tail - base) * row, layers[il].v + (tail - base) * row, nullptr};
  const auto prefix = tokens.subspan(0, P);
  (void)team->publisher->Submit(prefix, tail, part, false, WriteOrderOf(prefix, tail));
}

Status PrefixStore::Impl::ReadBackKV(const MatchHandle& h, uint64_t from, uint64_t to,
                                     std::vector<std::vector<f16_t>>* k, std::vector<std::vector<f16_t>>* v) {
  std::vector<uint32_t> pos(to - from);
  std::iota(pos.begin(), pos.end(), uint32_t(from));
  std::vector<ReadTicket> tickets;
  Status s = Status::Ok();
  for (int il = 0; il < opt.n_layer && s.ok(); ++il) {
    auto t = SubmitReadKV(h, il, pos, true, true, std::nullopt);
    if (t.ok()) tickets.push_back(*t);
    else s = t.status();
  }
  k->assign(size_t(opt.n_layer), {});
  v->assign(size_t(opt.n_layer), {});
  for (size_t il = 0; il < tickets.size(); ++il) {
    auto r = Wait(tickets[il]);  // every ticket is waited, even after a failure
    if (!r.ok()) {
      if (s.ok()) s = r.status();
      continue;
    }
    (*k)[il] = std::move(r->k);
    (*v)[il] = std::move(r->v);
  }
  return s;
}

Result<uint64_t> PrefixStore::Impl::PublishCached(std::span<const Token> tokens) {
  if (!team || !team->publisher) return Status::InvalidArgument("store: no team tier to publish to");
  MatchHandle h = Match(tokens);
  const ScopedRelease releaser{this, &h};
  if (h.n_matched == 0 || h.remote) return uint64_t{0};
  const std::span<const Token> cached = tokens.subspan(0, size_t(h.n_matched));
  std::vector<std::vector<f16_t>> k, v;
  IMPRESS_RETURN_IF_ERROR(ReadBackKV(h, 0, h.n_matched, &k, &v));
  std::vector<LayerKV> all(size_t(opt.n_layer));
  for (size_t il = 0; il < all.size(); ++il) all[il] = {k[il].data(), v[il].data(), nullptr};
  if (!team->publisher->Submit(cached, 0, all, false, WriteOrderOf(cached, 0)))
    return Status::ResourceExhausted("store: the team publisher's queue has no room for " +
                                     std::to_string(h.n_matched) + " tokens of KV");
  return h.n_matched;
}

// The KV a fill read, tokens [begin, end) of the query, fp16 per layer, with the publisher's
// write order when every span carried one.
struct PrefixStore::Impl::TeamFillKV {
  uint64_t begin = 0, end = 0;
  std::vector<std::vector<f16_t>> k, v;  // [layer]
  bool ordered = true;
  std::vector<uint32_t> segment;            // [token - begin]
  std::vector<std::vector<uint32_t>> slot;  // [layer][token - begin]
};

// Appends the rows past kv->end of spans [b, e) (their values `vals`, layer-major per span).
void PrefixStore::Impl::AppendTeamSpans(const TeamTier& tier, std::span<const TeamDescriptor> spans, size_t b, size_t e,
                                        const std::vector<Result<std::vector<uint8_t>>>& vals, TeamFillKV* kv) {
  const size_t L = size_t(opt.n_layer), row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  const uint64_t end = (e - 1) * C + spans[e - 1].tokens.size();
  const uint64_t first = kv->end;
  for (size_t l = 0; l < L; ++l) {
    kv->k[l].resize((end - kv->begin) * row);
    kv->v[l].resize((end - kv->begin) * row);
  }
  for (size_t sp = b; sp < e; ++sp) {
    const TeamDescriptor& d = spans[sp];
    const bool ordered = d.order_segment.size() == d.tokens.size() && d.order_slot.size() == L;
    kv->ordered = kv->ordered && ordered;
    for (uint32_t l = 0; l < L; ++l) {
      const std::vector<uint8_t>& val = *vals[(sp - b) * L + l];
      const ChunkHeader hdr = tier.ExpectedHeader(d, l, TeamPiece::kKV);
      const ChunkLayout lay = LayoutOf(hdr);
      for (uint64_t pos = std::max<uint64_t>(first, sp * C); pos < sp * C + d.tokens.size(); ++pos) {
        const uint64_t r = pos - sp * C, out = (pos - kv->begin) * row;
        const uint64_t at = uint64_t(d.Row(l, uint32_t(r))) * hdr.record_bytes;  // the value's row of token r
        DecodeRecord(opt.kv_encoding, val.data() + lay.k_offset + at, opt.n_head_kv, opt.head_dim,
                     kv->k[l].data() + out);
        DecodeRecord(opt.kv_encoding, val.data() + lay.v_offset + at, opt.n_head_kv, opt.head_dim,
                     kv->v[l].data() + out);
        if (ordered && d.order_slot[l].size() == d.tokens.size()) kv->slot[l].push_back(d.order_slot[l][r]);
        if (ordered && l == 0) kv->segment.push_back(std::min<uint32_t>(d.order_segment[r], uint32_t(pos)));
      }
    }
  }
  kv->end = end;
}

// Inserts what a fill read: one insert per segment of the publisher (runs of tokens sharing
// their segment's first position), each written in the publisher's slot order, so this store's
// chunks and read groups are the publisher's. Without an order: one insert, original order.
Status PrefixStore::Impl::InsertTeamKV(std::span<const Token> tokens, const TeamFillKV& kv, uint64_t* n_written) {
  const size_t L = size_t(opt.n_layer), row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  const size_t n = size_t(kv.end - kv.begin);
  const bool ordered = kv.ordered && kv.segment.size() == n;
  std::vector<std::vector<float>> imp(ordered ? L : 0, std::vector<float>(n));
  for (size_t l = 0; l < imp.size(); ++l) {
    if (kv.slot[l].size() != n) return Status::Internal("team fill: write order short");
    for (size_t t = 0; t < n; ++t) imp[l][t] = -float(kv.slot[l][t]);  // descending importance = ascending slot
  }
  for (size_t a = 0; a < n;) {
    size_t b = a + 1;
    while (ordered && b < n && kv.segment[b] == kv.segment[a]) ++b;
    if (!ordered) b = n;
    std::vector<LayerKV> layers(L);
    for (size_t l = 0; l < L; ++l)
      layers[l] = {kv.k[l].data() + a * row, kv.v[l].data() + a * row, ordered ? imp[l].data() + a : nullptr};
    IMPRESS_ASSIGN_OR_RETURN(const InsertSummary ins, Insert(tokens.subspan(0, kv.begin + b), kv.begin + a, layers));
    *n_written += ins.n_written;
    a = b;
  }
  return Status::Ok();
}

TeamFill PrefixStore::Impl::FillFromTeam(std::span<const Token> tokens) {
  return FillWhole(tokens, team && team->opt.selective);
}

TeamFill PrefixStore::Impl::FillWhole(std::span<const Token> tokens, bool stage) {
  TeamFill f;
  if (!team || read_only) return f;
  TeamState& t = *team;
  MutexLock fill_lock(&t.fill_mu);
  {
    MutexLock lk(&mu);
    f.n_local = tree.Match(ns, tokens, /*touch=*/false).n_matched;
  }
  // The team tier matches whole spans (a partial last span only when exactly those tokens were
  // published): ask only when it could add a whole span.
  if (tokens.size() / C * C <= f.n_local) return f;
  auto tier = t.Connect(&f.status);
  if (!tier) return f;
  const TeamStats before = tier->stats();
  auto t0 = Clock::now();
  auto m = tier->LongestPrefix(tokens);
  t.NoteRequest(t0);
  if (!m.ok()) {
    t.Failed(m.status());
    f.status = m.status();
    return f;
  }
  t.Reached();
  if (stage && m->n_matched > f.n_local) {
    // Nothing read yet: the request's match reads per layer what it selects (RunRemoteRead).
    auto rp = std::make_shared<RemotePrefix>();
    rp->tokens.assign(tokens.begin(), tokens.begin() + std::ptrdiff_t(m->n_matched));
    rp->spans = std::move(m->spans);
    rp->tier = tier;
    f.n_remote = m->n_matched;
    f.bytes = tier->stats().bytes_read - before.bytes_read;
    MutexLock lk(&t.mu);
    t.staged = std::move(rp);
    ++t.counts.fills;
    ++t.counts.fill_hits;
    t.counts.bytes_read += f.bytes;
    return f;
  }
  const auto& spans = m->spans;
  const size_t L = size_t(opt.n_layer);
  TeamFillKV kv;
  kv.begin = kv.end = f.n_local;
  kv.k.resize(L);
  kv.v.resize(L);
  kv.slot.resize(L);
  // Read a few spans at a time (each value verified whole); insert once all are read, so the
  // publisher's segments are written whole, in its order.
  for (size_t b = kv.end / C, e = b; b < spans.size() && kv.end < m->n_matched; b = e) {
    uint64_t batch_bytes = 0;
    for (e = b; e < spans.size() && e < b + kFillBatchSpans; ++e) {
      uint64_t span_bytes = 0;
      for (const ChunkExtent& x : spans[e].kv) span_bytes += x.length;
      if (e > b && batch_bytes + span_bytes > kFillBatchBytes) break;
      batch_bytes += span_bytes;
    }
    std::vector<TeamChunkRef> refs;
    for (size_t sp = b; sp < e; ++sp)
      for (uint32_t l = 0; l < L; ++l) refs.push_back({&spans[sp], l});
    t0 = Clock::now();
    auto vals = tier->ReadChunks(refs, TeamPiece::kKV);
    t.NoteRequest(t0);
    Status bad = Status::Ok();
    for (const auto& v : vals)
      if (!v.ok()) {
        bad = v.status();
        break;
      }
    if (!bad.ok()) {
      t.Failed(bad);
      f.status = bad;
      break;
    }
    AppendTeamSpans(*tier, spans, b, e, vals, &kv);
  }
  if (kv.end > kv.begin) {
    Status ins = InsertTeamKV(tokens, kv, &f.n_team);
    if (!ins.ok()) {
      spdlog::warn("team tier: storing the team's KV here failed; computing it instead: {}", ins.ToString());
      t.Failed(ins);
      f.status = ins;
    }
  }
  const TeamStats after = tier->stats();
  f.bytes = after.bytes_read - before.bytes_read;
  MutexLock lk(&t.mu);
  ++t.counts.fills;
  if (f.n_team > 0) ++t.counts.fill_hits;
  t.counts.tokens_filled += f.n_team;
  t.counts.bytes_read += f.bytes;
  t.counts.corrupt += after.corrupt - before.corrupt;
  return f;
}

TeamTierInfo PrefixStore::Impl::TeamInfo() {
  TeamTierInfo info;
  if (!team) {
    info.status = "off";
    return info;
  }
  {
    MutexLock lk(&team->mu);
    info = team->counts;
    info.connected = team->connected;
    info.status = team->status;
  }
  info.configured = true;
  info.url = team->opt.url;
  info.team = team->opt.team;
  if (team->publisher) {
    const TeamPublisherStats ps = team->publisher->stats();
    info.publish_submitted = ps.submitted;
    info.publish_refused_private = ps.refused_private;
    info.publish_refused_full = ps.refused_full;
    info.publish_failed = ps.jobs_failed;
    info.spans_published = ps.tier.spans_published;
    info.bytes_written = ps.tier.bytes_written;
    info.publish_queued_bytes = ps.queued_bytes;
  }
  return info;
}

// ==================================================================== remote matches

}  // namespace impress::store
