// TeamTier: keys, the descriptor codec, publishing, lookups and verified reads
// (store/team-tier.h). The background publisher is in team-publisher.cpp.
#include "store/team-tier.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>

namespace impress::store {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kDescMagic = 0x44544d49;    // "IMTD"
constexpr uint16_t kDescVersion = 3;           // 3: with a write order, the KV values' rows are in it
constexpr uint16_t kDescVersionTokenRows = 2;  // 2: the write order after the layers, rows in token order
constexpr uint16_t kDescVersionNoOrder = 1;
constexpr size_t kLookupBatch = 32;  // descriptors asked for at once
constexpr size_t kPublishBatch = 8;  // spans written at once

std::string Hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

TeamHash Hash128(const void* p, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(p, n);
  return {h.low64, h.high64};
}

// The model key: everything two desktops must agree on to share KV.
std::string ModelKeyText(const TeamModel& m) {
  std::string s = "impress-team-kv/1|" + m.fingerprint + "|" + std::to_string(m.n_layer) + "|" +
                  std::to_string(m.n_head_kv) + "|" + std::to_string(m.head_dim) + "|" + KVEncodingName(m.kv_encoding) +
                  "|" + KVEncodingName(m.probe_encoding) + "|" + std::to_string(m.span_tokens) + "|";
  for (int h : m.probe_kv_heads) s += std::to_string(h) + ",";
  return s;
}

// Little-endian writer and a bounds-checked reader for the descriptor.
struct Writer {
  std::string out;
  template <class T>
  void Put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
};

struct Reader {
  const std::string& in;
  size_t pos = 0;
  bool bad = false;
  template <class T>
  T Get() {
    T v{};
    if (pos + sizeof(T) > in.size()) {
      bad = true;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  bool Has(uint64_t n) const { return !bad && n <= in.size() - pos; }
};

void PutExtent(Writer* w, const ChunkExtent& e) {
  w->Put<uint32_t>(e.length);
  w->Put<uint64_t>(e.checksum);
  w->Put<uint32_t>(uint32_t(e.block_sums.size()));
  for (uint64_t s : e.block_sums) w->Put<uint64_t>(s);
}

bool GetExtent(Reader* r, const TeamDescriptor& d, ChunkExtent* e) {
  e->length = r->Get<uint32_t>();
  e->checksum = r->Get<uint64_t>();
  const uint32_t n = r->Get<uint32_t>();
  if (!r->Has(uint64_t(n) * 8) || n != e->length / kBlockBytes || e->length % kBlockBytes) return false;
  e->block_sums.resize(n);
  for (auto& s : e->block_sums) s = r->Get<uint64_t>();
  e->slot_begin = 0;  // the span's first position: TeamTier knows the span length and sets it
  e->n_slots = uint32_t(d.tokens.size());
  return CombineBlockSums(e->block_sums) == e->checksum;
}

}  // namespace

TeamHash TeamChainSeed(const TeamModel& m) {
  const std::string t = ModelKeyText(m);
  return Hash128(t.data(), t.size());
}

TeamHash TeamChainNext(const TeamHash& prev, std::span<const Token> span_tokens) {
  std::vector<uint8_t> buf(sizeof(prev) + span_tokens.size_bytes());
  std::memcpy(buf.data(), prev.data(), sizeof(prev));
  if (!span_tokens.empty()) std::memcpy(buf.data() + sizeof(prev), span_tokens.data(), span_tokens.size_bytes());
  return Hash128(buf.data(), buf.size());
}

std::string TeamHashHex(const TeamHash& h) { return Hex64(h[1]) + Hex64(h[0]); }

bool SetRowsInWriteOrder(TeamDescriptor* d) {
  const size_t n = d->tokens.size();
  d->rows_in_order = false;
  d->row.clear();
  if (n == 0 || d->order_segment.size() != n || d->order_slot.empty()) return false;
  for (const auto& l : d->order_slot)
    if (l.size() != n) return false;
  std::vector<uint32_t> by(n);
  d->row.assign(d->order_slot.size(), std::vector<uint32_t>(n));
  for (size_t l = 0; l < d->order_slot.size(); ++l) {
    const std::vector<uint32_t>& slot = d->order_slot[l];
    std::iota(by.begin(), by.end(), 0u);
    // Any values give a permutation of the span's own rows (never one outside it); the
    // descriptor's checksum covers the order, as it covers the block sums of the values.
    std::stable_sort(by.begin(), by.end(), [&](uint32_t a, uint32_t b) {
      return d->order_segment[a] != d->order_segment[b] ? d->order_segment[a] < d->order_segment[b] : slot[a] < slot[b];
    });
    for (uint32_t r = 0; r < n; ++r) d->row[l][by[r]] = r;
  }
  d->rows_in_order = true;
  return true;
}

std::string EncodeTeamDescriptor(const TeamDescriptor& d) {
  Writer w;
  w.Put<uint32_t>(kDescMagic);
  w.Put<uint16_t>(kDescVersion);
  w.Put<uint16_t>(0);
  w.Put<uint64_t>(d.model_hash);
  w.Put<uint32_t>(d.span);
  w.Put<uint32_t>(uint32_t(d.tokens.size()));
  for (uint64_t v : {d.prev[0], d.prev[1], d.chain[0], d.chain[1], d.publish_id}) w.Put<uint64_t>(v);
  w.Put<uint32_t>(uint32_t(d.kv.size()));
  for (Token t : d.tokens) w.Put<int32_t>(t);
  for (size_t l = 0; l < d.kv.size(); ++l) {
    PutExtent(&w, d.kv[l]);
    PutExtent(&w, d.probe[l]);
  }
  const bool order = !d.order_segment.empty();
  w.Put<uint8_t>(order ? 1 : 0);
  if (order) {
    for (uint32_t x : d.order_segment) w.Put<uint32_t>(x);
    for (const auto& layer : d.order_slot)
      for (uint32_t x : layer) w.Put<uint32_t>(x);
  }
  w.Put<uint64_t>(XXH3_64bits(w.out.data(), w.out.size()));
  return std::move(w.out);
}

Result<TeamDescriptor> DecodeTeamDescriptor(const std::string& bytes) {
  if (bytes.size() < 8 || XXH3_64bits(bytes.data(), bytes.size() - 8) != [&] {
        uint64_t s;
        std::memcpy(&s, bytes.data() + bytes.size() - 8, 8);
        return s;
      }())
    return Status::Corruption("team descriptor: checksum mismatch (" + std::to_string(bytes.size()) + " bytes)");
  Reader r{bytes};
  TeamDescriptor d;
  const uint32_t magic = r.Get<uint32_t>();
  const uint16_t version = r.Get<uint16_t>();
  (void)r.Get<uint16_t>();
  if (magic != kDescMagic ||
      (version != kDescVersion && version != kDescVersionTokenRows && version != kDescVersionNoOrder))
    return Status::Corruption("team descriptor: bad magic or version " + std::to_string(version));
  d.model_hash = r.Get<uint64_t>();
  d.span = r.Get<uint32_t>();
  const uint32_t n_tokens = r.Get<uint32_t>();
  d.prev = {r.Get<uint64_t>(), r.Get<uint64_t>()};
  d.chain = {r.Get<uint64_t>(), r.Get<uint64_t>()};
  d.publish_id = r.Get<uint64_t>();
  const uint32_t n_layer = r.Get<uint32_t>();
  if (!r.Has(uint64_t(n_tokens) * 4) || n_tokens == 0 || !r.Has(uint64_t(n_layer) * 32))
    return Status::Corruption("team descriptor: lengths past its end");
  d.tokens.resize(n_tokens);
  for (auto& t : d.tokens) t = r.Get<int32_t>();
  d.kv.resize(n_layer);
  d.probe.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l)
    if (!GetExtent(&r, d, &d.kv[l]) || !GetExtent(&r, d, &d.probe[l]))
      return Status::Corruption("team descriptor: layer " + std::to_string(l) + " block sums malformed");
  if (version != kDescVersionNoOrder && r.Get<uint8_t>() != 0) {
    if (!r.Has(uint64_t(n_tokens) * 4 * (uint64_t(n_layer) + 1)))
      return Status::Corruption("team descriptor: write order past its end");
    d.order_segment.resize(n_tokens);
    for (auto& x : d.order_segment) x = r.Get<uint32_t>();
    d.order_slot.assign(n_layer, std::vector<uint32_t>(n_tokens));
    for (auto& layer : d.order_slot)
      for (auto& x : layer) x = r.Get<uint32_t>();
  }
  if (r.bad || r.pos + 8 != bytes.size()) return Status::Corruption("team descriptor: length mismatch");
  if (version == kDescVersion) SetRowsInWriteOrder(&d);
  return d;
}

Status ParseTeamUrl(const std::string& url, RedisOptions* out) {
  std::string rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    rest = url.substr(9);
    out->tls = true;
  } else {
    return Status::InvalidArgument("team tier: " + url + ": expected redis://host:port");
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    if (rest.substr(0, at).find(':') != std::string::npos)
      return Status::InvalidArgument(
          "team tier: the URL carries a password; give it in a credentials file or IMPRESS_TEAM_PASSWORD instead");
    out->user = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  const size_t colon = rest.rfind(':');
  out->host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (out->host.size() > 2 && out->host.front() == '[' && out->host.back() == ']')
    out->host = out->host.substr(1, out->host.size() - 2);
  out->port = 6379;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long p = std::strtol(rest.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) return Status::InvalidArgument("team tier: " + url + ": bad port");
    out->port = int(p);
  }
  if (out->host.empty()) return Status::InvalidArgument("team tier: " + url + ": no host");
  return Status::Ok();
}

Status LoadTeamCredentials(const std::string& file, RedisOptions* out) {
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return Status::IOError("team tier: cannot read the credentials file " + file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line) && lines.size() < 3;) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) lines.push_back(line);
    }
    if (lines.empty() || lines.size() > 2)
      return Status::InvalidArgument("team tier: " + file + ": expected the user, then the password (one line each)");
    out->password = lines.back();
    if (lines.size() == 2) out->user = lines[0];
    return Status::Ok();
  }
  if (const char* u = std::getenv("IMPRESS_TEAM_USER")) out->user = u;
  if (const char* p = std::getenv("IMPRESS_TEAM_PASSWORD")) out->password = p;
  return Status::Ok();
}

Result<std::unique_ptr<TeamTier>> TeamTier::Open(const TeamTierOptions& options) {
  const auto& m = options.model;
  if (options.team.empty() || options.team.size() > 64 ||
      options.team.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    return Status::InvalidArgument("team tier: the team name must be 1-64 of [A-Za-z0-9._-]: '" + options.team + "'");
  if (m.fingerprint.empty() || m.n_layer <= 0 || m.n_head_kv <= 0 || m.head_dim <= 0 || m.span_tokens <= 0 ||
      m.probe_kv_heads.empty())
    return Status::InvalidArgument("team tier: the model's fingerprint and shape must be given");
  for (int h : m.probe_kv_heads)
    if (h < 0 || h >= m.n_head_kv) return Status::InvalidArgument("team tier: probe head out of range");
  TeamTierOptions o = options;
  o.redis.key_prefix = "impress:" + options.team + ":";
  IMPRESS_ASSIGN_OR_RETURN(auto client, RedisClient::Connect(o.redis));
  return std::unique_ptr<TeamTier>(new TeamTier(std::move(o), std::move(client)));
}

TeamTier::TeamTier(TeamTierOptions opt, std::unique_ptr<RedisClient> client) :
    opt_(std::move(opt)),
    model_hash_([&] {
      const std::string t = ModelKeyText(opt_.model);
      return XXH3_64bits(t.data(), t.size());
    }()),
    model_key_("m" + Hex64(model_hash_)),
    kv_record_bytes_(RecordBytes(opt_.model.kv_encoding, opt_.model.n_head_kv, opt_.model.head_dim)),
    probe_record_bytes_(
        RecordBytes(opt_.model.probe_encoding, int(opt_.model.probe_kv_heads.size()), opt_.model.head_dim)),
    client_(std::move(client)) {}

std::string TeamTier::DescriptorKey(const TeamHash& chain) const {
  return model_key_ + ":{" + TeamHashHex(chain) + "}:d";
}

std::string TeamTier::ValueKey(const TeamDescriptor& d, uint32_t layer, TeamPiece piece) const {
  return model_key_ + ":{" + TeamHashHex(d.chain) + "}:" + Hex64(d.publish_id) +
         (piece == TeamPiece::kKV ? ":k" : ":p") + std::to_string(layer);
}

ChunkHeader TeamTier::ExpectedHeader(const TeamDescriptor& d, uint32_t layer, TeamPiece piece) const {
  ChunkHeader h{};
  const bool kv = piece == TeamPiece::kKV;
  h.kind = uint16_t(kv ? ChunkKind::kKV : ChunkKind::kProbe);
  h.fingerprint_hash = FingerprintHash(opt_.model.fingerprint);
  h.node_id = d.chain[0];
  h.generation = 0;
  h.layer = layer;
  h.index = d.span;
  h.slot_begin = d.span * uint32_t(opt_.model.span_tokens);
  h.n_slots = uint32_t(d.tokens.size());
  h.n_heads = uint32_t(kv ? opt_.model.n_head_kv : int(opt_.model.probe_kv_heads.size()));
  h.head_dim = uint32_t(opt_.model.head_dim);
  h.record_bytes = kv ? kv_record_bytes_ : probe_record_bytes_;
  h.encoding = uint16_t(kv ? opt_.model.kv_encoding : opt_.model.probe_encoding);
  h.reordered = kv && d.rows_in_order ? 1 : 0;
  return h;
}

Result<std::vector<TeamSpan>> TeamTier::EncodeSpans(std::span<const Token> tokens, uint64_t start,
                                                    std::span<const LayerKV> layers, uint64_t publish_id,
                                                    const TeamOrder& order) const {
  const TeamModel& m = opt_.model;
  if (layers.size() != size_t(m.n_layer))
    return Status::InvalidArgument("team tier: " + std::to_string(layers.size()) + " layers of KV, the model has " +
                                   std::to_string(m.n_layer));
  if (start > tokens.size()) return Status::InvalidArgument("team tier: start past the end of the tokens");
  if (!order.empty() && (order.segment.size() != tokens.size() - start || order.slot.size() != layers.size()))
    return Status::InvalidArgument("team tier: the write order does not cover the KV");
  for (const auto& l : order.slot)
    if (l.size() != order.segment.size()) return Status::InvalidArgument("team tier: a layer's write order is short");
  const uint64_t S = uint64_t(m.span_tokens);
  const size_t row_elems = size_t(m.n_head_kv) * size_t(m.head_dim);
  std::vector<TeamSpan> out;
  TeamHash chain = TeamChainSeed(m);
  for (uint64_t b = 0; b < tokens.size(); b += S) {
    const uint64_t e = std::min<uint64_t>(b + S, tokens.size());
    const auto span_tokens = tokens.subspan(b, e - b);
    const TeamHash prev = chain;
    chain = TeamChainNext(prev, span_tokens);
    if (b < start) continue;
    TeamSpan sp;
    TeamDescriptor& d = sp.desc;
    d.model_hash = model_hash_;
    d.span = uint32_t(b / S);
    d.prev = prev;
    d.chain = chain;
    d.publish_id = publish_id;
    d.tokens.assign(span_tokens.begin(), span_tokens.end());
    if (!order.empty()) {
      d.order_segment.assign(order.segment.begin() + std::ptrdiff_t(b - start),
                             order.segment.begin() + std::ptrdiff_t(e - start));
      for (const auto& l : order.slot)
        d.order_slot.emplace_back(l.begin() + std::ptrdiff_t(b - start), l.begin() + std::ptrdiff_t(e - start));
    }
    const uint32_t n = uint32_t(e - b);
    SetRowsInWriteOrder(&d);
    std::vector<uint8_t> krec(size_t(n) * kv_record_bytes_), vrec(krec.size()), prec(size_t(n) * probe_record_bytes_);
    std::vector<uint8_t> kord(d.rows_in_order ? krec.size() : 0), vord(kord.size());
    for (uint32_t l = 0; l < uint32_t(m.n_layer); ++l) {
      if (!layers[l].k || !layers[l].v) return Status::InvalidArgument("team tier: null K or V");
      const f16_t* k = layers[l].k + (b - start) * row_elems;
      const f16_t* v = layers[l].v + (b - start) * row_elems;
      EncodeRecords(m.kv_encoding, k, row_elems, n, m.n_head_kv, m.head_dim, nullptr, krec.data());
      EncodeRecords(m.kv_encoding, v, row_elems, n, m.n_head_kv, m.head_dim, nullptr, vrec.data());
      EncodeRecords(m.probe_encoding, k, row_elems, n, int(m.probe_kv_heads.size()), m.head_dim,
                    m.probe_kv_heads.data(), prec.data());
      const uint8_t* kw = krec.data();
      const uint8_t* vw = vrec.data();
      if (d.rows_in_order) {  // the KV rows in the write order; the probe keys stay in token order
        const size_t rb = kv_record_bytes_;
        for (uint32_t t = 0; t < n; ++t) {
          std::memcpy(kord.data() + size_t(d.row[l][t]) * rb, krec.data() + size_t(t) * rb, rb);
          std::memcpy(vord.data() + size_t(d.row[l][t]) * rb, vrec.data() + size_t(t) * rb, rb);
        }
        kw = kord.data();
        vw = vord.data();
      }
      for (TeamPiece piece : {TeamPiece::kKV, TeamPiece::kProbe}) {
        const ChunkHeader h = ExpectedHeader(d, l, piece);
        std::string buf(LayoutOf(h).length, '\0');
        ChunkExtent ext;
        const bool kv = piece == TeamPiece::kKV;
        EncodeChunk(h, kv ? kw : prec.data(), kv ? vw : nullptr, reinterpret_cast<uint8_t*>(buf.data()), &ext);
        (kv ? d.kv : d.probe).push_back(std::move(ext));
        (kv ? sp.kv : sp.probe).push_back(std::move(buf));
      }
    }
    out.push_back(std::move(sp));
  }
  return out;
}

Status TeamTier::Publish(const std::vector<TeamSpan>& spans) {
  // A few spans at a time: the commands copy the values, and a retry skips what got through.
  for (size_t first = 0; first < spans.size(); first += kPublishBatch) {
    const size_t n = std::min(kPublishBatch, spans.size() - first);
    IMPRESS_RETURN_IF_ERROR(PublishBatch(std::span<const TeamSpan>(spans).subspan(first, n)));
  }
  return Status::Ok();
}

Status TeamTier::PublishBatch(std::span<const TeamSpan> spans) {
  std::vector<RedisCommand> exists;
  for (const auto& sp : spans) exists.push_back({{"EXISTS", DescriptorKey(sp.desc.chain)}});
  auto there = client_->Run(exists);
  std::vector<RedisCommand> values, descs;
  const std::vector<std::string> ttl = opt_.ttl.count() > 0
                                           ? std::vector<std::string>{"EX", std::to_string(opt_.ttl.count())}
                                           : std::vector<std::string>{};
  uint64_t bytes = 0;
  size_t present = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (!there[i].ok()) {
      CountStatus(there[i].status());
      return there[i].status().WithContext("team tier: publish");
    }
    if (there[i]->integer > 0) {
      ++present;
      continue;
    }
    const TeamSpan& sp = spans[i];
    for (uint32_t l = 0; l < sp.kv.size(); ++l) {
      for (TeamPiece piece : {TeamPiece::kKV, TeamPiece::kProbe}) {
        const std::string& v = piece == TeamPiece::kKV ? sp.kv[l] : sp.probe[l];
        RedisCommand c{{"SET", ValueKey(sp.desc, l, piece), v}};
        c.args.insert(c.args.end(), ttl.begin(), ttl.end());
        bytes += v.size();
        values.push_back(std::move(c));
      }
    }
    RedisCommand c{{"SET", DescriptorKey(sp.desc.chain), EncodeTeamDescriptor(sp.desc)}};
    c.args.insert(c.args.end(), ttl.begin(), ttl.end());
    bytes += c.args[2].size();
    descs.push_back(std::move(c));
  }
  // Values first; descriptors only once every value is written.
  for (auto* batch : {&values, &descs}) {
    for (const auto& r : client_->Run(*batch)) {
      if (!r.ok()) {
        CountStatus(r.status());
        return r.status().WithContext("team tier: publish");
      }
    }
  }
  c_.bytes_written += bytes;
  c_.spans_published += descs.size();
  c_.spans_present += present;
  return Status::Ok();
}

Status TeamTier::CheckDescriptor(const TeamDescriptor& d, uint32_t span, const TeamHash& prev, const TeamHash& chain,
                                 std::span<const Token> tokens) const {
  const uint32_t n = uint32_t(tokens.size());
  if (d.model_hash != model_hash_ || d.span != span || d.prev != prev || d.chain != chain)
    return Status::Corruption("team descriptor of span " + std::to_string(span) + " names another model or prefix");
  if (!std::equal(d.tokens.begin(), d.tokens.end(), tokens.begin(), tokens.end()))
    return Status::Corruption("team descriptor of span " + std::to_string(span) + ": tokens differ from the query");
  if (d.kv.size() != size_t(opt_.model.n_layer))
    return Status::Corruption("team descriptor of span " + std::to_string(span) + ": layer count differs");
  for (uint32_t l = 0; l < d.kv.size(); ++l) {
    for (TeamPiece piece : {TeamPiece::kKV, TeamPiece::kProbe}) {
      const ChunkExtent& e = piece == TeamPiece::kKV ? d.kv[l] : d.probe[l];
      if (e.length != LayoutOf(ExpectedHeader(d, l, piece)).length || e.n_slots != n)
        return Status::Corruption("team descriptor of span " + std::to_string(span) + ": chunk length differs");
    }
  }
  return Status::Ok();
}

Result<TeamMatch> TeamTier::LongestPrefix(std::span<const Token> tokens) {
  const auto t0 = Clock::now();
  ++c_.lookups;
  TeamMatch match;
  const uint64_t S = uint64_t(opt_.model.span_tokens);
  const uint64_t n_spans = (tokens.size() + S - 1) / S;
  std::vector<TeamHash> chain(n_spans + 1);
  chain[0] = TeamChainSeed(opt_.model);
  for (uint64_t i = 0; i < n_spans; ++i)
    chain[i + 1] = TeamChainNext(chain[i], tokens.subspan(i * S, std::min<uint64_t>(S, tokens.size() - i * S)));
  bool stop = false;
  for (uint64_t first = 0; first < n_spans && !stop; first += kLookupBatch) {
    const uint64_t last = std::min<uint64_t>(first + kLookupBatch, n_spans);
    std::vector<RedisCommand> gets;
    for (uint64_t i = first; i < last; ++i) gets.push_back({{"GET", DescriptorKey(chain[i + 1])}});
    auto replies = client_->Run(gets);
    for (uint64_t i = first; i < last && !stop; ++i) {
      auto& r = replies[i - first];
      stop = true;
      if (!r.ok()) {
        CountStatus(r.status());
        if (match.spans.empty()) {
          NoteRequest(t0);
          return r.status();
        }
        break;  // what matched so far stands
      }
      if (r->nil()) break;
      c_.bytes_read += r->str.size();
      auto d = DecodeTeamDescriptor(r->str);
      const auto span_tokens = tokens.subspan(i * S, std::min<uint64_t>(S, tokens.size() - i * S));
      Status s = d.ok() ? Status::Ok() : d.status();
      if (s.ok()) {
        for (auto* e : {&d->kv, &d->probe})
          for (auto& x : *e) x.slot_begin = uint32_t(i * S);
        s = CheckDescriptor(*d, uint32_t(i), chain[i], chain[i + 1], span_tokens);
      }
      if (!s.ok()) {
        ++c_.corrupt;
        spdlog::warn("team tier: {}", s.ToString());
        break;
      }
      match.n_matched += span_tokens.size();
      match.spans.push_back(std::move(*d));
      ++c_.spans_hit;
      stop = false;
    }
  }
  if (match.n_matched < tokens.size()) ++c_.misses;
  NoteRequest(t0);
  return match;
}

Result<std::vector<uint8_t>> TeamTier::ReadChunk(const TeamDescriptor& d, uint32_t layer, TeamPiece piece) {
  const TeamChunkRef ref{&d, layer};
  auto out = ReadChunks(std::span<const TeamChunkRef>(&ref, 1), piece);
  return std::move(out[0]);
}

std::vector<Result<std::vector<uint8_t>>> TeamTier::ReadChunks(std::span<const TeamChunkRef> refs, TeamPiece piece) {
  const auto t0 = Clock::now();
  std::vector<Result<std::vector<uint8_t>>> out;
  out.reserve(refs.size());
  std::vector<RedisCommand> gets;
  std::vector<size_t> asked;  // index into refs of each GET
  for (size_t i = 0; i < refs.size(); ++i) {
    const auto& exts = piece == TeamPiece::kKV ? refs[i].desc->kv : refs[i].desc->probe;
    if (refs[i].layer >= exts.size()) {
      out.emplace_back(Status::InvalidArgument("team tier: layer out of range"));
      continue;
    }
    out.emplace_back(Status::Internal("team tier: not read"));
    gets.push_back({{"GET", ValueKey(*refs[i].desc, refs[i].layer, piece)}});
    asked.push_back(i);
  }
  auto replies = client_->Run(gets);
  NoteRequest(t0);
  for (size_t j = 0; j < asked.size(); ++j) {
    const TeamDescriptor& d = *refs[asked[j]].desc;
    const uint32_t layer = refs[asked[j]].layer;
    out[asked[j]] = CheckValue(d, layer, piece, gets[j].args[1], std::move(replies[j]));
  }
  return out;
}

// One GET's reply as a verified value: whole, the length and block sums the descriptor names,
// the header the span and layer must have.
Result<std::vector<uint8_t>> TeamTier::CheckValue(const TeamDescriptor& d, uint32_t layer, TeamPiece piece,
                                                  const std::string& key, Result<RedisReply> r) {
  if (!r.ok()) {
    CountStatus(r.status());
    return r.status();
  }
  if (r->nil()) {
    ++c_.misses;
    return Status::NotFound("team tier: " + key + " is gone (evicted or expired)");
  }
  if (r->type != RedisReply::Type::kString) {
    ++c_.errors;
    return Status::IOError("team tier: " + key + ": the server answered a GET with no value");
  }
  const std::string& v = r->str;
  c_.bytes_read += v.size();
  ChunkExtent ext = (piece == TeamPiece::kKV ? d.kv : d.probe)[layer];
  ext.slot_begin = d.span * uint32_t(opt_.model.span_tokens);
  Status s = v.size() == ext.length ? VerifyChunk(reinterpret_cast<const uint8_t*>(v.data()), ext,
                                                  ExpectedHeader(d, layer, piece), "team tier " + key)
                                    : Status::Corruption("team tier " + key + ": " + std::to_string(v.size()) +
                                                         " bytes, expected " + std::to_string(ext.length));
  if (!s.ok()) {
    ++c_.corrupt;
    ++c_.misses;
    spdlog::warn("{}", s.ToString());
    return s;
  }
  ++c_.reads;
  return std::vector<uint8_t>(v.begin(), v.end());
}

Result<std::vector<uint8_t>> TeamTier::ReadRows(const TeamDescriptor& d, uint32_t layer, bool v_region,
                                                std::span<const uint32_t> rows) {
  const TeamRowsRef ref{&d, rows};
  auto out = ReadRowsMany(std::span<const TeamRowsRef>(&ref, 1), layer, !v_region, v_region);
  return std::move(out[0]);
}

std::vector<Result<std::vector<uint8_t>>> TeamTier::ReadRowsMany(std::span<const TeamRowsRef> refs, uint32_t layer,
                                                                 bool want_k, bool want_v) {
  const auto t0 = Clock::now();
  const uint32_t rb = kv_record_bytes_;
  std::vector<Result<std::vector<uint8_t>>> out;
  out.reserve(refs.size());
  // Per reference and region: the 4 KiB blocks its rows lie in, merged into runs of consecutive
  // blocks, one GETRANGE each; all of them in one pipeline.
  struct Plan {
    std::string key;
    ChunkLayout lay;
    std::vector<std::pair<uint32_t, uint32_t>> runs;  // first block, count (K and V regions)
    size_t first_cmd = 0;
  };
  std::vector<Plan> plans(refs.size());
  std::vector<RedisCommand> cmds;
  for (size_t i = 0; i < refs.size(); ++i) {
    const TeamDescriptor& d = *refs[i].desc;
    out.emplace_back(Status::Internal("team tier: not read"));
    if (layer >= d.kv.size()) {
      out[i] = Status::InvalidArgument("team tier: layer out of range");
      continue;
    }
    Plan& p = plans[i];
    p.lay = LayoutOf(ExpectedHeader(d, layer, TeamPiece::kKV));
    std::vector<uint32_t> blocks;
    bool bad = false;
    for (uint64_t region : {want_k ? p.lay.k_offset : UINT64_MAX, want_v ? p.lay.v_offset : UINT64_MAX}) {
      if (region == UINT64_MAX) continue;
      for (uint32_t t : refs[i].rows) {
        if (t >= d.tokens.size()) {
          bad = true;
          break;
        }
        const uint64_t b = region + uint64_t(d.Row(layer, t)) * rb, e = b + rb;
        for (uint64_t k = b / kBlockBytes; k <= (e - 1) / kBlockBytes; ++k) blocks.push_back(uint32_t(k));
      }
    }
    if (bad) {
      out[i] = Status::InvalidArgument("team tier: row past the span's end");
      continue;
    }
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    for (uint32_t b : blocks) {
      if (!p.runs.empty() && p.runs.back().first + p.runs.back().second == b) ++p.runs.back().second;
      else p.runs.push_back({b, 1});
    }
    p.key = ValueKey(d, layer, TeamPiece::kKV);
    p.first_cmd = cmds.size();
    for (const auto& [b, n] : p.runs) {
      const uint64_t begin = uint64_t(b) * kBlockBytes, end = begin + uint64_t(n) * kBlockBytes;
      cmds.push_back({{"GETRANGE", p.key, std::to_string(begin), std::to_string(end - 1)}});
    }
  }
  auto got = client_->Run(cmds);
  NoteRequest(t0);
  for (size_t i = 0; i < refs.size(); ++i) {
    if (out[i].status().code() != Status::Code::kInternal) continue;  // refused above
    const TeamDescriptor& d = *refs[i].desc;
    const Plan& p = plans[i];
    const ChunkExtent& ext = d.kv[layer];
    std::vector<uint8_t> buf(ext.length);  // only the runs read are filled
    Status s = Status::Ok();
    for (size_t j = 0; j < p.runs.size() && s.ok(); ++j) {
      Result<RedisReply>& r = got[p.first_cmd + j];
      const uint64_t begin = uint64_t(p.runs[j].first) * kBlockBytes, length = uint64_t(p.runs[j].second) * kBlockBytes;
      if (!r.ok()) {
        CountStatus(r.status());
        s = r.status();
        break;
      }
      const std::string& bytes = r->str;
      c_.bytes_read += bytes.size();
      s = bytes.size() == length && begin + length <= ext.length
              ? VerifyBlocks(reinterpret_cast<const uint8_t*>(bytes.data()), ext, p.runs[j].first, p.runs[j].second,
                             "team tier " + p.key)
              : Status::NotFound("team tier: " + p.key + " is gone or shorter than its descriptor says");
      if (!s.ok()) {
        if (s.code() == Status::Code::kCorruption) ++c_.corrupt;
        ++c_.misses;
        break;
      }
      std::memcpy(buf.data() + begin, bytes.data(), bytes.size());
    }
    if (!s.ok()) {
      out[i] = s;
      continue;
    }
    const auto& rows = refs[i].rows;
    std::vector<uint8_t> recs(rows.size() * size_t(rb) * ((want_k ? 1 : 0) + (want_v ? 1 : 0)));
    uint8_t* w = recs.data();
    for (uint64_t region : {want_k ? p.lay.k_offset : UINT64_MAX, want_v ? p.lay.v_offset : UINT64_MAX}) {
      if (region == UINT64_MAX) continue;
      for (uint32_t t : rows) {
        std::memcpy(w, buf.data() + region + uint64_t(d.Row(layer, t)) * rb, rb);
        w += rb;
      }
    }
    ++c_.reads;
    out[i] = std::move(recs);
  }
  return out;
}

std::vector<Result<std::string>> TeamTier::ReadRanges(const std::string& key,
                                                      std::span<const RedisClient::ByteRange> ranges) {
  const auto t0 = Clock::now();
  auto out = client_->GetRanges(key, ranges);
  NoteRequest(t0);
  for (const auto& r : out) {
    if (r.ok()) c_.bytes_read += r->size();
    else CountStatus(r.status());
  }
  return out;
}

void TeamTier::NoteRequest(Clock::time_point start) {
  const uint64_t us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  c_.request_us += us;
  uint64_t m = c_.max_request_us.load();
  while (us > m && !c_.max_request_us.compare_exchange_weak(m, us)) {
  }
}

void TeamTier::CountStatus(const Status& s) {
  if (!s.ok()) ++c_.errors;
}

TeamStats TeamTier::stats() const {
  TeamStats s;
  s.lookups = c_.lookups;
  s.spans_hit = c_.spans_hit;
  s.misses = c_.misses;
  s.corrupt = c_.corrupt;
  s.errors = c_.errors;
  s.reads = c_.reads;
  s.bytes_read = c_.bytes_read;
  s.bytes_written = c_.bytes_written;
  s.spans_published = c_.spans_published;
  s.spans_present = c_.spans_present;
  s.request_us = c_.request_us;
  s.max_request_us = c_.max_request_us;
  return s;
}

}  // namespace impress::store
