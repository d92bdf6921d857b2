#include "bench/workload-bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "chat/conversation.h"
#include "pipeline/impress-pipeline.h"

namespace impress {

namespace fs = std::filesystem;

namespace {

const std::vector<SystemKind>& AllSystems() {
  static const std::vector<SystemKind> all = {SystemKind::kRecomp,   SystemKind::kAsLike,     SystemKind::kAsH2oLru,
                                              SystemKind::kAsH2oLfu, SystemKind::kImpressItf, SystemKind::kImpressItfRo,
                                              SystemKind::kImpress};
  return all;
}

bool Reorders(SystemKind s) { return s == SystemKind::kImpressItfRo || s == SystemKind::kImpress; }

int32_t Argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), std::max(0.0, std::ceil(q * double(v.size())) - 1)))];
}

// K and V of one token over all layers, as the store keeps them (fp16).
uint64_t KvBytesPerToken(const ModelConfig& c) { return uint64_t(c.n_layer) * 2 * c.n_head_kv * c.head_dim * 2; }

struct Scratch {
  fs::path dir;
  ~Scratch() {
    std::error_code e;
    fs::remove_all(dir, e);
  }
};

PipelineSettings SettingsFor(SystemKind s, const WorkloadBenchOptions& o) {
  PipelineSettings p;
  p.system = s;
  p.keep = o.keep;
  p.alpha = o.alpha;
  p.probe_heads = o.probe_heads;
  p.report_importance = true;  // the store's statistics drive LFU, score caching and reorder
  return p;
}

WorkloadRequestResult FromReport(const RequestReport& r, const WorkloadRequest& q, int32_t first_token) {
  WorkloadRequestResult x;
  x.doc = q.doc;
  x.follow_up = q.follow_up;
  x.n_prefix = r.n_prefix;
  x.n_matched = r.n_matched;
  x.ttft_ms = r.ttft_ms;
  x.io_wait_ms = r.breakdown.io_wait_ms;
  x.ssd_bytes = r.ssd_bytes_read;
  x.chunks_device = r.chunks_device;
  x.chunks_host = r.chunks_host;
  x.chunks_ssd = r.chunks_ssd;
  x.read_amplification = r.read_amplification();
  x.layers_passed = r.n_layers_passed;
  x.layers = int(r.layers.size());
  x.first_token = first_token;
  return x;
}

// Ingests every document into a store at `dir` (fast tiers off: all of it lands on the SSD).
Status Ingest(ModelContext& ctx, const std::vector<PromptTokens>& docs, const WorkloadBenchOptions& o,
              const std::string& dir, WorkloadBenchResult* result) {
  store::PrefixStoreOptions so = StoreOptionsFor(ctx.config(), o.probe_heads);
  so.dir = dir;
  so.device_bytes = 0;
  so.host_bytes = 0;
  so.reorder_interval = std::chrono::milliseconds(0);
  IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
  ImpressPipeline pipe(ctx, st.get());
  PipelineSettings s;
  s.system = SystemKind::kRecomp;
  s.report_importance = false;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const PromptTokens& p = docs[i];
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

// One system over the whole request sequence, from a fresh copy of the ingested store.
Result<WorkloadSystemResult> RunSystem(ModelContext& ctx, SystemKind sys, const std::vector<PromptTokens>& prompts,
                                       const WorkloadBenchOptions& o, const fs::path& base, const fs::path& dir,
                                       const std::vector<int32_t>& reference_first, WorkloadBenchResult* result,
                                       uint64_t* step, uint64_t total_steps) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::copy(base, dir, fs::copy_options::recursive, ec);
  if (ec) return Status::IOError(fmt::format("cannot copy the ingested store to {}: {}", dir.string(), ec.message()));
  store::PrefixStoreOptions so = StoreOptionsFor(ctx.config(), o.probe_heads);
  so.dir = dir.string();
  so.device_bytes = result->device_bytes;
  so.host_bytes = result->host_bytes;
  so.reorder_interval = std::chrono::milliseconds(0);
  IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
  ImpressPipeline pipe(ctx, st.get());
  WorkloadSystemResult out;
  out.system = SystemName(sys);
  const int n =
      sys == SystemKind::kRecomp ? std::min<int>(o.recomp_requests, int(prompts.size())) : int(prompts.size());
  const PipelineSettings settings = SettingsFor(sys, o);
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    const PromptTokens& p = prompts[size_t(i)];
    IMPRESS_ASSIGN_OR_RETURN(RequestReport r, pipe.Prefill({p.tokens, p.n_prefix}, settings, 0, &logits));
    IMPRESS_RETURN_IF_ERROR(pipe.ReleaseMatch());
    WorkloadRequestResult x = FromReport(r, result->requests[size_t(i)], Argmax(logits));
    if (!reference_first.empty()) x.agrees = x.first_token == reference_first[size_t(i)] ? 1 : 0;
    out.requests.push_back(x);
    if (Reorders(sys) && o.reorder_every > 0 && (i + 1) % o.reorder_every == 0) {
      IMPRESS_RETURN_IF_ERROR(st->ReorderNow().status());
    }
    if (!ReportProgress(o.progress, ++*step, total_steps, out.system)) return Status::Cancelled("cancelled");
  }
  *step += uint64_t(int(prompts.size()) - n);
  SummarizeWorkloadSystem(&out);
  return out;
}

}  // namespace

void SummarizeWorkloadSystem(WorkloadSystemResult* s) {
  std::vector<double> ttft;
  double dev = 0, host = 0, ssd = 0, bytes = 0, amp = 0, io = 0, sum_ttft = 0, agree = 0;
  int compared = 0;
  for (const WorkloadRequestResult& r : s->requests) {
    ttft.push_back(r.ttft_ms);
    sum_ttft += r.ttft_ms;
    dev += r.chunks_device;
    host += r.chunks_host;
    ssd += r.chunks_ssd;
    bytes += double(r.ssd_bytes);
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
  const double chunks = dev + host + ssd;
  s->hit_device = chunks > 0 ? dev / chunks : 0;
  s->hit_host = chunks > 0 ? host / chunks : 0;
  s->hit_ssd = chunks > 0 ? ssd / chunks : 0;
  s->mean_ssd_bytes = bytes / n;
  s->mean_read_amplification = amp / n;
  s->unhidden_io_share = sum_ttft > 0 ? io / sum_ttft : 0;
  s->first_token_agreement = compared > 0 ? agree / compared : -1;
}

Result<WorkloadBenchResult> RunWorkloadBenchmark(ModelContext& ctx, const WorkloadBenchOptions& o) {
  if (o.questions.empty()) return Status::InvalidArgument("workload: no questions");
  WorkloadBenchResult result;
  const Tokenizer& tok = ctx.tokenizer();
  IMPRESS_ASSIGN_OR_RETURN(
      std::vector<WorkloadDocument> docs,
      CutDocuments(o.sources, o.spec, [&](const std::string& t) { return int(tok.EncodeLiteral(t).size()); }));
  if (docs.empty()) return Status::InvalidArgument("workload: the texts given are too short for one document");
  if (int(docs.size()) < o.spec.n_docs)
    spdlog::warn("workload: the texts give {} documents of the {} asked for", docs.size(), o.spec.n_docs);
  result.n_docs = int(docs.size());
  result.requests = MakeRequests(o.spec, result.n_docs, int(o.questions.size()));

  // Prompts: each document alone (the ingest), and each request's document + question.
  std::vector<PromptTokens> doc_prompts, prompts;
  for (const WorkloadDocument& d : docs) {
    Conversation c;
    c.AddDocument(Document{d.name, d.name, d.text});
    doc_prompts.push_back(c.Build(o.questions[0], tok, ctx.chat_template()));
    result.doc_tokens += uint64_t(doc_prompts.back().n_prefix);
    result.doc_names.push_back(d.name);
  }
  for (const WorkloadRequest& q : result.requests) {
    Conversation c;
    const WorkloadDocument& d = docs[size_t(q.doc)];
    c.AddDocument(Document{d.name, d.name, d.text});
    prompts.push_back(c.Build(o.questions[size_t(q.question)], tok, ctx.chat_template()));
    if (int64_t(prompts.back().tokens.size()) > ctx.config().n_ctx_train)
      return Status::OutOfRange(fmt::format("workload: document {} does not fit the model's context ({} tokens)",
                                            d.name, ctx.config().n_ctx_train));
  }
  result.kv_bytes = result.doc_tokens * KvBytesPerToken(ctx.config());
  result.device_bytes = uint64_t(double(result.kv_bytes) * o.device_fraction);
  result.host_bytes = uint64_t(double(result.kv_bytes) * o.host_fraction);

  Scratch scratch{fs::path(o.scratch_dir) / fmt::format("workload-bench-{}", ::getpid())};
  std::error_code ec;
  fs::remove_all(scratch.dir, ec);
  fs::create_directories(scratch.dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", scratch.dir.string(), ec.message()));
  const fs::path base = scratch.dir / "ingested";
  IMPRESS_RETURN_IF_ERROR(Ingest(ctx, doc_prompts, o, base.string(), &result));

  // AS-like (full KV) first: its first tokens are the reference for the others' agreement.
  std::vector<SystemKind> systems = o.systems.empty() ? AllSystems() : o.systems;
  std::stable_partition(systems.begin(), systems.end(), [](SystemKind s) { return s == SystemKind::kAsLike; });
  uint64_t step = 0;
  const uint64_t total = uint64_t(systems.size() * prompts.size());
  std::vector<int32_t> reference;
  for (SystemKind sys : systems) {
    IMPRESS_ASSIGN_OR_RETURN(
        WorkloadSystemResult r,
        RunSystem(ctx, sys, prompts, o, base, scratch.dir / SystemName(sys), reference, &result, &step, total));
    if (sys == SystemKind::kAsLike)
      for (const WorkloadRequestResult& x : r.requests) reference.push_back(x.first_token);
    fs::remove_all(scratch.dir / SystemName(sys), ec);
    result.systems.push_back(std::move(r));
  }
  // Report in the usual order (ReComp first).
  std::vector<WorkloadSystemResult> ordered;
  for (SystemKind s : AllSystems())
    for (WorkloadSystemResult& r : result.systems)
      if (r.system == SystemName(s)) ordered.push_back(std::move(r));
  result.systems = std::move(ordered);
  return result;
}

}  // namespace impress
