#include "pipeline/impress-pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace impress {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

bool UsesProbe(SystemKind s) {
  return s == SystemKind::kImpress || s == SystemKind::kImpressItf || s == SystemKind::kImpressItfRo;
}
bool UsesH2o(SystemKind s) { return s == SystemKind::kAsH2oLru || s == SystemKind::kAsH2oLfu; }

store::PolicyKind PolicyFor(SystemKind s) {
  switch (s) {
    case SystemKind::kImpress: return store::PolicyKind::kImpress;
    case SystemKind::kAsH2oLfu:
    case SystemKind::kImpressItf:
    case SystemKind::kImpressItfRo: return store::PolicyKind::kLfu;
    default: return store::PolicyKind::kLru;
  }
}

// Accumulates wall time into buckets: each Lap charges the time since the previous one.
class Stopwatch {
 public:
  Stopwatch() : last_(Clock::now()) {}
  double Lap(double* bucket) {
    const auto now = Clock::now();
    const double ms = Ms(last_, now);
    if (bucket) *bucket += ms;
    last_ = now;
    return ms;
  }

 private:
  Clock::time_point last_;
};

}  // namespace

const char* SystemName(SystemKind s) {
  switch (s) {
    case SystemKind::kRecomp: return "recomp";
    case SystemKind::kAsLike: return "as";
    case SystemKind::kAsH2oLru: return "as-h2o-lru";
    case SystemKind::kAsH2oLfu: return "as-h2o-lfu";
    case SystemKind::kImpressItf: return "impress-itf";
    case SystemKind::kImpressItfRo: return "impress-itf-ro";
    case SystemKind::kImpress: return "impress";
  }
  return "?";
}

bool ParseSystem(const std::string& name, SystemKind* out) {
  for (SystemKind s : {SystemKind::kRecomp, SystemKind::kAsLike, SystemKind::kAsH2oLru, SystemKind::kAsH2oLfu,
                       SystemKind::kImpressItf, SystemKind::kImpressItfRo, SystemKind::kImpress}) {
    if (name == SystemName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

float EffectiveKeep(int n, float keep) {
  constexpr int kShortPrefix = 256;
  return n < kShortPrefix ? std::max(keep, 0.5f) : keep;
}

double JaccardThreshold(double p, double alpha) {
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  return std::pow(p / (2.0 - p), alpha);
}

double MeanPairwiseJaccard(const std::vector<std::vector<int>>& sets, int n) {
  if (sets.size() < 2) return 1.0;
  std::vector<uint8_t> mark(size_t(std::max(n, 0)));
  double sum = 0;
  int pairs = 0;
  for (size_t a = 0; a < sets.size(); ++a) {
    std::fill(mark.begin(), mark.end(), 0);
    for (int i : sets[a]) mark[size_t(i)] = 1;
    for (size_t b = a + 1; b < sets.size(); ++b) {
      size_t inter = 0;
      for (int i : sets[b]) inter += mark[size_t(i)];
      const size_t uni = sets[a].size() + sets[b].size() - inter;
      sum += uni ? double(inter) / double(uni) : 1.0;
      ++pairs;
    }
  }
  return sum / pairs;
}

std::vector<int> TopK(std::span<const float> values, int k) {
  const int n = int(values.size());
  k = std::clamp(k, 0, n);
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int a, int b) { return values[size_t(a)] > values[size_t(b)] || (values[size_t(a)] == values[size_t(b)] && a < b); };
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int> ProbeKvHeads(const ModelConfig& c, int probe_heads) {
  const int group = std::max(1, c.n_head / std::max(1, c.n_head_kv));
  std::vector<int> heads;
  for (int h = 0; h < std::min(probe_heads, c.n_head); ++h) {
    const int g = h / group;
    if (heads.empty() || heads.back() != g) heads.push_back(g);
  }
  return heads;
}

store::PrefixStoreOptions StoreOptionsFor(const ModelConfig& c, int probe_heads) {
  store::PrefixStoreOptions o;
  o.model_fingerprint = c.fingerprint;
  o.n_layer = c.n_layer;
  o.n_head_kv = c.n_head_kv;
  o.head_dim = c.head_dim;
  o.probe_kv_heads = ProbeKvHeads(c, probe_heads);
  return o;
}

namespace {

// True when the store keeps probe keys for every KV head the first `probe_heads` query heads use;
// otherwise the probe reads all keys (e.g. more probe heads than the store was opened for).
bool ProbeKeysCover(const ModelConfig& c, int probe_heads, const std::vector<int>& stored) {
  const std::vector<int> needed = ProbeKvHeads(c, std::clamp(probe_heads, 1, c.n_head));
  return std::all_of(needed.begin(), needed.end(),
                     [&](int g) { return std::find(stored.begin(), stored.end(), g) != stored.end(); });
}

// Per-head importance rows (n_heads x n) -> sum over heads of each row normalised to 1.
std::vector<float> SumNormalised(const std::vector<float>& imp, int n_heads, int n) {
  std::vector<float> sum(size_t(n), 0.0f);
  for (int h = 0; h < n_heads; ++h) {
    const float* row = imp.data() + size_t(h) * n;
    double total = 0;
    for (int i = 0; i < n; ++i) total += row[i];
    const float inv = total > 0 ? float(1.0 / total) : 0.0f;
    for (int i = 0; i < n; ++i) sum[size_t(i)] += row[i] * inv;
  }
  return sum;
}

// The selected set: sinks and the recent window, then the best of the rest by `score`, k in all.
std::vector<uint32_t> SelectTokens(std::span<const float> score, int k, int sinks, int recent) {
  const int n = int(score.size());
  std::vector<uint8_t> take(size_t(n), 0);
  int taken = 0;
  auto force = [&](int i) {
    if (taken < k && !take[size_t(i)]) {
      take[size_t(i)] = 1;
      ++taken;
    }
  };
  for (int i = 0; i < std::min(sinks, n); ++i) force(i);
  for (int i = n - 1; i >= std::max(0, n - recent); --i) force(i);
  if (taken < k) {
    std::vector<int> rest;
    rest.reserve(size_t(n));
    for (int i = 0; i < n; ++i) {
      if (!take[size_t(i)]) rest.push_back(i);
    }
    const int want = std::min<int>(k - taken, int(rest.size()));
    auto better = [&](int a, int b) { return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b); };
    std::nth_element(rest.begin(), rest.begin() + want, rest.end(), better);
    for (int j = 0; j < want; ++j) take[size_t(rest[size_t(j)])] = 1;
  }
  std::vector<uint32_t> out;
  out.reserve(size_t(k));
  for (int i = 0; i < n; ++i) {
    if (take[size_t(i)]) out.push_back(uint32_t(i));
  }
  return out;
}

}  // namespace

ImpressPipeline::ImpressPipeline(ModelContext& ctx, store::PrefixStore* store) : ctx_(ctx), store_(store) {}

ImpressPipeline::~ImpressPipeline() {
  if (store_thread_.joinable()) store_thread_.join();
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

Status ImpressPipeline::RunLayerSelection(int il, const PipelineSettings& s, RequestReport& report, LayerReport& lr,
                                          std::vector<float>& importance_row, std::vector<uint8_t>& selected_row) {
  const ModelConfig& c = ctx_.config();
  Backend& be = ctx_.backend();
  const int n = n_matched_;
  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  const size_t row_bytes = row * sizeof(f16_t);
  const int k = std::clamp(int(std::ceil(double(EffectiveKeep(n, s.keep)) * n)), 1, n);
  lr.n = n;

  // Everything here is charged to report.breakdown by the caller's stopwatch through these.
  TtftBreakdown& bd = report.breakdown;
  Stopwatch sw;
  auto add_stats = [&](const store::ReadStats& st) {
    lr.ssd_bytes += st.ssd_bytes;
    lr.chunks_device += st.chunks_device;
    lr.chunks_host += st.chunks_host;
    lr.chunks_ssd += st.chunks_ssd;
    report.useful_bytes_read += st.useful_bytes;
  };
  auto wait = [&](store::ReadTicket t, double* bucket) -> Result<store::ReadResult> {
    auto r = store_->Wait(t);
    const double ms = sw.Lap(bucket);
    lr.io_wait_ms += ms;
    bd.io_wait_ms += ms;
    if (r.ok()) add_stats(r->stats);
    return r;
  };
  auto take_prefetch = [&]() -> std::optional<store::ReadTicket> {
    auto t = prefetch_[size_t(il)];
    prefetch_[size_t(il)].reset();
    return t;
  };
  // Copies `n_rows` rows of host fp16 into a device buffer.
  auto upload = [&](DevPtr<f16_t> dst, const std::vector<f16_t>& src, size_t n_rows) {
    be.CopyToDevice(DevPtr<void>(dst.raw()), src.data(), n_rows * row_bytes);
  };
  auto ensure_scratch = [&](size_t rows) -> Status {
    if (rows <= keys_scratch_rows_) return Status::Ok();
    if (keys_scratch_) be.Free(DevPtr<void>(keys_scratch_.raw()));
    IMPRESS_ASSIGN_OR_RETURN(keys_scratch_, AllocArray<f16_t>(be, rows * row));
    keys_scratch_rows_ = rows;
    return Status::Ok();
  };

  std::vector<uint32_t> selected;
  std::vector<float> score;  // summed normalised importance over scored heads (n)

  if (s.system == SystemKind::kAsLike) {
    auto t = take_prefetch();
    if (!t) {
      std::vector<uint32_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0u);
      IMPRESS_ASSIGN_OR_RETURN(t, store_->SubmitReadKV(handle_, il, all, true, true));
    }
    IMPRESS_ASSIGN_OR_RETURN(store::ReadResult kv, wait(*t, &bd.kv_io_ms));
    lr.key_bytes += uint64_t(n) * row_bytes;
    lr.value_bytes += uint64_t(n) * row_bytes;
    upload(k_buf_[size_t(il)], kv.k, size_t(n));
    upload(v_buf_[size_t(il)], kv.v, size_t(n));
    be.Synchronize();
    sw.Lap(&bd.copy_ms);
    lr.k = n;
    n_sel_[size_t(il)] = n;
    selected.resize(size_t(n));
    std::iota(selected.begin(), selected.end(), 0u);
  } else {
    bool need_fallback = UsesH2o(s.system);
    std::vector<float> probe_imp;
    std::vector<int> probe_q;
    if (UsesProbe(s.system)) {
      lr.probed = true;
      const int P = std::clamp(s.probe_heads, 1, c.n_head);
      for (int h = 0; h < P; ++h) probe_q.push_back(h);
      const std::vector<int>& stored = store_->options().probe_kv_heads;
      const bool probe_store_covers = ProbeKeysCover(c, P, stored);
      std::vector<int> kv_heads;
      store::ReadResult keys;
      auto t = take_prefetch();
      if (probe_store_covers) {
        if (!t) {
          IMPRESS_ASSIGN_OR_RETURN(t, store_->SubmitProbeKeys(handle_, il));
        }
        IMPRESS_ASSIGN_OR_RETURN(keys, wait(*t, &bd.probe_io_ms));
        kv_heads = stored;
      } else {  // more probe heads than the store keeps probe keys for: read all keys
        if (!t) {
          IMPRESS_ASSIGN_OR_RETURN(t, store_->SubmitReadAllKeys(handle_, il));
        }
        IMPRESS_ASSIGN_OR_RETURN(keys, wait(*t, &bd.probe_io_ms));
        kv_heads.resize(size_t(c.n_head_kv));
        std::iota(kv_heads.begin(), kv_heads.end(), 0);
      }
      lr.key_bytes += uint64_t(keys.k.size()) * sizeof(f16_t);
      IMPRESS_RETURN_IF_ERROR(ensure_scratch(size_t(n)));
      be.CopyToDevice(DevPtr<void>(keys_scratch_.raw()), keys.k.data(), keys.k.size() * sizeof(f16_t));
      be.Synchronize();
      sw.Lap(&bd.copy_ms);

      probe_imp.assign(size_t(P) * n, 0.0f);
      IMPRESS_RETURN_IF_ERROR(fwd_->ScoreKeys(
          il, PrefixKeys{.n = n, .k = DevPtr<const f16_t>(keys_scratch_.raw()), .kv_heads = kv_heads}, probe_q,
          probe_imp.data()));
      std::vector<std::vector<int>> sets;
      for (int h = 0; h < P; ++h) sets.push_back(TopK({probe_imp.data() + size_t(h) * n, size_t(n)}, k));
      lr.s = MeanPairwiseJaccard(sets, n);
      lr.t = JaccardThreshold(double(k) / n, s.alpha);
      lr.passed = lr.s >= lr.t;
      need_fallback = !lr.passed;
      if (lr.passed) {
        score = SumNormalised(probe_imp, P, n);
        selected = SelectTokens(score, k, s.sinks, s.recent);
      }
      sw.Lap(&bd.probe_compute_ms);
    }

    std::vector<f16_t> all_keys;
    if (need_fallback) {
      // Safe mode (and the AS+H2O baselines): all keys, all heads scored.
      auto t = UsesH2o(s.system) ? take_prefetch() : std::nullopt;
      if (!t) {
          IMPRESS_ASSIGN_OR_RETURN(t, store_->SubmitReadAllKeys(handle_, il));
        }
      IMPRESS_ASSIGN_OR_RETURN(store::ReadResult keys, wait(*t, &bd.kv_io_ms));
      lr.key_bytes += uint64_t(keys.k.size()) * sizeof(f16_t);
      IMPRESS_RETURN_IF_ERROR(ensure_scratch(size_t(n)));
      upload(keys_scratch_, keys.k, size_t(n));
      be.Synchronize();
      sw.Lap(&bd.copy_ms);
      std::vector<int> all_q(size_t(c.n_head)), all_kv(size_t(c.n_head_kv));
      std::iota(all_q.begin(), all_q.end(), 0);
      std::iota(all_kv.begin(), all_kv.end(), 0);
      std::vector<float> imp(size_t(c.n_head) * n);
      IMPRESS_RETURN_IF_ERROR(fwd_->ScoreKeys(
          il, PrefixKeys{.n = n, .k = DevPtr<const f16_t>(keys_scratch_.raw()), .kv_heads = all_kv}, all_q,
          imp.data()));
      score = SumNormalised(imp, c.n_head, n);
      selected = SelectTokens(score, k, s.sinks, s.recent);
      all_keys = std::move(keys.k);
      sw.Lap(&bd.probe_compute_ms);
    }

    const int n_sel = int(selected.size());
    IMPRESS_ASSIGN_OR_RETURN(store::ReadTicket t, store_->SubmitReadKV(handle_, il, selected, !need_fallback, true));
    IMPRESS_ASSIGN_OR_RETURN(store::ReadResult kv, wait(t, &bd.kv_io_ms));
    lr.value_bytes += uint64_t(n_sel) * row_bytes;
    if (need_fallback) {
      // Keys of the selected tokens are already here: gather them.
      kv.k.resize(size_t(n_sel) * row);
      for (int j = 0; j < n_sel; ++j) {
        std::copy_n(all_keys.data() + size_t(selected[size_t(j)]) * row, row, kv.k.data() + size_t(j) * row);
      }
    } else {
      lr.key_bytes += uint64_t(n_sel) * row_bytes;
    }
    upload(k_buf_[size_t(il)], kv.k, size_t(n_sel));
    upload(v_buf_[size_t(il)], kv.v, size_t(n_sel));
    be.Synchronize();
    sw.Lap(&bd.copy_ms);
    lr.k = n_sel;
    n_sel_[size_t(il)] = n_sel;
  }

  if (!score.empty()) importance_row = score;
  if (!selected_row.empty() || s.record_importance) {
    selected_row.assign(size_t(n), 0);
    for (uint32_t i : selected) selected_row[i] = 1;
  }
  selected_scores_[size_t(il)].clear();
  if (!score.empty()) {
    for (uint32_t i : selected) selected_scores_[size_t(il)].push_back(score[i]);
  }
  selected_[size_t(il)] = std::move(selected);
  return Status::Ok();
}

Result<RequestReport> ImpressPipeline::Prefill(const PipelineRequest& req, const PipelineSettings& s,
                                               int max_new_tokens, std::vector<float>* logits,
                                               const ProgressFn& progress, const std::atomic<bool>* cancel) {
  const auto t_start = Clock::now();
  if (store_thread_.joinable()) store_thread_.join();
  if (store_ && handle_.id) IMPRESS_RETURN_IF_ERROR(store_->Release(handle_));
  handle_ = {};
  const ModelConfig& c = ctx_.config();
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

  RequestReport report;
  report.system = s.system;
  report.n_prompt = n_prompt;
  report.n_prefix = req.n_prefix;
  report.keep = s.keep;
  report.alpha = s.alpha;
  report.probe_heads = s.probe_heads;
  TtftBreakdown& bd = report.breakdown;
  Stopwatch sw;

  // 1. Match.
  const bool reuse = store_ != nullptr && s.system != SystemKind::kRecomp;
  n_matched_ = 0;
  if (reuse) {
    store_->SetPolicy(PolicyFor(s.system));
    handle_ = store_->Match(req.tokens.subspan(0, size_t(req.n_prefix)));
    // At least one token must be computed to produce logits.
    n_matched_ = int(std::min<uint64_t>(handle_.n_matched, uint64_t(n_prompt - 1)));
  }
  report.n_matched = n_matched_;
  const int n_new = n_prompt - n_matched_;
  report.n_new = n_new;
  seq_.assign(req.tokens.begin(), req.tokens.end());
  n_new_done_ = 0;
  n_sel_.assign(size_t(c.n_layer), 0);
  selected_.assign(size_t(c.n_layer), {});
  selected_scores_.assign(size_t(c.n_layer), {});
  prefetch_.assign(size_t(c.n_layer), std::nullopt);
  report.layers.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) report.layers[size_t(il)].il = il;
  if (s.record_importance && n_matched_ > 0) {
    report.importance.assign(size_t(c.n_layer) * n_matched_, 0.0f);
    report.selected.assign(size_t(c.n_layer) * n_matched_, 0);
  }
  sw.Lap(&bd.match_ms);

  IMPRESS_RETURN_IF_ERROR(EnsureBuffers(size_t(n_prompt + max_new_tokens)));
  sw.Lap(&bd.other_ms);

  // Prefetch of a layer's reads that do not depend on its queries.
  auto prefetch = [&](int il) -> Status {
    if (!reuse || n_matched_ == 0 || il >= c.n_layer || prefetch_[size_t(il)]) return Status::Ok();
    double* bucket = &bd.kv_io_ms;
    if (s.system == SystemKind::kAsLike) {
      std::vector<uint32_t> all(static_cast<size_t>(n_matched_));
      std::iota(all.begin(), all.end(), 0u);
      IMPRESS_ASSIGN_OR_RETURN(prefetch_[size_t(il)], store_->SubmitReadKV(handle_, il, all, true, true));
    } else if (UsesH2o(s.system)) {
      IMPRESS_ASSIGN_OR_RETURN(prefetch_[size_t(il)], store_->SubmitReadAllKeys(handle_, il));
    } else if (UsesProbe(s.system)) {
      bucket = &bd.probe_io_ms;
      if (ProbeKeysCover(c, s.probe_heads, store_->options().probe_kv_heads)) {
        IMPRESS_ASSIGN_OR_RETURN(prefetch_[size_t(il)], store_->SubmitProbeKeys(handle_, il));
      } else {
        IMPRESS_ASSIGN_OR_RETURN(prefetch_[size_t(il)], store_->SubmitReadAllKeys(handle_, il));
      }
    }
    sw.Lap(bucket);
    return Status::Ok();
  };

  const size_t row = size_t(c.n_head_kv) * c.head_dim;
  const int ubatch = std::clamp(s.ubatch, 1, fwd_->max_batch());
  std::vector<int32_t> positions;
  std::vector<float> importance_row;
  std::vector<uint8_t> selected_row;
  std::vector<float>& out_logits = *logits;
  for (int b = 0; b < n_new; b += ubatch) {
    const int nb = std::min(ubatch, n_new - b);
    positions.resize(size_t(nb));
    std::iota(positions.begin(), positions.end(), n_matched_ + b);
    IMPRESS_RETURN_IF_ERROR(fwd_->Begin(req.tokens.subspan(size_t(n_matched_ + b), size_t(nb)), positions));
    ctx_.backend().Synchronize();
    sw.Lap(&bd.compute_ms);
    if (b == 0 && s.overlap) IMPRESS_RETURN_IF_ERROR(prefetch(0));
    for (int il = 0; il < c.n_layer; ++il) {
      LayerReport& lr = report.layers[size_t(il)];
      if (b == 0 && s.overlap) IMPRESS_RETURN_IF_ERROR(prefetch(il + 1));
      IMPRESS_RETURN_IF_ERROR(fwd_->ComputeQKV(il));
      ctx_.backend().Synchronize();
      sw.Lap(&bd.compute_ms);
      if (b == 0 && n_matched_ > 0) {
        importance_row.clear();
        selected_row.clear();
        IMPRESS_RETURN_IF_ERROR(RunLayerSelection(il, s, report, lr, importance_row, selected_row)
                                    .WithContext(fmt::format("layer {}", il)));
        if (s.record_importance) {
          if (!importance_row.empty())
            std::copy(importance_row.begin(), importance_row.end(), report.importance.begin() + size_t(il) * n_matched_);
          if (!selected_row.empty())
            std::copy(selected_row.begin(), selected_row.end(), report.selected.begin() + size_t(il) * n_matched_);
        }
        sw.Lap(&bd.other_ms);
      }
      const int n_sel = n_sel_[size_t(il)];
      const PrefixKV prefix{.n = n_sel + b,
                            .k = DevPtr<const f16_t>(k_buf_[size_t(il)].raw()),
                            .v = DevPtr<const f16_t>(v_buf_[size_t(il)].raw()),
                            .positions = {}};
      IMPRESS_RETURN_IF_ERROR(fwd_->Attend(il, prefix));
      IMPRESS_RETURN_IF_ERROR(
          fwd_->ExportKV(il, k_buf_[size_t(il)] + size_t(n_sel + b) * row, v_buf_[size_t(il)] + size_t(n_sel + b) * row));
      ctx_.backend().Synchronize();
      sw.Lap(&bd.compute_ms);
    }
    n_new_done_ = b + nb;
    if (cancel && cancel->load()) return Status::Cancelled("prefill stopped");
    if (!ReportProgress(progress, uint64_t(b + nb), uint64_t(n_new), "prefill")) {
      return Status::Cancelled("prefill stopped");
    }
    sw.Lap(&bd.other_ms);
    if (b + nb == n_new) {
      out_logits.resize(size_t(c.n_vocab));
      const int last = nb - 1;
      IMPRESS_RETURN_IF_ERROR(fwd_->Logits(std::span<const int>(&last, 1), out_logits.data()));
      sw.Lap(&bd.compute_ms);
    }
  }
  report.ttft_ms = Ms(t_start, Clock::now());
  bd.other_ms += report.ttft_ms - bd.Sum();  // start-up before the stopwatch and rounding

  for (const LayerReport& lr : report.layers) {
    report.ssd_bytes_read += lr.ssd_bytes;
    report.chunks_device += lr.chunks_device;
    report.chunks_host += lr.chunks_host;
    report.chunks_ssd += lr.chunks_ssd;
    report.n_layers_passed += lr.passed ? 1 : 0;
  }

  // Off the TTFT path: what was important feeds reorder and score-based caching.
  if (reuse && n_matched_ > 0 && s.report_importance) {
    for (int il = 0; il < c.n_layer; ++il) {
      Status st = store_->ReportImportance(handle_, il, selected_[size_t(il)], selected_scores_[size_t(il)]);
      if (!st.ok()) spdlog::warn("importance report for layer {} failed: {}", il, st.ToString());
    }
  }
  return report;
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

void ImpressPipeline::StoreAsync(size_t n_tokens) {
  if (store_thread_.joinable()) store_thread_.join();
  store_result_ = uint64_t{0};
  if (!store_) return;
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
    ctx_.backend().CopyToHost(kh.data(), DevPtr<const void>(k_buf_[size_t(il)].raw() + first), count * row * sizeof(f16_t));
    ctx_.backend().CopyToHost(vh.data(), DevPtr<const void>(v_buf_[size_t(il)].raw() + first), count * row * sizeof(f16_t));
  }
  auto tokens = std::make_shared<std::vector<int32_t>>(seq_.begin(), seq_.begin() + std::ptrdiff_t(n_total));
  const uint64_t start = uint64_t(n_matched_);
  store::PrefixStore* st = store_;
  store_thread_ = std::thread([this, st, k_host, v_host, tokens, start]() {
    std::vector<store::LayerKV> layers(k_host->size());
    for (size_t il = 0; il < layers.size(); ++il) layers[il] = {(*k_host)[il].data(), (*v_host)[il].data()};
    auto r = st->Insert(*tokens, start, layers);
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

Result<FidelityReport> CheckFidelity(ImpressPipeline& pipeline, const PipelineRequest& request,
                                     const PipelineSettings& settings, int n_continue,
                                     const std::atomic<bool>* cancel) {
  FidelityReport f;
  auto run = [&](const PipelineSettings& s, RequestReport* report, std::vector<float>* first_logits,
                 std::vector<int32_t>* cont) -> Status {
    std::vector<float> logits;
    IMPRESS_ASSIGN_OR_RETURN(*report, pipeline.Prefill(request, s, n_continue, &logits, {}, cancel));
    *first_logits = logits;
    for (int i = 0; i < n_continue; ++i) {
      if (cancel && cancel->load()) return Status::Cancelled("fidelity check stopped");
      const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      cont->push_back(tok);
      if (i + 1 < n_continue) IMPRESS_RETURN_IF_ERROR(pipeline.Decode(tok, &logits));
    }
    return Status::Ok();
  };
  PipelineSettings s = settings;
  s.report_importance = false;
  PipelineSettings full = s;
  full.system = pipeline.store() ? SystemKind::kAsLike : SystemKind::kRecomp;
  full.keep = 1.0f;
  std::vector<float> la, lb;
  std::vector<int32_t> ca, cb;
  IMPRESS_RETURN_IF_ERROR(run(s, &f.report, &la, &ca));
  IMPRESS_RETURN_IF_ERROR(run(full, &f.report_full, &lb, &cb));
  f.first_token = ca.empty() ? -1 : ca[0];
  f.first_token_full = cb.empty() ? -1 : cb[0];
  f.first_token_match = f.first_token == f.first_token_full;
  // KL(full || this) over softmax distributions.
  auto log_softmax = [](const std::vector<float>& l) {
    const float mx = *std::max_element(l.begin(), l.end());
    double sum = 0;
    for (float x : l) sum += std::exp(double(x) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(l.size());
    for (size_t i = 0; i < l.size(); ++i) out[i] = double(l[i]) - lse;
    return out;
  };
  const auto pa = log_softmax(la), pb = log_softmax(lb);
  double kl = 0;
  for (size_t i = 0; i < pa.size(); ++i) kl += std::exp(pb[i]) * (pb[i] - pa[i]);
  f.kl_divergence = std::max(0.0, kl);
  f.n_continuation = n_continue;
  while (f.n_continuation_match < n_continue && ca[size_t(f.n_continuation_match)] == cb[size_t(f.n_continuation_match)]) {
    ++f.n_continuation_match;
  }
  return f;
}

}  // namespace impress
