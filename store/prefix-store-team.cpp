// The store's team KV tier (store/team-tier.h, docs/team-tier.md): publishing what Insert
// stores, and filling a local miss from the team's Redis (PrefixStore::FillFromTeam).
//
// Publishing: after an Insert the new KV goes to a TeamPublisher (a bounded queue and one thread
// of its own), from the span boundary at or before the insert's start; the rows between that
// boundary and the start are read back from this store. Private documents are refused there and
// counted. Nothing waits for Redis but the store's close (bounded by TeamOptions::close_wait).
//
// Filling: the team tier's longest prefix of the query (exact tokens, LongestPrefix) past the
// local match is read a few spans at a time (every value verified whole against its descriptor
// and header) and inserted into this store by Insert, so the memory tiers admit it as any fresh
// KV and the caller's Match finds it. A failure of any kind stops the fill where it is: what was
// verified and inserted stays, the rest is computed by the caller. After a network failure the
// team tier is not asked again for TeamOptions::retry_pause.
//
// Thread contract: TeamState::mu guards the connection and the counters; fill_mu makes fills one
// at a time. Lock order: fill_mu -> the store's mu; TeamState::mu is never held across a call
// into the store or Redis.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>

#include "store/prefix-store-impl.h"
#include "store/team-tier.h"

namespace impress::store {

namespace {
using Clock = std::chrono::steady_clock;
constexpr size_t kFillBatchSpans = 8;  // spans read and inserted at a time (bounds the memory of a fill)
}  // namespace

struct PrefixStore::Impl::TeamState {
  TeamOptions opt;
  TeamTierOptions tier_opt;
  std::unique_ptr<TeamPublisher> publisher;  // null: read only

  Mutex fill_mu;  // one fill at a time

  Mutex mu;
  std::shared_ptr<TeamTier> tier GUARDED_BY(mu);  // the fills' connection; null until connected
  Clock::time_point next_try GUARDED_BY(mu){};
  bool connected GUARDED_BY(mu) = false;
  std::string status GUARDED_BY(mu) = "not contacted yet";
  TeamTierInfo counts GUARDED_BY(mu);  // fills, hits, tokens, bytes, errors, corrupt, latency

  // The fills' connection, connecting when due; null (and `why`) when the tier is unreachable.
  std::shared_ptr<TeamTier> Connect(Status* why) EXCLUDES(mu) {
    {
      MutexLock lk(&mu);
      if (tier) return tier;
      if (Clock::now() < next_try) {
        *why = Status::IOError("team tier unreachable (" + status + "), not asked again yet");
        return nullptr;
      }
    }
    auto t = TeamTier::Open(tier_opt);
    if (!t.ok()) {
      Failed(t.status());
      *why = t.status();
      return nullptr;
    }
    MutexLock lk(&mu);
    tier = std::move(*t);
    return tier;
  }

  // A request failed: the network (or an unusable server) drops the connection for retry_pause.
  void Failed(const Status& s) EXCLUDES(mu) {
    MutexLock lk(&mu);
    ++counts.errors;
    if (s.code() != Status::Code::kIOError && s.code() != Status::Code::kInvalidArgument) return;
    tier.reset();
    connected = false;
    next_try = Clock::now() + opt.retry_pause;
    const std::string now = "unreachable: " + s.message();
    if (now != status) spdlog::warn("team tier {}: {}; prefixes are computed here meanwhile", opt.url, s.ToString());
    status = now;
  }

  void Reached() EXCLUDES(mu) {
    MutexLock lk(&mu);
    if (!connected) spdlog::info("team tier {} (team {}): connected", opt.url, opt.team);
    connected = true;
    status = "connected";
  }

  void NoteRequest(Clock::time_point t0) EXCLUDES(mu) {
    MutexLock lk(&mu);
    ++counts.requests;
    counts.request_us += uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  }
};

void PrefixStore::Impl::TeamStateDeleter::operator()(TeamState* t) const { delete t; }

Status PrefixStore::Impl::OpenTeam() {
  if (!opt.team.enabled()) return Status::Ok();
  auto t = std::unique_ptr<TeamState, TeamStateDeleter>(new TeamState());
  t->opt = opt.team;
  TeamTierOptions& to = t->tier_opt;
  IMPRESS_RETURN_IF_ERROR(ParseTeamUrl(opt.team.url, &to.redis));
  IMPRESS_RETURN_IF_ERROR(LoadTeamCredentials(opt.team.credentials_file, &to.redis));
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

void PrefixStore::Impl::PublishToTeam(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers,
                                      const InsertOptions& io) {
  if (!team || !team->publisher || !io.publish || start >= tokens.size()) return;
  TeamPublisher& pub = *team->publisher;
  if (io.private_document) {
    (void)pub.Submit(tokens, start, layers, /*private_document=*/true);  // refused and counted
    return;
  }
  const uint64_t from = start / C * C;
  if (from == start) {
    (void)pub.Submit(tokens, start, layers, false);
    return;
  }
  // The span holding `start` begins before it: its first rows are read back from this store, so
  // the chain of spans the team tier holds has no gap.
  MatchHandle h = Match(tokens.subspan(0, start));
  struct Releaser {
    Impl* im;
    MatchHandle* h;
    ~Releaser() {
      if (h->id) (void)im->Release(*h);
    }
  } releaser{this, &h};
  if (h.n_matched < start) {
    spdlog::debug("team tier: the prefix before new KV is no longer cached; not published");
    return;
  }
  std::vector<uint32_t> pos(start - from);
  std::iota(pos.begin(), pos.end(), uint32_t(from));
  const size_t row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  const size_t n_new = tokens.size() - start;
  std::vector<ReadTicket> tickets;
  Status s = Status::Ok();
  for (int il = 0; il < opt.n_layer && s.ok(); ++il) {
    auto t = SubmitReadKV(h, il, pos, true, true);
    if (t.ok()) tickets.push_back(*t);
    else s = t.status();
  }
  std::vector<std::vector<f16_t>> k(size_t(opt.n_layer)), v(size_t(opt.n_layer));
  for (size_t il = 0; il < tickets.size(); ++il) {
    auto r = Wait(tickets[il]);  // every ticket is waited, even after a failure
    if (!r.ok()) {
      if (s.ok()) s = r.status();
      continue;
    }
    k[il] = std::move(r->k);
    v[il] = std::move(r->v);
    k[il].insert(k[il].end(), layers[il].k, layers[il].k + n_new * row);
    v[il].insert(v[il].end(), layers[il].v, layers[il].v + n_new * row);
  }
  if (!s.ok()) {
    spdlog::warn("team tier: reading back the KV before the new tokens failed; not published: {}", s.ToString());
    return;
  }
  std::vector<LayerKV> all(size_t(opt.n_layer));
  for (size_t il = 0; il < all.size(); ++il) all[il] = {k[il].data(), v[il].data(), nullptr};
  (void)pub.Submit(tokens, from, all, false);
}

TeamFill PrefixStore::Impl::FillFromTeam(std::span<const Token> tokens) {
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
  uint64_t have = f.n_local;
  const auto& spans = m->spans;
  const size_t L = size_t(opt.n_layer), row = size_t(opt.n_head_kv) * size_t(opt.head_dim);
  for (size_t b = have / C; b < spans.size() && have < m->n_matched; b += kFillBatchSpans) {
    const size_t e = std::min(b + kFillBatchSpans, spans.size());
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
    const uint64_t begin = std::max<uint64_t>(have, b * C);
    const uint64_t end = (e - 1) * C + spans[e - 1].tokens.size();
    std::vector<std::vector<f16_t>> k(L, std::vector<f16_t>((end - begin) * row)), v(k);
    for (size_t sp = b; sp < e; ++sp)
      for (uint32_t l = 0; l < L; ++l) {
        const std::vector<uint8_t>& val = *vals[(sp - b) * L + l];
        const ChunkHeader hdr = tier->ExpectedHeader(spans[sp], l, TeamPiece::kKV);
        const ChunkLayout lay = LayoutOf(hdr);
        for (uint64_t pos = std::max<uint64_t>(begin, sp * C); pos < sp * C + spans[sp].tokens.size(); ++pos) {
          const uint64_t r = pos - sp * C;
          DecodeRecord(opt.kv_encoding, val.data() + lay.k_offset + r * hdr.record_bytes, opt.n_head_kv, opt.head_dim,
                       k[l].data() + (pos - begin) * row);
          DecodeRecord(opt.kv_encoding, val.data() + lay.v_offset + r * hdr.record_bytes, opt.n_head_kv, opt.head_dim,
                       v[l].data() + (pos - begin) * row);
        }
      }
    std::vector<LayerKV> layers(L);
    for (size_t l = 0; l < L; ++l) layers[l] = {k[l].data(), v[l].data(), nullptr};
    auto ins = Insert(tokens.subspan(0, end), begin, layers);
    if (!ins.ok()) {
      spdlog::warn("team tier: storing the team's KV here failed; computing it instead: {}", ins.status().ToString());
      t.Failed(ins.status());
      f.status = ins.status();
      break;
    }
    f.n_team += ins->n_written;
    have = end;
  }
  const TeamStats after = tier->stats();
  MutexLock lk(&t.mu);
  ++t.counts.fills;
  if (f.n_team > 0) ++t.counts.fill_hits;
  t.counts.tokens_filled += f.n_team;
  t.counts.bytes_read += after.bytes_read - before.bytes_read;
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

}  // namespace impress::store
