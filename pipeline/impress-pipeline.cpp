#include "pipeline/impress-pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>

#include "pipeline/prefill-run.h"

namespace impress {

namespace {

// What Prefill refuses before touching any state but the released match.
Status CheckRequest(const ModelConfig& c, const PipelineRequest& req, const PipelineSettings& s, int max_new_tokens) {
  const int n_prompt = int(req.tokens.size());
  if (n_prompt == 0) return Status::InvalidArgument("empty prompt");
  if (req.n_prefix < 0 || req.n_prefix > n_prompt) return Status::InvalidArgument("n_prefix out of range");
  if (int64_t(n_prompt) + max_new_tokens > c.n_ctx_train) {
    return Status::OutOfRange(fmt::format(
        "the prompt is {} tokens and up to {} more are asked for, but {} holds {} tokens of context; attach less "
        "text or ask for fewer tokens",
        n_prompt, max_new_tokens, c.name, c.n_ctx_train));
  }
  for (int32_t t : req.tokens) {
    if (t < 0 || t >= c.n_vocab) return Status::InvalidArgument(fmt::format("token id {} is not in the vocabulary", t));
  }
  if (s.keep <= 0 || s.keep > 1) return Status::InvalidArgument(fmt::format("keep ratio {} is not in (0, 1]", s.keep));
  if (s.keep_mass < 0 || s.keep_mass > 1)
    return Status::InvalidArgument(fmt::format("keep mass {} is not in [0, 1]", s.keep_mass));
  if (s.keep_mass > 0 && (s.keep_min <= 0 || s.keep_min > s.keep_max || s.keep_max > 1))
    return Status::InvalidArgument(
        fmt::format("keep floor {} and cap {} are not 0 < floor <= cap <= 1", s.keep_min, s.keep_max));
  return Status::Ok();
}

}  // namespace

std::vector<int> ProbeQueryHeads(const ModelConfig& c, int probe_heads, bool spread) {
  const int n_head = std::max(1, c.n_head);
  const int p = std::clamp(probe_heads, 1, n_head);
  std::vector<int> heads(static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) heads[size_t(j)] = spread ? int(int64_t(j) * n_head / p) : j;
  return heads;
}

std::vector<int> ProbeKvHeads(const ModelConfig& c, int probe_heads, bool spread) {
  const int group = std::max(1, c.n_head / std::max(1, c.n_head_kv));
  std::vector<int> kv;
  for (int h : ProbeQueryHeads(c, probe_heads, spread))
    if (kv.empty() || kv.back() != h / group) kv.push_back(h / group);  // ascending heads: ascending groups
  return kv;
}

int ChunkTokensFor(const ModelConfig& c) {
  const int64_t k_bytes = int64_t(std::max(1, c.n_head_kv)) * std::max(1, c.head_dim) * int64_t(sizeof(f16_t));
  int tokens = 64;
  while (tokens < 1024 && 2 * tokens * k_bytes <= kChunkRegionTarget) tokens *= 2;
  return tokens;
}

store::PrefixStoreOptions StoreOptionsFor(const ModelConfig& c, int probe_heads, bool spread) {
  store::PrefixStoreOptions o;
  o.model_fingerprint = c.fingerprint;
  o.n_layer = c.n_layer;
  o.n_head_kv = c.n_head_kv;
  o.head_dim = c.head_dim;
  o.chunk_tokens = ChunkTokensFor(c);
  o.probe_kv_heads = ProbeKvHeads(c, probe_heads, spread);
  return o;
}

ImpressPipeline::ImpressPipeline(ModelContext& ctx, store::PrefixStore* store) : ctx_(ctx), store_(store) {}

ImpressPipeline::~ImpressPipeline() {
  if (store_thread_.joinable()) store_thread_.join();
  DiscardProbeSlots();  // no read may still be copying into their buffers
  if (store_ && handle_.id) (void)store_->Release(handle_);
  fwd_.reset();
  for (auto& p : allocs_) ctx_.backend().Free(p);
  if (keys_scratch_) ctx_.backend().Free(DevPtr<void>(keys_scratch_.raw()));
}

Status ImpressPipeline::EnsureBuffers(size_t rows) {
  const ModelConfig& c = ctx_.config();
  if (!fwd_) {
    IMPRESS_ASSIGN_OR_RETURN(fwd_, Forward::Create(ctx_.model(), ctx_.backend(), ForwardOptions{.max_batch = 512}));
  }
  if (rows <= buf_rows_) return Status::Ok();
  for (auto& p : allocs_) ctx_.backend().Free(p);
  allocs_.clear();
  k_buf_.assign(size_t(c.n_layer), {});
  v_buf_.assign(size_t(c.n_layer), {});
  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  for (int il = 0; il < c.n_layer; ++il) {
    IMPRESS_ASSIGN_OR_RETURN(k_buf_[size_t(il)], AllocArray<f16_t>(ctx_.backend(), rows * row));
    IMPRESS_ASSIGN_OR_RETURN(v_buf_[size_t(il)], AllocArray<f16_t>(ctx_.backend(), rows * row));
    allocs_.push_back(DevPtr<void>(k_buf_[size_t(il)].raw()));
    allocs_.push_back(DevPtr<void>(v_buf_[size_t(il)].raw()));
  }
  buf_rows_ = rows;
  return Status::Ok();
}

Result<RequestReport> ImpressPipeline::Prefill(const PipelineRequest& req, const PipelineSettings& s,
                                               int max_new_tokens, std::vector<float>* logits,
                                               const ProgressFn& progress, const std::atomic<bool>* cancel) {
  const auto t_start = PipelineClock::now();
  if (store_thread_.joinable()) store_thread_.join();
  if (store_ && handle_.id) IMPRESS_RETURN_IF_ERROR(store_->Release(handle_));
  handle_ = {};
  IMPRESS_RETURN_IF_ERROR(CheckRequest(ctx_.config(), req, s, max_new_tokens));
  // A stored chunk that fails its checksum costs recomputation, never the answer: the store
  // drops it and truncates the prefix there once this request's match is released, so the next
  // attempt matches less and computes the rest. Should the same prefix fail again (another
  // request still holds it), the last attempt reuses nothing.
  constexpr int kAttempts = 3;
  int first_matched = -1;
  for (int attempt = 1;; ++attempt) {
    Result<RequestReport> r =
        PrefillOnce(req, s, max_new_tokens, logits, progress, cancel, t_start, /*allow_reuse=*/attempt < kAttempts);
    if (first_matched < 0) first_matched = n_matched_;
    if (r.ok()) {
      r->n_recomputed = std::max(0, first_matched - r->n_matched);
      return r;
    }
    DrainPrefetches();
    // A prefix read from the team tier that failed (network, evicted key, bad value): the store
    // no longer offers it, the next attempt uses the local tiers or computes.
    const bool remote = handle_.remote;
    if ((r.status().code() != Status::Code::kCorruption && !remote) || n_matched_ == 0 || attempt == kAttempts)
      return r.status();
    if (remote) spdlog::warn("reading the team tier's KV failed ({}); recomputing", r.status().ToString());
    else
      spdlog::warn("stored KV of the matched prefix failed its checksum ({}); the store dropped it, recomputing",
                   r.status().ToString());
    IMPRESS_RETURN_IF_ERROR(ReleaseMatch());
  }
}

// Waits for the prefetches an abandoned prefill left in flight (their buffers belong to the store
// until waited), discarding what they read.
void ImpressPipeline::DrainPrefetches() {
  for (auto& t : prefetch_) {
    if (t && store_) (void)store_->Wait(*t);
    t.reset();
  }
  DiscardProbeSlots();
  if (streamed_ && store_) (void)store_->WaitInto(streamed_->ticket, streamed_->k, streamed_->v);
  streamed_.reset();
  for (auto& t : kv_prefetch_) {
    if (t) DiscardPrefetch(*t);
    t.reset();
  }
}

void ImpressPipeline::DiscardPrefetch(const KvPrefetch& pf) {
  if (!store_) return;
  if (pf.into_k) (void)store_->WaitInto(pf.ticket, pf.into_k, pf.into_v);
  else (void)store_->Wait(pf.ticket);
}

Result<RequestReport> ImpressPipeline::PrefillOnce(const PipelineRequest& req, const PipelineSettings& s,
                                                   int max_new_tokens, std::vector<float>* logits,
                                                   const ProgressFn& progress, const std::atomic<bool>* cancel,
                                                   PipelineClock::time_point t_start, bool allow_reuse) {
  const ModelConfig& c = ctx_.config();
  const int n_prompt = int(req.tokens.size());

  RequestReport report;
  const SystemPolicy& sys = System(s.system);
  Run run{.s = s, .sys = sys, .report = report, .reuse = allow_reuse && store_ != nullptr && sys.reuses(), .sw = {}};
  TtftBreakdown& bd = report.breakdown;
  BeginRequest(req, run);
  run.sw.Lap(&bd.match_ms);
  // What this prefill's reads bring enters the memory tiers after its first token (bounded: see
  // PrefixStore::HoldAdmissions), so admission's copies and page faults do not take its cores.
  struct AdmissionHold {
    store::PrefixStore* st;
    explicit AdmissionHold(store::PrefixStore* s) : st(s) {
      if (st) st->HoldAdmissions();
    }
    ~AdmissionHold() {
      if (st) st->ReleaseAdmissions();
    }
    AdmissionHold(const AdmissionHold&) = delete;
    AdmissionHold& operator=(const AdmissionHold&) = delete;
  } hold(run.reuse && n_matched_ > 0 ? store_ : nullptr);

  IMPRESS_RETURN_IF_ERROR(EnsureBuffers(size_t(n_prompt + max_new_tokens)));
  run.sw.Lap(&bd.other_ms);

  const int n_new = report.n_new;
  const int ubatch = std::clamp(s.ubatch, 1, fwd_->max_batch());
  // With write_order, a batch starts where the question does (new-token index write_from_): the
  // question's attention over what precedes it gives the order the new tokens are stored in.
  write_from_ = std::clamp(req.n_prefix - n_matched_, 0, n_new);
  n_new_total_ = n_new;
  write_imp_.assign(store_ && s.write_order ? size_t(c.n_layer) : 0, {});
  write_order_ = {s.sinks, std::max(0, req.n_prefix - s.recent), req.n_prefix, s.pool, s.pool_max, s.pool_follow};
  for (int b = 0, nb = 0; b < n_new; b += nb) {
    nb = std::min(ubatch, n_new - b);
    if (!write_imp_.empty() && b < write_from_) nb = std::min(nb, write_from_ - b);
    IMPRESS_RETURN_IF_ERROR(PrefillBatch(run, req.tokens, b, nb));
    n_new_done_ = b + nb;
    if (cancel && cancel->load()) return Status::Cancelled("prefill stopped");
    if (!ReportProgress(progress, uint64_t(b + nb), uint64_t(n_new), "prefill")) {
      return Status::Cancelled("prefill stopped");
    }
    run.sw.Lap(&bd.other_ms);
    if (b + nb == n_new) {
      logits->resize(size_t(c.n_vocab));
      const int last = nb - 1;
      IMPRESS_RETURN_IF_ERROR(fwd_->Logits(std::span<const int>(&last, 1), logits->data()));
      run.sw.Lap(&bd.compute_ms);
    }
  }
  report.ttft_ms = ElapsedMs(t_start, PipelineClock::now());
  bd.other_ms += report.ttft_ms - bd.Sum();  // start-up before the stopwatch and rounding
  FinishRequest(run);
  return report;
}

void ImpressPipeline::BeginRequest(const PipelineRequest& req, Run& run) {
  const ModelConfig& c = ctx_.config();
  const PipelineSettings& s = run.s;
  RequestReport& report = run.report;
  const int n_prompt = int(req.tokens.size());
  report.system = s.system;
  report.n_prompt = n_prompt;
  report.n_prefix = req.n_prefix;
  report.keep = s.keep;
  report.select_budget = GroupBudgetName(s.select_budget);
  report.alpha = s.alpha;
  report.probe_heads = s.probe_heads;

  n_matched_ = 0;
  if (run.reuse) {
    store_->SetPolicy(run.sys.traits().cache);
    handle_ = store_->Match(req.tokens.subspan(0, size_t(req.n_prefix)));
    // At least one token must be computed to produce logits.
    n_matched_ = int(std::min<uint64_t>(handle_.n_matched, uint64_t(n_prompt - 1)));
  }
  report.n_matched = n_matched_;
  report.team_remote = handle_.remote && n_matched_ > 0;
  report.n_new = n_prompt - n_matched_;
  seq_.assign(req.tokens.begin(), req.tokens.end());
  n_new_done_ = 0;
  n_sel_.assign(size_t(c.n_layer), 0);
  selected_.assign(size_t(c.n_layer), {});
  selected_scores_.assign(size_t(c.n_layer), {});
  prefetch_.assign(size_t(c.n_layer), std::nullopt);
  prefetch_issued_.assign(size_t(c.n_layer), 0);
  DiscardProbeSlots();
  pending_predict_.reset();
  for (auto& t : kv_prefetch_)  // none survive a finished request; never leave a read unwaited
    if (t) DiscardPrefetch(*t);
  kv_prefetch_.assign(size_t(c.n_layer), std::nullopt);
  report.layers.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) report.layers[size_t(il)].il = il;
  if (s.record_importance && n_matched_ > 0) {
    report.importance.assign(size_t(c.n_layer) * n_matched_, 0.0f);
    report.selected.assign(size_t(c.n_layer) * n_matched_, 0);
  }
}

// One forward batch of new tokens [b, b + nb) (counted from the end of the match) through every
// layer. The first batch also selects and loads each layer's prefix KV, right after the layer's
// queries exist, while the next layer's reads are in flight.
Status ImpressPipeline::PrefillBatch(Run& run, std::span<const int32_t> tokens, int b, int nb) {
  const ModelConfig& c = ctx_.config();
  TtftBreakdown& bd = run.report.breakdown;
  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  const bool first = b == 0;
  const bool record_order = !write_imp_.empty() && b >= write_from_;
  std::vector<int32_t> positions(static_cast<size_t>(nb));
  std::iota(positions.begin(), positions.end(), n_matched_ + b);
  IMPRESS_RETURN_IF_ERROR(fwd_->Begin(tokens.subspan(size_t(n_matched_ + b), size_t(nb)), positions));
  ctx_.backend().Synchronize();
  run.sw.Lap(&bd.compute_ms);
  // Reads that do not depend on the queries go one layer ahead, two with predicted reads (the
  // prediction of layer l + 1 scores its probe keys during layer l).
  const int ahead = run.s.predict_next || run.s.predict_select ? 2 : 1;
  if (first && run.s.overlap)
    for (int il = 0; il < ahead; ++il) IMPRESS_RETURN_IF_ERROR(PrefetchLayer(run, il));
  for (int il = 0; il < c.n_layer; ++il) {
    if (first && run.s.overlap) IMPRESS_RETURN_IF_ERROR(PrefetchLayer(run, il + ahead));
    IMPRESS_RETURN_IF_ERROR(fwd_->ComputeQKV(il));
    ctx_.backend().Synchronize();
    run.sw.Lap(&bd.compute_ms);
    if (first && n_matched_ > 0) {
      IMPRESS_RETURN_IF_ERROR(SelectLayer(run, il).WithContext(fmt::format("layer {}", il)));
      run.sw.Lap(&bd.other_ms);
    }
    const int n_sel = n_sel_[size_t(il)];
    const bool streamed = streamed_.has_value();
    const PrefixKV prefix{.n = n_sel + b,
                          .k = DevPtr<const f16_t>(k_buf_[size_t(il)].raw()),
                          .v = DevPtr<const f16_t>(v_buf_[size_t(il)].raw()),
                          .positions = {},
                          .arrivals = streamed ? &arrivals_ : nullptr};
    const Status attended = record_order ? AttendRecordingImportance(il, prefix, n_sel) : fwd_->Attend(il, prefix);
    // A read that failed says why first (a bad chunk: the retry recomputes it), then the attention.
    if (streamed) IMPRESS_RETURN_IF_ERROR(FinishStreamedRead(run, il));
    IMPRESS_RETURN_IF_ERROR(attended);
    IMPRESS_RETURN_IF_ERROR(
        fwd_->ExportKV(il, k_buf_[size_t(il)] + size_t(n_sel + b) * row, v_buf_[size_t(il)] + size_t(n_sel + b) * row));
    ctx_.backend().Synchronize();
    run.sw.Lap(&bd.compute_ms);
  }
  return Status::Ok();
}

// Attention of layer il with every head's H2O importance over prefix + new columns; each head's
// column sums over the new tokens (after the n_cols_before selected prefix rows) add to
// write_imp_[il] (n_head x the request's new tokens, row-major).
Status ImpressPipeline::AttendRecordingImportance(int il, const PrefixKV& prefix, int n_cols_before) {
  const ModelConfig& c = ctx_.config();
  const int ld = prefix.n + fwd_->n_new();
  const int n_cols = ld - n_cols_before;  // the request's new tokens so far
  const size_t n_all = size_t(n_new_total_);
  std::vector<int> heads(static_cast<size_t>(c.n_head));
  std::iota(heads.begin(), heads.end(), 0);
  write_scratch_.resize(size_t(c.n_head) * size_t(ld));
  const ImportanceRequest req{
      .heads = heads, .include_new = true, .out = write_scratch_.data(), .first_col = n_cols_before};
  IMPRESS_RETURN_IF_ERROR(fwd_->Attend(il, prefix, &req));
  std::vector<float>& acc = write_imp_[size_t(il)];
  acc.resize(size_t(c.n_head) * n_all, 0.0f);
  for (int h = 0; h < c.n_head; ++h) {
    const float* row = write_scratch_.data() + size_t(h) * ld + n_cols_before;
    for (int t = 0; t < n_cols; ++t) acc[size_t(h) * n_all + size_t(t)] += row[t];
  }
  return Status::Ok();
}

void ImpressPipeline::FinishRequest(Run& run) {
  RequestReport& report = run.report;
  // Reads ahead no layer took (a failed prediction's keys where the layer's own probe passed):
  // waited now, after the first token, and counted with their layer.
  for (size_t il = 0; il < prefetch_.size(); ++il) {
    if (std::optional<store::ReadTicket> t = TakePrefetch(int(il))) {
      Result<store::ReadResult> r = store_->Wait(*t);
      if (!r.ok()) continue;  // nothing of the answer came from it
      NoteRead(run, report.layers[il], r->stats);
      report.layers[il].key_bytes += uint64_t(r->k.size()) * sizeof(f16_t);
    }
  }
  for (const LayerReport& lr : report.layers) {
    report.ssd_bytes_read += lr.ssd_bytes;
    report.ssd_reads += lr.ssd_reads;
    report.chunks_device += lr.chunks_device;
    report.chunks_host += lr.chunks_host;
    report.chunks_ssd += lr.chunks_ssd;
    report.chunks_team += lr.chunks_team;
    report.n_layers_passed += lr.passed ? 1 : 0;
  }
  std::sort(run.read_spans.begin(), run.read_spans.end());
  PipelineClock::time_point covered{};  // the union's end so far
  for (auto [a, b] : run.read_spans) {
    a = std::max(a, covered);
    if (b > a) report.read_busy_ms += ElapsedMs(a, b);
    covered = std::max(covered, b);
  }

  // Off the TTFT path: what was important feeds reorder and score-based caching.
  if (run.reuse && n_matched_ > 0 && run.s.report_importance) {
    for (int il = 0; il < ctx_.config().n_layer; ++il) {
      Status st = store_->ReportImportance(handle_, il, selected_[size_t(il)], selected_scores_[size_t(il)]);
      if (!st.ok()) spdlog::warn("importance report for layer {} failed: {}", il, st.ToString());
    }
  }
}

Status ImpressPipeline::Decode(int32_t token, std::vector<float>* logits) {
  const ModelConfig& c = ctx_.config();
  if (!fwd_ || seq_.empty()) return Status::InvalidArgument("Decode before Prefill");
  if (token < 0 || token >= c.n_vocab) return Status::InvalidArgument(fmt::format("token id {} out of range", token));
  int max_sel = 0;
  for (int n : n_sel_) max_sel = std::max(max_sel, n);
  if (size_t(max_sel + n_new_done_ + 1) > buf_rows_ || int(seq_.size()) + 1 > c.n_ctx_train) {
    return Status::OutOfRange("the context is full");
  }
  const int32_t pos = int32_t(seq_.size());
  IMPRESS_RETURN_IF_ERROR(fwd_->Begin(std::span<const int32_t>(&token, 1), std::span<const int32_t>(&pos, 1)));
  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  for (int il = 0; il < c.n_layer; ++il) {
    IMPRESS_RETURN_IF_ERROR(fwd_->ComputeQKV(il));
    const int n_prev = n_sel_[size_t(il)] + n_new_done_;
    IMPRESS_RETURN_IF_ERROR(fwd_->Attend(il, PrefixKV{.n = n_prev,
                                                      .k = DevPtr<const f16_t>(k_buf_[size_t(il)].raw()),
                                                      .v = DevPtr<const f16_t>(v_buf_[size_t(il)].raw()),
                                                      .positions = {}}));
    IMPRESS_RETURN_IF_ERROR(
        fwd_->ExportKV(il, k_buf_[size_t(il)] + size_t(n_prev) * row, v_buf_[size_t(il)] + size_t(n_prev) * row));
  }
  logits->resize(size_t(c.n_vocab));
  const int zero = 0;
  IMPRESS_RETURN_IF_ERROR(fwd_->Logits(std::span<const int>(&zero, 1), logits->data()));
  seq_.push_back(token);
  ++n_new_done_;
  return Status::Ok();
}

void ImpressPipeline::StoreAsync(size_t n_tokens, store::PrefixStore* into, const store::InsertOptions& io) {
  if (store_thread_.joinable()) store_thread_.join();
  store_result_ = uint64_t{0};
  if (!into) into = store_;
  if (!into) return;
  // KV computed while the model file changed on disk must never be reused (forward.h, Logits).
  if (Status files = CheckModelFiles(ctx_.model()); !files.ok()) {
    store_result_ = files;
    return;
  }
  const ModelConfig& c = ctx_.config();
  const size_t n_total = n_tokens == 0 ? seq_.size() : std::min(n_tokens, seq_.size());
  if (n_total <= size_t(n_matched_)) return;
  const size_t count = n_total - size_t(n_matched_);
  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  // Copy out now (the buffers are reused by the next request); write in the background.
  auto k_host = std::make_shared<std::vector<std::vector<f16_t>>>(size_t(c.n_layer));
  auto v_host = std::make_shared<std::vector<std::vector<f16_t>>>(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    auto& kh = (*k_host)[size_t(il)];
    auto& vh = (*v_host)[size_t(il)];
    kh.resize(count * row);
    vh.resize(count * row);
    const size_t first = size_t(n_sel_[size_t(il)]) * row;
    ctx_.backend().CopyToHost(kh.data(), DevPtr<const void>(k_buf_[size_t(il)].raw() + first),
                              count * row * sizeof(f16_t));
    ctx_.backend().CopyToHost(vh.data(), DevPtr<const void>(v_buf_[size_t(il)].raw() + first),
                              count * row * sizeof(f16_t));
  }
  // The write order: the question's attention over the prompt's new tokens, summed normalised over
  // heads; the tokens every later request keeps (attention sinks, the recent window before the
  // question) first; decoded tokens last. Empty when not recorded.
  auto imp = std::make_shared<std::vector<std::vector<float>>>();
  if (write_imp_.size() == size_t(c.n_layer) && !write_imp_[0].empty()) {
    const int n_all = n_new_total_;
    imp->assign(size_t(c.n_layer), std::vector<float>(count, -1.0f));
    for (int il = 0; il < c.n_layer; ++il) {
      std::vector<float> sum = SumNormalisedImportance(write_imp_[size_t(il)], c.n_head, n_all);
      if (write_order_.pool > 1) {
        // Pooled as the selection pools, so each span a question keeps lies in neighbouring slots.
        std::vector<float> pooled;
        PoolScoresInto(sum, write_order_.pool, write_order_.pool_max, &pooled, write_order_.pool_follow);
        sum.swap(pooled);
      }
      std::vector<float>& out = (*imp)[size_t(il)];
      std::copy_n(sum.begin(), std::min(sum.size(), count), out.begin());
      for (size_t t = 0; t < count; ++t) {
        const int pos = n_matched_ + int(t);
        if (pos < write_order_.sinks || (pos >= write_order_.recent_begin && pos < write_order_.recent_end))
          out[t] = 2.0f * c.n_head;
      }
    }
  }
  auto tokens = std::make_shared<std::vector<int32_t>>(seq_.begin(), seq_.begin() + std::ptrdiff_t(n_total));
  const uint64_t start = uint64_t(n_matched_);
  store::PrefixStore* st = into;
  store_thread_ = std::thread([this, st, k_host, v_host, imp, tokens, start, io]() {
    std::vector<store::LayerKV> layers(k_host->size());
    for (size_t il = 0; il < layers.size(); ++il)
      layers[il] = {(*k_host)[il].data(), (*v_host)[il].data(), imp->empty() ? nullptr : (*imp)[il].data()};
    auto r = st->Insert(*tokens, start, layers, io);
    if (!r.ok()) {
      spdlog::warn("storing {} new tokens of KV failed: {}", tokens->size() - start, r.status().ToString());
      store_result_ = r.status();
    } else {
      store_result_ = r->n_written;
    }
  });
}

Result<uint64_t> ImpressPipeline::WaitForStore() {
  if (store_thread_.joinable()) store_thread_.join();
  return store_result_;
}

Status ImpressPipeline::ReleaseMatch() {
  if (store_thread_.joinable()) store_thread_.join();
  Status st = Status::Ok();
  if (store_ && handle_.id) st = store_->Release(handle_);
  handle_ = {};
  return st;
}

}  // namespace impress
