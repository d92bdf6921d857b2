#include "bench/workload-bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <utility>

#include "chat/conversation.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/system-policy.h"
#include "store/kv-codec.h"

namespace impress {

namespace fs = std::filesystem;

namespace {

int32_t Argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), std::max(0.0, std::ceil(q * double(v.size())) - 1)))];
}

// K and V of one token over all layers, as the store keeps them (fp16).
// K and V of one token over every layer as the store holds them (its encoding): the tier budgets'
// fractions are of what the tiers would hold, not of the fp16 size.
uint64_t KvBytesPerToken(const ModelConfig& c, store::KVEncoding e) {
  return uint64_t(c.n_layer) * 2 * store::RecordBytes(e, c.n_head_kv, c.head_dim);
}

struct Scratch {
  fs::path dir;
  ~Scratch() {
    std::error_code e;
    fs::remove_all(dir, e);
  }
};

// One run: a system with its settings, store shape and budgets (a sweep changes one of them).
struct RunSpec {
  SystemKind system = SystemKind::kImpress;
  PipelineSettings settings;
  int chunk_tokens = 0;              // 0: the model's (ChunkTokensFor)
  int stored_probe_heads = 3;        // the store keeps probe keys for these query heads' KV heads
  bool stored_probe_spread = false;  // ... chosen spread over the KV groups
  store::KVEncoding kv_encoding = store::KVEncoding::kF16;
  std::optional<store::KVEncoding> probe_encoding;
  double device_fraction = 0, host_fraction = 0;
  double sweep_value = 0;
  bool swept = false;
};

RunSpec BaseRun(SystemKind s, const WorkloadBenchOptions& o) {
  RunSpec r;
  r.system = s;
  r.settings = o.settings;
  r.settings.system = s;
  r.settings.report_importance = true;  // the store's statistics drive LFU, score caching and reorder
  r.chunk_tokens = o.chunk_tokens;
  r.stored_probe_heads = o.settings.probe_heads;
  r.stored_probe_spread = o.settings.probe_spread;
  r.kv_encoding = o.kv_encoding;
  r.probe_encoding = o.probe_encoding;
  r.device_fraction = o.device_fraction;
  r.host_fraction = o.host_fraction;
  return r;
}

Status ApplySweep(const std::string& name, double v, RunSpec* r) {
  r->sweep_value = v;
  r->swept = true;
  if (name == "alpha") {
    r->settings.alpha = float(v);
  } else if (name == "keep") {
    if (v <= 0 || v > 1) return Status::InvalidArgument(fmt::format("sweep keep: {} is not in (0, 1]", v));
    r->settings.keep = float(v);
  } else if (name == "keep-mass") {
    if (v < 0 || v > 1) return Status::InvalidArgument(fmt::format("sweep keep-mass: {} is not in [0, 1]", v));
    r->settings.keep_mass = float(v);
  } else if (name == "pool") {
    if (v < 0 || v > kMaxPoolWidth)
      return Status::InvalidArgument(fmt::format("sweep pool: {} is not in [0, {}]", v, kMaxPoolWidth));
    r->settings.pool = int(v);
  } else if (name == "pool-follow") {
    if (v < 0 || v > kMaxPoolWidth)
      return Status::InvalidArgument(fmt::format("sweep pool-follow: {} is not in [0, {}]", v, kMaxPoolWidth));
    r->settings.pool_follow = int(v);
  } else if (name == "pool-max") {
    r->settings.pool_max = v != 0;
  } else if (name == "dense-layers") {
    if (v < 0) return Status::InvalidArgument(fmt::format("sweep dense-layers: {} is not a layer count", v));
    r->settings.dense_layers = int(v);
  } else if (name == "head-max") {
    r->settings.head_max = v != 0;
  } else if (name == "probe-heads") {
    r->settings.probe_heads = std::max(1, int(v));
  } else if (name == "probe-spread") {
    r->settings.probe_spread = v != 0;
  } else if (name == "select-group") {
    r->settings.select_group = int(v);
  } else if (name == "select-budget-tokens") {
    r->settings.select_budget = v != 0 ? GroupBudget::kTokens : GroupBudget::kMass;
  } else if (name == "predict-select") {
    r->settings.predict_select = v != 0;
  } else if (name == "chunk-tokens") {
    if (v < 1) return Status::InvalidArgument(fmt::format("sweep chunk-tokens: {} is not a chunk size", v));
    r->chunk_tokens = int(v);
  } else if (name == "device-fraction") {
    r->device_fraction = std::max(0.0, v);
  } else if (name == "host-fraction") {
    r->host_fraction = std::max(0.0, v);
  } else {
    return Status::InvalidArgument("unknown sweep " + name);
  }
  return Status::Ok();
}

// What every run shares: each document's prompt (the ingest), each request's, each fact's.
struct Prompts {
  std::vector<PromptTokens> docs, requests, facts;
};

// The store keeps probe keys for the KV heads of the P query heads of the benchmark's own
// settings (the first P, or P spread over the KV groups with --probe-spread; not of a sweep's
// value), whichever choice and count the run probes with: runs that
// differ only in them share one ingest (an hour of prefill on a busy machine). A probe whose KV
// heads the store lacks reads the layer's keys from the chunks instead (with grouped-query
// attention and P >= n_head_kv spread: every KV head's keys, the same bytes as probe keys of every
// KV head); WorkloadRequestResult::probe_key_bytes counts what it read.
store::PrefixStoreOptions StoreOptionsForRun(const ModelContext& ctx, const RunSpec& r) {
  store::PrefixStoreOptions so = StoreOptionsFor(ctx.config(), r.stored_probe_heads, r.stored_probe_spread);
  if (r.chunk_tokens > 0) so.chunk_tokens = r.chunk_tokens;
  so.kv_encoding = r.kv_encoding;
  so.probe_encoding = r.probe_encoding;
  so.reorder_interval = std::chrono::milliseconds(0);
  return so;
}

// FNV-1a over the documents' tokens and everything that shapes the stored bytes: a folder name
// that changes whenever the ingest would.
std::string IngestKey(const Prompts& w, const store::PrefixStoreOptions& so, const PipelineSettings& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ull;
  };
  mix(so.model_fingerprint.data(), so.model_fingerprint.size());
  const int shape[] = {so.n_layer, so.n_head_kv, so.head_dim, so.chunk_tokens, 1};  // 1: this key's version
  mix(shape, sizeof shape);
  mix(so.probe_kv_heads.data(), so.probe_kv_heads.size() * sizeof(int));
  if (so.kv_encoding != store::KVEncoding::kF16) {  // fp16 keeps the key it had before encodings
    const int enc = int(so.kv_encoding);
    mix(&enc, sizeof enc);
  }
  if (so.probe_encoding && *so.probe_encoding != so.kv_encoding) {  // probe keys of their own encoding
    const int enc = 16 + int(*so.probe_encoding);
    mix(&enc, sizeof enc);
  }
  if (s.pool > 1) {  // pooling reorders what is written; without it the key is the one it had before
    const int pool[] = {s.pool, s.pool_max ? 1 : 0};
    mix(pool, sizeof pool);
    if (s.pool_follow > 0) mix(&s.pool_follow, sizeof s.pool_follow);
  }
  for (const PromptTokens& p : w.docs) {
    mix(&p.n_prefix, sizeof p.n_prefix);
    mix(p.tokens.data(), size_t(p.n_prefix) * sizeof(int32_t));
  }
  return fmt::format("{:016x}", h);
}

// Ingests every document into a store at `dir` (fast tiers off: all of it lands on the SSD), its
// chunks written in the order the run's pooling (`pool`, `pool_max`) gives.
Status Ingest(ModelContext& ctx, const Prompts& w, store::PrefixStoreOptions so, const WorkloadBenchOptions& o,
              const PipelineSettings& pool, const std::string& dir, WorkloadBenchResult* result) {
  so.dir = dir;
  so.device_bytes = 0;
  so.host_bytes = 0;
  IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
  ImpressPipeline pipe(ctx, st.get());
  PipelineSettings s = o.settings;
  s.system = SystemKind::kRecomp;
  s.report_importance = false;
  s.pool = pool.pool;
  s.pool_max = pool.pool_max;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0;
  for (const PromptTokens& p : w.docs) {
    IMPRESS_RETURN_IF_ERROR(pipe.Prefill({p.tokens, p.n_prefix}, s, 0, &logits).status());
    pipe.StoreAsync(size_t(p.n_prefix));
    IMPRESS_RETURN_IF_ERROR(pipe.WaitForStore().status());
    done += uint64_t(p.n_prefix);
    if (!ReportProgress(o.progress, done, result->doc_tokens, "ingest")) return Status::Cancelled("cancelled");
  }
  IMPRESS_RETURN_IF_ERROR(pipe.ReleaseMatch());
  result->ingest_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const store::StoreStats stats = st->Stats();
  result->io_engine = stats.io_engine;
  result->direct_io = stats.direct_io;
  return Status::Ok();
}

// The ingested store for a run's store shape: reused from `root` when an earlier run (or an
// earlier system of this one) made it, else made now. A marker file next to the store, written
// last, says the ingest finished.
Result<fs::path> EnsureIngested(ModelContext& ctx, const Prompts& w, const RunSpec& r, const WorkloadBenchOptions& o,
                                const fs::path& root, WorkloadBenchResult* result) {
  const store::PrefixStoreOptions so = StoreOptionsForRun(ctx, r);
  const std::string key = IngestKey(w, so, r.settings);
  const fs::path dir = root / ("ingest-" + key), marker = root / ("ingest-" + key + ".done");
  std::error_code ec;
  if (fs::exists(marker, ec) && fs::is_directory(dir, ec)) {
    std::ifstream in(marker);
    std::string io;
    int direct = 0;
    double ingest_s = 0;
    if (in >> ingest_s >> direct >> io) {
      // The ingest time reported is this run's own when it ingested anything.
      if (result->ingest_reused) result->ingest_s = ingest_s;
      result->direct_io = direct != 0;
      result->io_engine = io;
      return dir;
    }
  }
  fs::remove_all(dir, ec);
  fs::create_directories(root, ec);
  IMPRESS_RETURN_IF_ERROR(Ingest(ctx, w, so, o, r.settings, dir.string(), result));
  std::ofstream(marker) << result->ingest_s << " " << (result->direct_io ? 1 : 0) << " " << result->io_engine << "\n";
  result->ingest_reused = false;
  return dir;
}

WorkloadRequestResult FromReport(const RequestReport& r, const WorkloadRequest& q, int32_t first_token,
                                 uint64_t probe_row_bytes) {
  WorkloadRequestResult x;
  for (const LayerReport& l : r.layers)
    if (l.probed) x.probe_key_bytes += uint64_t(l.n) * probe_row_bytes;
  x.doc = q.doc;
  x.follow_up = q.follow_up;
  x.n_prefix = r.n_prefix;
  x.n_matched = r.n_matched;
  x.ttft_ms = r.ttft_ms;
  x.io_wait_ms = r.breakdown.io_wait_ms;
  x.breakdown = r.breakdown;
  x.ssd_bytes = r.ssd_bytes_read;
  x.ssd_reads = r.ssd_reads;
  x.chunks_device = r.chunks_device;
  x.chunks_host = r.chunks_host;
  x.chunks_ssd = r.chunks_ssd;
  x.chunks_team = r.chunks_team;
  x.team_bytes = r.team_read_bytes;
  x.read_amplification = r.read_amplification();
  x.layers_passed = r.n_layers_passed;
  x.layers = int(r.layers.size());
  x.first_token = first_token;
  return x;
}

// Where `statement` lies among the prompt's tokens: [begin, end) of the tokens that spell it.
std::pair<int, int> StatementTokens(const Tokenizer& tok, std::span<const int32_t> tokens,
                                    const std::string& statement) {
  std::vector<std::string> pieces;
  pieces.reserve(tokens.size());
  for (int32_t t : tokens) pieces.push_back(tok.Decode(std::vector<int32_t>{t}, false));
  return PiecesSpelling(pieces, statement);
}

// Per layer, the share of the tokens [span.first, span.second) the request used.
std::vector<float> SpanKept(const RequestReport& r, std::pair<int, int> span) {
  const size_t n = size_t(r.n_matched), width = size_t(span.second - span.first);
  if (n == 0 || width == 0 || size_t(span.second) > n || r.selected.size() != r.layers.size() * n) return {};
  std::vector<float> kept(r.layers.size());
  for (size_t il = 0; il < r.layers.size(); ++il) {
    const uint8_t* row = r.selected.data() + il * n;
    kept[il] = float(std::count(row + span.first, row + span.second, uint8_t{1})) / float(width);
  }
  return kept;
}

// The fact spans' figures of a system's summary from its facts' span_kept.
void SummarizeSpans(WorkloadSystemResult* s) {
  s->span_kept_by_layer.clear();
  int n_found = 0, whole = 0;
  for (const WorkloadFactResult& f : s->facts) {
    if (f.span_kept.empty()) continue;
    if (s->span_kept_by_layer.size() < f.span_kept.size()) s->span_kept_by_layer.resize(f.span_kept.size(), 0.0);
    for (size_t il = 0; il < f.span_kept.size(); ++il) s->span_kept_by_layer[il] += f.span_kept[il];
    ++n_found;
    whole += *std::min_element(f.span_kept.begin(), f.span_kept.end()) >= 1.0f ? 1 : 0;
  }
  if (n_found == 0) return;
  double sum = 0;
  for (double& x : s->span_kept_by_layer) sum += x /= n_found;
  s->span_kept_mean = sum / double(s->span_kept_by_layer.size());
  s->span_whole_share = double(whole) / n_found;
}

// Asks the team tier for the prompt's reusable prefix (as the chat session does before a
// request): stages it for the match, or waits for a background fill of it still running. Returns
// its time in ms and the bytes its lookup received; nothing when the store has no team tier.
std::pair<double, uint64_t> AskTeam(ImpressPipeline& pipe, const PromptTokens& p) {
  if (!pipe.store()) return {0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  const store::TeamFill f = pipe.store()->FillFromTeam(std::span(p.tokens).first(size_t(p.n_prefix)));
  if (!f.status.ok()) spdlog::debug("workload: team tier: {}", f.status.ToString());
  return {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), f.bytes};
}

// Each hidden fact's question, answered greedily with n_continue tokens; nothing is stored and
// the store's statistics are left alone (the requests before already shaped the tiers).
Status AskFacts(ImpressPipeline& pipe, const RunSpec& r, const Prompts& w, const WorkloadBenchOptions& o,
                const WorkloadBenchResult& result, WorkloadSystemResult* out, uint64_t* step, uint64_t total) {
  PipelineSettings s = r.settings;
  s.report_importance = false;
  s.record_importance = true;  // which tokens each layer used: how much of the fact it kept
  const Tokenizer& tok = pipe.context().tokenizer();
  std::vector<float> logits;
  for (size_t i = 0; i < w.facts.size(); ++i) {
    const PromptTokens& p = w.facts[i];
    const PlacedFact& placed = result.facts[i];
    (void)AskTeam(pipe, p);
    IMPRESS_ASSIGN_OR_RETURN(const RequestReport report,
                             pipe.Prefill({p.tokens, p.n_prefix}, s, o.n_continue, &logits));
    WorkloadFactResult f;
    const std::string& statement = o.facts[size_t(placed.fact)].statement;
    f.span_kept = SpanKept(report, StatementTokens(tok, std::span(p.tokens).first(size_t(p.n_prefix)), statement));
    f.fact = placed.fact;
    f.doc = placed.doc;
    f.depth = placed.depth;
    for (int t = 0; t < o.n_continue; ++t) {
      f.tokens.push_back(Argmax(logits));
      if (t + 1 < o.n_continue) IMPRESS_RETURN_IF_ERROR(pipe.Decode(f.tokens.back(), &logits));
    }
    IMPRESS_RETURN_IF_ERROR(pipe.ReleaseMatch());
    const auto eog =
        std::find_if(f.tokens.begin(), f.tokens.end(), [&](int32_t t) { return tok.IsEndOfGeneration(t); });
    f.output = tok.Decode(std::vector<int32_t>(f.tokens.begin(), eog), true);
    f.correct = AnswerMatches(f.output, o.facts[size_t(placed.fact)].answers);
    out->facts.push_back(std::move(f));
    if (!ReportProgress(o.progress, ++*step, total, out->system + " facts")) return Status::Cancelled("cancelled");
  }
  return Status::Ok();
}

// Publishes every ingested document to the team tier (from a copy of the ingested store opened
// with it) and waits until the team tier holds them.
Status PublishIngested(ModelContext& ctx, const Prompts& w, const RunSpec& r, const WorkloadBenchOptions& o,
                       const fs::path& base) {
  const fs::path dir = base.string() + "-publish";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::copy(base, dir, fs::copy_options::recursive, ec);
  if (ec) return Status::IOError(fmt::format("cannot copy the ingested store to {}: {}", dir.string(), ec.message()));
  Status s = Status::Ok();
  {
    store::PrefixStoreOptions so = StoreOptionsForRun(ctx, r);
    so.dir = dir.string();
    so.team = o.team;
    so.team.publish = true;
    IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
    for (const PromptTokens& p : w.docs) {
      auto n = st->PublishCached(std::span(p.tokens).first(size_t(p.n_prefix)));
      if (!n.ok()) {
        s = n.status();
        break;
      }
      // One document's copy at a time in the publisher's queue.
      if (!st->WaitTeamPublished(std::chrono::minutes(30))) {
        s = Status::IOError("workload: publishing the documents to the team tier did not finish in 30 minutes");
        break;
      }
    }
    const store::TeamTierInfo t = st->Stats().team;
    spdlog::info("workload: published {} documents to the team tier ({} spans, {:.1f} MB)", w.docs.size(),
                 t.spans_published, double(t.bytes_written) / 1e6);
    if (s.ok() && t.publish_failed > 0) s = Status::IOError("workload: publishing to the team tier failed");
  }
  fs::remove_all(dir, ec);
  return s;
}

// One run over the whole request sequence (ReComp: the first few), from a fresh copy of the
// ingested store (with a team tier: an empty store), then the fact questions.
Result<WorkloadSystemResult> RunSystem(ModelContext& ctx, const RunSpec& r, const Prompts& w,
                                       const WorkloadBenchOptions& o, const fs::path& base, const fs::path& dir,
                                       const WorkloadBenchResult& result, uint64_t* step, uint64_t total) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  // With a team tier the run starts empty: the documents come from the team tier.
  const bool team = o.team.enabled();
  if (!team) fs::copy(base, dir, fs::copy_options::recursive, ec);
  if (ec) return Status::IOError(fmt::format("cannot copy the ingested store to {}: {}", dir.string(), ec.message()));
  store::PrefixStoreOptions so = StoreOptionsForRun(ctx, r);
  so.dir = dir.string();
  if (team) {
    so.team = o.team;
    so.team.publish = false;  // the runs must not see each other's questions in the team tier
  }
  so.device_bytes = uint64_t(double(result.kv_bytes) * r.device_fraction);
  so.host_bytes = uint64_t(double(result.kv_bytes) * r.host_fraction);
  IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
  ImpressPipeline pipe(ctx, st.get());
  // The probe reads its KV heads' keys when the store keeps them, else every key of the layer.
  const std::vector<int> probe_kv = ProbeKvHeads(ctx.config(), r.settings.probe_heads, r.settings.probe_spread);
  const bool covered = std::all_of(probe_kv.begin(), probe_kv.end(), [&](int g) {
    return std::find(so.probe_kv_heads.begin(), so.probe_kv_heads.end(), g) != so.probe_kv_heads.end();
  });
  const uint64_t probe_row_bytes =
      covered ? store::RecordBytes(store::ProbeEncoding(so), int(so.probe_kv_heads.size()), ctx.config().head_dim)
              : store::RecordBytes(so.kv_encoding, ctx.config().n_head_kv, ctx.config().head_dim);
  WorkloadSystemResult out;
  out.system = SystemName(r.system);
  out.sweep_value = r.sweep_value;
  const int n_all = int(w.requests.size());
  const SystemPolicy& policy = System(r.system);
  const int n = policy.reuses() ? n_all : std::min(o.recomp_requests, n_all);
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    const PromptTokens& p = w.requests[size_t(i)];
    const auto [team_ms, lookup_bytes] = team ? AskTeam(pipe, p) : std::pair<double, uint64_t>{0, 0};
    IMPRESS_ASSIGN_OR_RETURN(RequestReport rep, pipe.Prefill({p.tokens, p.n_prefix}, r.settings, 0, &logits));
    IMPRESS_RETURN_IF_ERROR(pipe.ReleaseMatch());
    out.requests.push_back(FromReport(rep, result.requests[size_t(i)], Argmax(logits), probe_row_bytes));
    out.requests.back().team_ms = team_ms;
    out.requests.back().ttft_ms += team_ms;  // on the user's path
    out.requests.back().team_bytes += lookup_bytes;
    if (policy.traits().reorders && o.reorder_every > 0 && (i + 1) % o.reorder_every == 0) {
      IMPRESS_RETURN_IF_ERROR(st->ReorderNow().status());
    }
    if (!ReportProgress(o.progress, ++*step, total, out.system)) return Status::Cancelled("cancelled");
  }
  *step += uint64_t(n_all - n);
  IMPRESS_RETURN_IF_ERROR(AskFacts(pipe, r, w, o, result, &out, step, total));
  return out;
}

// First-token agreement with AS-like's requests, and the continuation match with the reference's
// fact answers (ReComp when it ran, else AS-like); then the summaries.
void CompareWithReferences(WorkloadBenchResult* result, int n_continue) {
  const WorkloadSystemResult* as_like = nullptr;
  const WorkloadSystemResult* full = nullptr;
  for (const WorkloadSystemResult& s : result->systems) {
    if (s.system == SystemName(SystemKind::kAsLike) && !as_like) as_like = &s;
    if (s.system == SystemName(SystemKind::kRecomp) && !full) full = &s;
  }
  if (!full) full = as_like;
  result->continuation_reference = full ? full->system : "";
  std::vector<int32_t> first;
  std::vector<std::vector<int32_t>> cont;
  if (as_like)
    for (const WorkloadRequestResult& x : as_like->requests) first.push_back(x.first_token);
  if (full)
    for (const WorkloadFactResult& f : full->facts) cont.push_back(f.tokens);
  for (WorkloadSystemResult& s : result->systems) {
    for (size_t i = 0; i < s.requests.size(); ++i)
      s.requests[i].agrees = i < first.size() ? (s.requests[i].first_token == first[i] ? 1 : 0) : -1;
    for (size_t i = 0; i < s.facts.size(); ++i)
      s.facts[i].continuation_match = i < cont.size() ? ContinuationMatch(s.facts[i].tokens, cont[i]) : -1;
    SummarizeWorkloadSystem(&s, n_continue);
  }
}

// Builds the documents (facts placed) and every prompt.
Status PreparePrompts(ModelContext& ctx, const WorkloadBenchOptions& o, Prompts* w, WorkloadBenchResult* result) {
  const Tokenizer& tok = ctx.tokenizer();
  IMPRESS_ASSIGN_OR_RETURN(
      std::vector<WorkloadDocument> docs,
      CutDocuments(o.sources, o.spec, [&](const std::string& t) { return int(tok.EncodeLiteral(t).size()); }));
  if (docs.empty()) return Status::InvalidArgument("workload: the texts given are too short for one document");
  if (int(docs.size()) < o.spec.n_docs)
    spdlog::warn("workload: the texts give {} documents of the {} asked for", docs.size(), o.spec.n_docs);
  result->facts = PlaceFacts(&docs, o.facts, o.fact_depths);
  result->n_docs = int(docs.size());
  result->requests = MakeRequests(o.spec, result->n_docs, int(o.questions.size()));
  auto build = [&](const WorkloadDocument& d, const std::string& question) -> Result<PromptTokens> {
    Conversation c;
    c.AddDocument(Document{d.name, d.name, d.text});
    PromptTokens p = c.Build(question, tok, ctx.chat_template());
    if (int64_t(p.tokens.size()) + o.n_continue > ctx.config().n_ctx_train)
      return Status::OutOfRange(fmt::format("workload: document {} does not fit the model's context ({} tokens)",
                                            d.name, ctx.config().n_ctx_train));
    return p;
  };
  for (const WorkloadDocument& d : docs) {
    IMPRESS_ASSIGN_OR_RETURN(PromptTokens p, build(d, o.questions[0]));
    result->doc_tokens += uint64_t(p.n_prefix);
    result->doc_names.push_back(d.name);
    w->docs.push_back(std::move(p));
  }
  for (const WorkloadRequest& q : result->requests) {
    IMPRESS_ASSIGN_OR_RETURN(PromptTokens p, build(docs[size_t(q.doc)], o.questions[size_t(q.question)]));
    w->requests.push_back(std::move(p));
  }
  for (const PlacedFact& f : result->facts) {
    IMPRESS_ASSIGN_OR_RETURN(PromptTokens p, build(docs[size_t(f.doc)], o.facts[size_t(f.fact)].question));
    w->facts.push_back(std::move(p));
  }
  result->kv_bytes = result->doc_tokens * KvBytesPerToken(ctx.config(), o.kv_encoding);
  result->device_bytes = uint64_t(double(result->kv_bytes) * o.device_fraction);
  result->host_bytes = uint64_t(double(result->kv_bytes) * o.host_fraction);
  return Status::Ok();
}

// The runs of a benchmark: AS-like first (the first-token reference), ReComp next, then the
// others; a sweep runs AS-like once, then its system once per value.
Result<std::vector<RunSpec>> PlanRuns(const WorkloadBenchOptions& o) {
  std::vector<SystemKind> systems = o.systems.empty() ? AllSystems() : o.systems;
  std::vector<RunSpec> runs;
  if (!o.sweep.name.empty()) {
    if (o.sweep.values.empty()) return Status::InvalidArgument("sweep " + o.sweep.name + ": no values");
    const SystemKind swept = o.systems.empty() ? SystemKind::kImpress : o.systems.front();
    if (swept != SystemKind::kAsLike) runs.push_back(BaseRun(SystemKind::kAsLike, o));
    for (double v : o.sweep.values) {
      RunSpec r = BaseRun(swept, o);
      IMPRESS_RETURN_IF_ERROR(ApplySweep(o.sweep.name, v, &r));
      runs.push_back(r);
    }
    return runs;
  }
  auto rank = [](SystemKind s) {
    const SystemPolicy& p = System(s);
    return p.loads_whole_layers() ? 0 : !p.reuses() ? 1 : 2;
  };
  std::stable_sort(systems.begin(), systems.end(), [&](SystemKind a, SystemKind b) { return rank(a) < rank(b); });
  for (SystemKind s : systems) runs.push_back(BaseRun(s, o));
  return runs;
}

}  // namespace

void SummarizeWorkloadSystem(WorkloadSystemResult* s, int n_continue) {
  std::vector<double> ttft;
  double dev = 0, host = 0, ssd = 0, team = 0, team_bytes = 0, bytes = 0, reads = 0, probe = 0, amp = 0, io = 0,
         sum_ttft = 0, agree = 0;
  int compared = 0;
  for (const WorkloadRequestResult& r : s->requests) {
    ttft.push_back(r.ttft_ms);
    sum_ttft += r.ttft_ms;
    dev += r.chunks_device;
    host += r.chunks_host;
    ssd += r.chunks_ssd;
    team += r.chunks_team;
    team_bytes += double(r.team_bytes);
    bytes += double(r.ssd_bytes);
    reads += r.ssd_reads;
    probe += double(r.probe_key_bytes);
    amp += r.read_amplification;
    io += r.io_wait_ms;
    if (r.agrees >= 0) {
      ++compared;
      agree += r.agrees;
    }
  }
  const double n = double(std::max<size_t>(1, s->requests.size()));
  s->mean_ttft_ms = sum_ttft / n;
  s->p50_ttft_ms = Percentile(ttft, 0.50);
  s->p99_ttft_ms = Percentile(ttft, 0.99);
  const double chunks = dev + host + ssd + team;
  s->hit_device = chunks > 0 ? dev / chunks : 0;
  s->hit_host = chunks > 0 ? host / chunks : 0;
  s->hit_ssd = chunks > 0 ? ssd / chunks : 0;
  s->hit_team = chunks > 0 ? team / chunks : 0;
  s->mean_team_bytes = team_bytes / n;
  s->mean_ssd_bytes = bytes / n;
  s->mean_ssd_reads = reads / n;
  s->mean_probe_key_bytes = probe / n;
  s->mean_read_amplification = amp / n;
  s->unhidden_io_share = sum_ttft > 0 ? io / sum_ttft : 0;
  TtftBreakdown& b = s->mean_breakdown;
  b = {};
  for (const WorkloadRequestResult& r : s->requests) {
    b.match_ms += r.breakdown.match_ms / n;
    b.probe_io_ms += r.breakdown.probe_io_ms / n;
    b.probe_compute_ms += r.breakdown.probe_compute_ms / n;
    b.kv_io_ms += r.breakdown.kv_io_ms / n;
    b.copy_ms += r.breakdown.copy_ms / n;
    b.compute_ms += r.breakdown.compute_ms / n;
    b.io_wait_ms += r.breakdown.io_wait_ms / n;
    b.other_ms += r.breakdown.other_ms / n;
  }
  s->first_token_agreement = compared > 0 ? agree / compared : -1;
  int right = 0, n_cont = 0;
  double cont = 0;
  for (const WorkloadFactResult& f : s->facts) {
    right += f.correct ? 1 : 0;
    if (f.continuation_match >= 0) {
      ++n_cont;
      cont += double(f.continuation_match) / double(std::max(1, n_continue));
    }
  }
  s->fact_accuracy = s->facts.empty() ? -1 : double(right) / double(s->facts.size());
  s->continuation_match = n_cont > 0 ? cont / n_cont : -1;
  SummarizeSpans(s);
}

const std::vector<std::string>& WorkloadSweepNames() {
  static const std::vector<std::string> names = {
      "alpha",         "keep",         "keep-mass",       "pool",          "pool-max",
      "probe-heads",   "probe-spread", "select-group",    "chunk-tokens",  "pool-follow",
      "dense-layers",  "head-max",     "device-fraction", "host-fraction", "select-budget-tokens",
      "predict-select"};
  return names;
}

Result<WorkloadBenchResult> RunWorkloadBenchmark(ModelContext& ctx, const WorkloadBenchOptions& o) {
  if (o.questions.empty()) return Status::InvalidArgument("workload: no questions");
  if (o.n_continue < 1) return Status::InvalidArgument("workload: n_continue must be at least 1");
  IMPRESS_ASSIGN_OR_RETURN(const std::vector<RunSpec> runs, PlanRuns(o));
  WorkloadBenchResult result;
  result.sweep = o.sweep.name;
  result.ingest_reused = true;  // until a run ingests
  Prompts w;
  IMPRESS_RETURN_IF_ERROR(PreparePrompts(ctx, o, &w, &result));

  Scratch scratch{fs::path(o.scratch_dir) / fmt::format("workload-bench-{}", ::getpid())};
  std::error_code ec;
  fs::remove_all(scratch.dir, ec);
  fs::create_directories(scratch.dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", scratch.dir.string(), ec.message()));
  const fs::path ingest_root = o.ingest_dir.empty() ? scratch.dir : fs::path(o.ingest_dir);

  uint64_t step = 0;
  const uint64_t total = uint64_t(runs.size() * (w.requests.size() + w.facts.size()));
  std::set<fs::path> published;
  for (const RunSpec& r : runs) {
    IMPRESS_ASSIGN_OR_RETURN(const fs::path base, EnsureIngested(ctx, w, r, o, ingest_root, &result));
    if (o.team.enabled() && published.insert(base).second) IMPRESS_RETURN_IF_ERROR(PublishIngested(ctx, w, r, o, base));
    const fs::path dir = scratch.dir / "run";
    IMPRESS_ASSIGN_OR_RETURN(WorkloadSystemResult s, RunSystem(ctx, r, w, o, base, dir, result, &step, total));
    s.sweep_value = r.sweep_value;
    fs::remove_all(dir, ec);
    result.systems.push_back(std::move(s));
  }
  CompareWithReferences(&result, o.n_continue);
  if (!o.sweep.name.empty()) return result;
  // Report in the usual order (ReComp first).
  std::vector<WorkloadSystemResult> ordered;
  for (SystemKind k : AllSystems())
    for (WorkloadSystemResult& s : result.systems)
      if (s.system == SystemName(k)) ordered.push_back(std::move(s));
  result.systems = std::move(ordered);
  return result;
}

}  // namespace impress
