// ImpressPipeline's per-layer steps (docs/design.md section 3): for one layer of the matched prefix,
// find the important tokens for the new queries and load their K/V into the layer's buffers.
// SelectLayer asks the system's policy (pipeline/system-policy.h) how each layer is served; each
// step charges its time to the request's breakdown.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "pipeline/impress-pipeline.h"
#include "pipeline/prefill-run.h"

namespace impress {

namespace {

// True when the store keeps probe keys for every KV head the probe query heads use; otherwise the
// probe reads all keys (e.g. more probe heads than the store was opened for).
bool ProbeKeysCover(const ModelConfig& c, const PipelineSettings& s, const std::vector<int>& stored) {
  const std::vector<int> needed = ProbeKvHeads(c, s.probe_heads, s.probe_spread);
  return std::all_of(needed.begin(), needed.end(),
                     [&](int g) { return std::find(stored.begin(), stored.end(), g) != stored.end(); });
}

std::vector<uint32_t> AllTokens(int n) {
  std::vector<uint32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0u);
  return all;
}

std::vector<int> FirstN(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

ImpressPipeline::ProbeKeysPlan ImpressPipeline::PlanProbeKeys(const PipelineSettings& s) {
  const ModelConfig& c = ctx_.config();
  const store::PrefixStoreOptions& so = store_->options();
  ProbeKeysPlan p;
  p.store_covers = ProbeKeysCover(c, s, so.probe_kv_heads);
  p.kv_heads = p.store_covers ? so.probe_kv_heads : FirstN(c.n_head_kv);
  p.encoding = store::ProbeEncoding(so);
  // All keys, exactly as K: kept for LoadSelected to gather instead of reading them again.
  p.keep_keys = !p.store_covers || (p.kv_heads == FirstN(c.n_head_kv) && p.encoding == so.kv_encoding);
  if (ctx_.backend().HostAddressable() && p.store_covers && !p.keep_keys) p.code_bits = store::CodeBits(p.encoding);
  return p;
}

Status ImpressPipeline::SubmitProbeRecords(int il, const ProbeKeysPlan& plan) {
  ProbeSlot& slot = probe_slots_[size_t(il) % probe_slots_.size()];
  DiscardProbeSlot(slot);
  const int n_heads = int(plan.kv_heads.size());
  slot.records.resize(size_t(n_matched_) * store::RecordBytes(plan.encoding, n_heads, ctx_.config().head_dim));
  IMPRESS_ASSIGN_OR_RETURN(slot.in_flight, store_->SubmitProbeKeys(handle_, il, slot.records.data()));
  slot.il = il;
  return Status::Ok();
}

Result<const uint8_t*> ImpressPipeline::ReadProbeRecords(Run& run, LayerReport& lr, int il, const ProbeKeysPlan& plan) {
  ProbeSlot& slot = probe_slots_[size_t(il) % probe_slots_.size()];
  if (slot.il == il && !slot.in_flight) return slot.records.data();  // waited already
  if (slot.il != il) {
    prefetch_issued_[size_t(il)] = 1;
    IMPRESS_RETURN_IF_ERROR(SubmitProbeRecords(il, plan));
  }
  auto r = store_->WaitProbeRecords(*slot.in_flight, slot.records.data());
  slot.in_flight.reset();
  const double ms = run.sw.Lap(&run.report.breakdown.probe_io_ms);
  lr.io_wait_ms += ms;
  run.report.breakdown.io_wait_ms += ms;
  if (!r.ok()) {
    slot.il = -1;
    return r.status();
  }
  NoteRead(run, lr, *r);
  lr.key_bytes += slot.records.size();
  return slot.records.data();
}

void ImpressPipeline::DiscardProbeSlot(ProbeSlot& slot) {
  if (slot.in_flight && store_) (void)store_->WaitProbeRecords(*slot.in_flight, slot.records.data());
  slot.in_flight.reset();
  slot.il = -1;
}

void ImpressPipeline::DiscardProbeSlots() {
  for (ProbeSlot& slot : probe_slots_) DiscardProbeSlot(slot);
}

Status ImpressPipeline::PrefetchLayer(Run& run, int il) {
  const ModelConfig& c = ctx_.config();
  if (!run.reuse || n_matched_ == 0 || il >= c.n_layer || prefetch_issued_[size_t(il)]) return Status::Ok();
  prefetch_issued_[size_t(il)] = 1;
  std::optional<store::ReadTicket>& slot = prefetch_[size_t(il)];
  double* bucket = &run.report.breakdown.kv_io_ms;
  switch (run.sys.SelectionFor(run.s, il)) {
    case LayerSelection::kWholeLayer: {
      IMPRESS_ASSIGN_OR_RETURN(slot, store_->SubmitReadKV(handle_, il, AllTokens(n_matched_), true, true));
      break;
    }
    case LayerSelection::kAllHeads: {
      IMPRESS_ASSIGN_OR_RETURN(slot, store_->SubmitReadAllKeys(handle_, il));
      break;
    }
    case LayerSelection::kProbe:
      bucket = &run.report.breakdown.probe_io_ms;
      if (const ProbeKeysPlan plan = PlanProbeKeys(run.s); plan.code_bits) {
        IMPRESS_RETURN_IF_ERROR(SubmitProbeRecords(il, plan));  // into its slot, placed as it arrives
      } else if (plan.store_covers) {
        IMPRESS_ASSIGN_OR_RETURN(slot, store_->SubmitProbeKeys(handle_, il));
      } else {
        IMPRESS_ASSIGN_OR_RETURN(slot, store_->SubmitReadAllKeys(handle_, il));
      }
      break;
    case LayerSelection::kPositions:  // what it reads depends on its choice, made with the layer
    case LayerSelection::kNone: break;
  }
  run.sw.Lap(bucket);
  return Status::Ok();
}

Status ImpressPipeline::SelectLayer(Run& run, int il) {
  LayerJob job{.run = run,
               .lr = run.report.layers[size_t(il)],
               .il = il,
               .n = n_matched_,
               .k = KeepCount(n_matched_, run.s.keep),
               .selected = {},
               .score = {},
               .pooled = false,
               .keys = {}};
  // The buffers of the layer's selection and scores come from the last request's (their capacity
  // reused); RecordSelection hands them back.
  job.selected.swap(selected_[size_t(il)]);
  job.selected.clear();
  job.score.swap(score_sum_);
  job.score.clear();
  job.lr.n = job.n;
  job.predict_in_read = run.s.predict_next || run.s.predict_select;
  const LayerSelection how = run.sys.SelectionFor(run.s, il);
  switch (how) {
    case LayerSelection::kWholeLayer: IMPRESS_RETURN_IF_ERROR(LoadFullLayer(job)); break;
    case LayerSelection::kAllHeads: IMPRESS_RETURN_IF_ERROR(SelectByAllHeads(job)); break;
    case LayerSelection::kProbe:
      if (run.s.predict_select && kv_prefetch_[size_t(il)] && kv_prefetch_[size_t(il)]->verdict &&
          kv_prefetch_[size_t(il)]->verdict->passed) {
        IMPRESS_RETURN_IF_ERROR(SelectByPrediction(job));
      } else {
        IMPRESS_RETURN_IF_ERROR(SelectByProbe(job));
      }
      break;
    case LayerSelection::kPositions: IMPRESS_RETURN_IF_ERROR(SelectByPolicy(job)); break;
    case LayerSelection::kNone:  // reuses nothing, so never selects
      break;
  }
  RecordSelection(job);
  job.score.swap(score_sum_);
  if (run.s.predict_next || run.s.predict_select) {
    if (!job.predicted) IMPRESS_RETURN_IF_ERROR(PredictNextLayer(run, il));
    IMPRESS_RETURN_IF_ERROR(SubmitPrediction(run));
  } else if (run.s.cross_layer_prefetch && how == LayerSelection::kProbe) {
    IMPRESS_RETURN_IF_ERROR(PrefetchNextLayerKV(run, il));
  }
  return Status::Ok();
}

Status ImpressPipeline::PredictNextLayer(Run& run, int il) {
  const ModelConfig& c = ctx_.config();
  const int next = il + 1;
  if (next >= c.n_layer || n_matched_ == 0 || kv_prefetch_[size_t(next)] ||
      run.sys.SelectionFor(run.s, next) != LayerSelection::kProbe)
    return Status::Ok();
  const ProbeKeysPlan plan = PlanProbeKeys(run.s);
  if (!plan.code_bits) return Status::Ok();  // predicted from integer-coded probe keys only
  TtftBreakdown& bd = run.report.breakdown;
  LayerReport& lr = run.report.layers[size_t(next)];
  const int n = n_matched_;
  // The next layer's probe keys: read now (usually already in flight), kept for its own probe.
  IMPRESS_ASSIGN_OR_RETURN(const uint8_t* records, ReadProbeRecords(run, lr, next, plan));

  const std::vector<int> probe_heads = ProbeQueryHeads(c, run.s.probe_heads, run.s.probe_spread);
  std::vector<float>& probe_imp = score_scratch_;
  probe_imp.resize(probe_heads.size() * size_t(n));
  const auto t_score = PipelineClock::now();
  IMPRESS_RETURN_IF_ERROR(fwd_->PredictScores(
      next, PrefixKeys{.n = n, .k = {}, .kv_heads = plan.kv_heads, .code_bits = plan.code_bits, .codes = records},
      probe_heads, probe_imp.data()));
  bd.probe_score_ms += ElapsedMs(t_score, PipelineClock::now());
  // The selection as the layer's own probe would make it (its keep count, pooling, groups).
  LayerJob guess{.run = run,
                 .lr = lr,
                 .il = next,
                 .n = n,
                 .k = KeepCount(n, run.s.keep),
                 .selected = {},
                 .score = std::move(predict_score_),
                 .pooled = false,
                 .keys = {}};
  guess.score.clear();
  CombineNormalisedImportanceInto(probe_imp, int(probe_heads.size()), n, run.s.head_max, &guess.score);
  SetKeepCount(guess);
  std::optional<ProbeVerdict> verdict;
  if (run.s.predict_select)
    verdict = JudgeProbe(probe_imp, int(probe_heads.size()), n, guess.k, run.s.alpha, sel_scratch_);
  IMPRESS_RETURN_IF_ERROR(ChooseTokens(guess, &predict_pool_));
  predict_score_ = std::move(guess.score);
  pending_predict_ = PendingPrediction{.il = next, .positions = std::move(guess.selected), .verdict = verdict};
  run.sw.Lap(&bd.probe_compute_ms);
  return Status::Ok();
}

Status ImpressPipeline::SubmitPrediction(Run& run) {
  if (!pending_predict_) return Status::Ok();
  PendingPrediction p = std::move(*pending_predict_);
  pending_predict_.reset();
  // A predicted selection whose heads disagree is not kept: the layer probes itself, and mostly
  // falls back to all heads as the prediction did, so rows read for it would mostly go unused.
  // What that fallback reads first does not depend on any choice: all of the layer's keys, read
  // now, while this layer computes (SelectByAllHeads takes them; where the layer's own probe
  // passes after all, FinishRequest waits for them after the first token).
  if (p.verdict && !p.verdict->passed) {
    std::optional<store::ReadTicket>& slot = prefetch_[size_t(p.il)];
    if (!slot) {
      // A read ahead that cannot start is left to the fallback, which reports why if it fails again.
      if (Result<store::ReadTicket> t = store_->SubmitReadAllKeys(handle_, p.il); t.ok()) slot = *t;
      run.sw.Lap(&run.report.breakdown.kv_io_ms);
    }
    return Status::Ok();
  }
  KvPrefetch pf;
  pf.positions = std::move(p.positions);
  pf.verdict = p.verdict;
  // A selection the layer keeps as it is (SelectByPrediction) goes straight into its buffers: the
  // store checks and places each chunk's rows as they arrive, while this layer computes, instead
  // of in the wait that starts the next one.
  if (pf.verdict && run.s.predict_select && ctx_.backend().HostAddressable() && !handle_.remote) {
    pf.into_k = k_buf_[size_t(p.il)].raw();
    pf.into_v = v_buf_[size_t(p.il)].raw();
    IMPRESS_ASSIGN_OR_RETURN(pf.ticket, store_->SubmitReadKV(handle_, p.il, pf.positions, true, true,
                                                             store::ReadInto{pf.into_k, pf.into_v, {}}));
  } else {
    IMPRESS_ASSIGN_OR_RETURN(pf.ticket, store_->SubmitReadKV(handle_, p.il, pf.positions, true, true));
  }
  kv_prefetch_[size_t(p.il)] = std::move(pf);
  run.sw.Lap(&run.report.breakdown.kv_io_ms);
  return Status::Ok();
}

Status ImpressPipeline::PredictDuringRead(LayerJob& job) {
  if (!job.predict_in_read || job.predicted) return Status::Ok();
  job.predicted = true;
  job.run.sw.Lap(&job.run.report.breakdown.kv_io_ms);  // the layer's read, submitted
  return PredictNextLayer(job.run, job.il);
}

Status ImpressPipeline::SelectByPrediction(LayerJob& job) {
  const KvPrefetch& pf = *kv_prefetch_[size_t(job.il)];
  job.lr.probed = true;  // one layer early
  job.lr.passed = true;
  job.lr.predicted = true;
  job.lr.s = pf.verdict->s;
  job.lr.t = pf.verdict->t;
  job.selected = pf.positions;
  // The prediction's scores and their pooling, as its choice ranked them (the next prediction
  // writes the other buffers of each pair).
  job.score.swap(predict_score_);
  pool_scratch_.swap(predict_pool_);
  job.pooled = job.run.s.pool > 1;
  job.run.sw.Lap(&job.run.report.breakdown.probe_compute_ms);
  return LoadSelected(job, nullptr);
}

Status ImpressPipeline::SelectByPolicy(LayerJob& job) {
  IMPRESS_RETURN_IF_ERROR(job.run.sys.ChoosePositions(job.il, job.n, job.k, job.run.s, &job.selected));
  for (size_t j = 0; j < job.selected.size(); ++j) {
    if (job.selected[j] >= uint32_t(job.n) || (j > 0 && job.selected[j] <= job.selected[j - 1])) {
      return Status::Internal(fmt::format("system '{}' chose positions that are not ascending, distinct and below {}",
                                          job.run.sys.name(), job.n));
    }
  }
  job.run.sw.Lap(&job.run.report.breakdown.probe_compute_ms);
  return LoadSelected(job, nullptr);
}

Status ImpressPipeline::PrefetchNextLayerKV(Run& run, int il) {
  const int next = il + 1;
  if (next >= ctx_.config().n_layer || selected_[size_t(il)].empty() || kv_prefetch_[size_t(next)]) {
    return Status::Ok();
  }
  KvPrefetch pf;
  pf.positions = selected_[size_t(il)];
  IMPRESS_ASSIGN_OR_RETURN(pf.ticket, store_->SubmitReadKV(handle_, next, pf.positions, true, true));
  kv_prefetch_[size_t(next)] = std::move(pf);
  run.sw.Lap(&run.report.breakdown.kv_io_ms);
  return Status::Ok();
}

Status ImpressPipeline::ReadSelectedWithPrefetch(LayerJob& job, KvPrefetch pf, f16_t* k_dst, f16_t* v_dst) {
  constexpr uint32_t kSkip = store::PrefixStore::kSkipRow;
  const std::vector<uint32_t>& sel = job.selected;
  if (pf.into_k) {  // read into these very buffers, as the layer keeps it
    if (sel != pf.positions || pf.into_k != k_dst || pf.into_v != v_dst) {
      DiscardPrefetch(pf);
      return Status::Internal("pipeline: layer " + std::to_string(job.il) +
                              " changed a selection whose rows were read into its buffers");
    }
    const Status predicted = PredictDuringRead(job);
    IMPRESS_RETURN_IF_ERROR(WaitReadInto(job, pf.ticket, k_dst, v_dst, &job.run.report.breakdown.kv_io_ms));
    IMPRESS_RETURN_IF_ERROR(predicted);
    job.lr.prefetched = int(pf.positions.size());
    job.lr.prefetch_used = int(sel.size());
    return Status::Ok();
  }
  // Where each row read ahead goes (nowhere if the layer did not choose it), and what the layer
  // chose but the read ahead did not bring, with where it goes.
  std::vector<uint32_t> ahead_rows(pf.positions.size(), kSkip), missing, missing_rows;
  size_t a = 0;
  for (size_t j = 0; j < sel.size(); ++j) {
    while (a < pf.positions.size() && pf.positions[a] < sel[j]) ++a;
    if (a < pf.positions.size() && pf.positions[a] == sel[j]) {
      ahead_rows[a] = uint32_t(j);
    } else {
      missing.push_back(sel[j]);
      missing_rows.push_back(uint32_t(j));
    }
  }
  // Read what is missing now, before waiting on the rest.
  std::optional<store::ReadTicket> rest;
  if (!missing.empty()) {
    Result<store::ReadTicket> t = store_->SubmitReadKV(handle_, job.il, missing, k_dst != nullptr, true,
                                                       store::ReadInto{k_dst, v_dst, missing_rows});
    if (!t.ok()) {
      DiscardPrefetch(pf);  // the read ahead's buffers go back to the store
      return t.status();
    }
    rest = *t;
  }
  const Status predicted = PredictDuringRead(job);
  double* bucket = &job.run.report.breakdown.kv_io_ms;
  const Status ahead = WaitReadInto(job, pf.ticket, k_dst, v_dst, bucket, ahead_rows);
  const Status late = rest ? WaitReadInto(job, *rest, k_dst, v_dst, bucket, missing_rows) : Status::Ok();
  IMPRESS_RETURN_IF_ERROR(ahead);  // both waited, whatever failed
  IMPRESS_RETURN_IF_ERROR(late);
  IMPRESS_RETURN_IF_ERROR(predicted);
  job.lr.prefetched = int(pf.positions.size());
  job.lr.prefetch_used = int(sel.size() - missing.size());
  return Status::Ok();
}

Status ImpressPipeline::LoadFullLayer(LayerJob& job) {
  const size_t row_bytes = size_t(ctx_.config().n_head_kv) * ctx_.config().head_dim * sizeof(f16_t);
  std::optional<store::ReadTicket> t = TakePrefetch(job.il);
  const bool host = ctx_.backend().HostAddressable();
  if (!t) {
    IMPRESS_ASSIGN_OR_RETURN(
        t, host ? store_->SubmitReadKV(handle_, job.il, AllTokens(job.n), true, true,
                                       store::ReadInto{k_buf_[size_t(job.il)].raw(), v_buf_[size_t(job.il)].raw(), {}})
                : store_->SubmitReadKV(handle_, job.il, AllTokens(job.n), true, true));
  }
  if (host) {
    IMPRESS_RETURN_IF_ERROR(WaitReadInto(job, *t, k_buf_[size_t(job.il)].raw(), v_buf_[size_t(job.il)].raw(),
                                         &job.run.report.breakdown.kv_io_ms));
  } else {
    IMPRESS_ASSIGN_OR_RETURN(store::ReadResult kv, WaitRead(job, *t, &job.run.report.breakdown.kv_io_ms));
    Upload(k_buf_[size_t(job.il)], kv.k, size_t(job.n));
    Upload(v_buf_[size_t(job.il)], kv.v, size_t(job.n));
    ctx_.backend().Synchronize();
    job.run.sw.Lap(&job.run.report.breakdown.copy_ms);
  }
  job.lr.key_bytes += uint64_t(job.n) * row_bytes;
  job.lr.value_bytes += uint64_t(job.n) * row_bytes;
  job.lr.k = job.n;
  n_sel_[size_t(job.il)] = job.n;
  job.selected = AllTokens(job.n);
  return Status::Ok();
}

Status ImpressPipeline::SelectByProbe(LayerJob& job) {
  IMPRESS_ASSIGN_OR_RETURN(const ProbeVerdict verdict, ProbeLayer(job));
  // Pass: the probe heads chose (job.selected) and keys come with the values. Fallback ("safe
  // mode"): all keys, all heads, as AS+H2O does.
  if (!verdict.passed) return SelectByAllHeads(job);
  return LoadSelected(job, job.keys.empty() ? nullptr : &job.keys);
}

Result<ProbeVerdict> ImpressPipeline::ProbeLayer(LayerJob& job) {
  const ModelConfig& c = ctx_.config();
  Backend& be = ctx_.backend();
  TtftBreakdown& bd = job.run.report.breakdown;
  const int n = job.n;
  job.lr.probed = true;
  const std::vector<int> probe_heads = ProbeQueryHeads(c, job.run.s.probe_heads, job.run.s.probe_spread);
  const int n_probe = int(probe_heads.size());
  const ProbeKeysPlan plan = PlanProbeKeys(job.run.s);
  const bool store_covers = plan.store_covers, keep_keys = plan.keep_keys;
  const int code_bits = plan.code_bits;
  const std::vector<int>& kv_heads = plan.kv_heads;
  IMPRESS_RETURN_IF_ERROR(EnsureKeysScratch(size_t(n)));
  const uint8_t* records = nullptr;
  if (code_bits) {  // read for the prediction one layer earlier, or now
    IMPRESS_ASSIGN_OR_RETURN(records, ReadProbeRecords(job.run, job.lr, job.il, plan));
  } else {
    std::optional<store::ReadTicket> t = TakePrefetch(job.il);
    if (!t) {
      // More probe heads than the store keeps probe keys for: the probe reads all keys.
      IMPRESS_ASSIGN_OR_RETURN(
          t, store_covers ? store_->SubmitProbeKeys(handle_, job.il) : store_->SubmitReadAllKeys(handle_, job.il));
    }
    if (be.HostAddressable() && !keep_keys) {
      IMPRESS_RETURN_IF_ERROR(WaitReadInto(job, *t, keys_scratch_.raw(), nullptr, &bd.probe_io_ms));
      job.lr.key_bytes += uint64_t(n) * kv_heads.size() * size_t(c.head_dim) * sizeof(f16_t);
    } else {
      IMPRESS_ASSIGN_OR_RETURN(store::ReadResult keys, WaitRead(job, *t, &bd.probe_io_ms));
      job.lr.key_bytes += uint64_t(keys.k.size()) * sizeof(f16_t);
      be.CopyToDevice(DevPtr<void>(keys_scratch_.raw()), keys.k.data(), keys.k.size() * sizeof(f16_t));
      be.Synchronize();
      if (keep_keys) job.keys = std::move(keys.k);
      job.run.sw.Lap(&bd.copy_ms);
    }
  }

  // Importance of each prefix token for each probe query head (n_probe x n), in a buffer kept
  // across layers and requests.
  std::vector<float>& probe_imp = score_scratch_;
  probe_imp.resize(size_t(n_probe) * n);  // ScoreKeys writes every value
  const auto t_score = PipelineClock::now();
  IMPRESS_RETURN_IF_ERROR(fwd_->ScoreKeys(job.il,
                                          PrefixKeys{.n = n,
                                                     .k = DevPtr<const f16_t>(keys_scratch_.raw()),
                                                     .kv_heads = kv_heads,
                                                     .code_bits = code_bits,
                                                     .codes = records},
                                          probe_heads, probe_imp.data()));
  bd.probe_score_ms += ElapsedMs(t_score, PipelineClock::now());
  CombineNormalisedImportanceInto(probe_imp, n_probe, n, job.run.s.head_max, &job.score);
  SetKeepCount(job);
  const ProbeVerdict verdict = JudgeProbe(probe_imp, n_probe, n, job.k, job.run.s.alpha, sel_scratch_);
  job.lr.s = verdict.s;
  job.lr.t = verdict.t;
  job.lr.passed = verdict.passed;
  if (verdict.passed) {
    IMPRESS_RETURN_IF_ERROR(ChooseTokens(job));
  } else {
    job.score.clear();  // the fallback scores all heads
  }
  job.run.sw.Lap(&bd.probe_compute_ms);
  return verdict;
}

Status ImpressPipeline::SelectByAllHeads(LayerJob& job) {
  const ModelConfig& c = ctx_.config();
  TtftBreakdown& bd = job.run.report.breakdown;
  const int n = job.n;
  // The AS+H2O baselines prefetched all keys; after a failed probe the slot is already empty,
  // and the probe may have read all keys already (then they are on the device too).
  store::ReadResult keys;
  if (!job.keys.empty()) {
    keys.k = std::move(job.keys);
  } else {
    std::optional<store::ReadTicket> t = TakePrefetch(job.il);
    job.lr.keys_ahead = t.has_value();
    if (!t) {
      IMPRESS_ASSIGN_OR_RETURN(t, store_->SubmitReadAllKeys(handle_, job.il));
    }
    IMPRESS_ASSIGN_OR_RETURN(keys, WaitRead(job, *t, &bd.kv_io_ms));
    job.lr.key_bytes += uint64_t(keys.k.size()) * sizeof(f16_t);
    IMPRESS_RETURN_IF_ERROR(EnsureKeysScratch(size_t(n)));
    Upload(keys_scratch_, keys.k, size_t(n));
    ctx_.backend().Synchronize();
    job.run.sw.Lap(&bd.copy_ms);
  }

  std::vector<float>& imp = score_scratch_;  // n_head x n
  imp.resize(size_t(c.n_head) * n);
  const auto t_score = PipelineClock::now();
  IMPRESS_RETURN_IF_ERROR(fwd_->ScoreKeys(
      job.il, PrefixKeys{.n = n, .k = DevPtr<const f16_t>(keys_scratch_.raw()), .kv_heads = FirstN(c.n_head_kv)},
      FirstN(c.n_head), imp.data()));
  bd.probe_score_ms += ElapsedMs(t_score, PipelineClock::now());
  CombineNormalisedImportanceInto(imp, c.n_head, n, job.run.s.head_max, &job.score);
  SetKeepCount(job);
  IMPRESS_RETURN_IF_ERROR(ChooseTokens(job));
  job.run.sw.Lap(&bd.probe_compute_ms);
  return LoadSelected(job, &keys.k);
}

void ImpressPipeline::SetKeepCount(LayerJob& job) {
  const PipelineSettings& s = job.run.s;
  if (s.keep_mass > 0)
    job.k = MassKeepCount(job.score, s.keep_mass, s.keep_min, s.keep_max, s.sinks, s.recent, sel_scratch_);
}

Status ImpressPipeline::ChooseTokens(LayerJob& job, std::vector<float>* pool) {
  const PipelineSettings& s = job.run.s;
  if (!pool) pool = &pool_scratch_;
  // The selection and the store's statistics rank by the pooled scores; the heatmap shows the
  // scores as the heads gave them.
  job.pooled = s.pool > 1;
  if (job.pooled) PoolScoresInto(job.score, s.pool, s.pool_max, pool, s.pool_follow);
  const std::span<const float> rank = job.pooled ? std::span<const float>(*pool) : job.score;
  const int group = s.select_group < 0 ? int(store_->BlockGroupTokens()) : s.select_group;
  if (group <= 1) {
    SelectTokensInto(rank, job.k, s.sinks, s.recent, sel_scratch_, &job.selected);
    return Status::Ok();
  }
  IMPRESS_ASSIGN_OR_RETURN(const std::vector<uint32_t> groups, store_->ReadGroups(handle_, job.il, uint32_t(group)));
  SelectGroupsInto(rank, job.k, s.sinks, s.recent, groups, sel_scratch_, &job.selected, s.select_budget);
  return Status::Ok();
}

Status ImpressPipeline::LoadSelected(LayerJob& job, const std::vector<f16_t>* keys) {
  const size_t row = size_t(ctx_.config().n_head_kv) * ctx_.config().head_dim;
  const size_t row_bytes = row * sizeof(f16_t);
  const int n_sel = int(job.selected.size());
  const bool read_keys = keys == nullptr;
  const bool host = ctx_.backend().HostAddressable();
  // Straight into the layer's buffers where the host addresses them; else staged and uploaded.
  store::ReadResult staged;
  if (!host) {
    staged.k.resize(size_t(n_sel) * row);
    staged.v.resize(size_t(n_sel) * row);
  }
  f16_t* k_dst = host ? k_buf_[size_t(job.il)].raw() : staged.k.data();
  f16_t* v_dst = host ? v_buf_[size_t(job.il)].raw() : staged.v.data();
  if (std::optional<KvPrefetch>& slot = kv_prefetch_[size_t(job.il)]) {
    KvPrefetch pf = std::move(*slot);
    slot.reset();
    IMPRESS_RETURN_IF_ERROR(ReadSelectedWithPrefetch(job, std::move(pf), read_keys ? k_dst : nullptr, v_dst));
  } else if (host && job.run.s.attend_while_reading && !handle_.remote) {
    // The attention takes the rows as they arrive; PrefillBatch waits the read after it.
    arrivals_.Reset(uint32_t(n_sel));
    IMPRESS_ASSIGN_OR_RETURN(store::ReadTicket t,
                             store_->SubmitReadKV(handle_, job.il, job.selected, read_keys, true,
                                                  store::ReadInto{read_keys ? k_dst : nullptr, v_dst, {}, &arrivals_}));
    streamed_ = StreamedRead{t, read_keys ? k_dst : nullptr, v_dst};
    const double ms = job.run.sw.Lap(&job.run.report.breakdown.kv_io_ms);  // the rows memory held, placed
    job.run.report.breakdown.io_wait_ms += ms;
    job.lr.io_wait_ms += ms;
    IMPRESS_RETURN_IF_ERROR(PredictDuringRead(job));  // the streamed read is waited after the attention
  } else {
    IMPRESS_ASSIGN_OR_RETURN(store::ReadTicket t,
                             store_->SubmitReadKV(handle_, job.il, job.selected, read_keys, true,
                                                  store::ReadInto{read_keys ? k_dst : nullptr, v_dst, {}}));
    const Status predicted = PredictDuringRead(job);
    IMPRESS_RETURN_IF_ERROR(
        WaitReadInto(job, t, read_keys ? k_dst : nullptr, v_dst, &job.run.report.breakdown.kv_io_ms));
    IMPRESS_RETURN_IF_ERROR(predicted);
  }
  job.lr.value_bytes += uint64_t(n_sel) * row_bytes;
  if (read_keys) {
    job.lr.key_bytes += uint64_t(n_sel) * row_bytes;
  } else {
    // Keys of the selected tokens are already here: gather them.
    for (int j = 0; j < n_sel; ++j)
      std::copy_n(keys->data() + size_t(job.selected[size_t(j)]) * row, row, k_dst + size_t(j) * row);
  }
  if (!host) {
    Upload(k_buf_[size_t(job.il)], staged.k, size_t(n_sel));
    Upload(v_buf_[size_t(job.il)], staged.v, size_t(n_sel));
    ctx_.backend().Synchronize();
  }
  job.run.sw.Lap(&job.run.report.breakdown.copy_ms);
  job.lr.k = n_sel;
  n_sel_[size_t(job.il)] = n_sel;
  return Status::Ok();
}

void ImpressPipeline::RecordSelection(LayerJob& job) {
  const size_t il = size_t(job.il);
  if (job.run.s.record_importance) {
    // Rows of the GUI heatmap: zero importance where no heads were scored (AS-like).
    const size_t first = il * size_t(job.n);
    std::copy(job.score.begin(), job.score.end(), job.run.report.importance.begin() + std::ptrdiff_t(first));
    for (uint32_t i : job.selected) job.run.report.selected[first + i] = 1;
  }
  selected_scores_[il].clear();
  if (!job.score.empty()) {
    const std::vector<float>& ranked = job.pooled ? pool_scratch_ : job.score;
    for (uint32_t i : job.selected) selected_scores_[il].push_back(ranked[i]);
  }
  selected_[il] = std::move(job.selected);
}

Result<store::ReadResult> ImpressPipeline::WaitRead(LayerJob& job, store::ReadTicket ticket, double* bucket) {
  auto r = store_->Wait(ticket);
  const double ms = job.run.sw.Lap(bucket);
  job.lr.io_wait_ms += ms;
  job.run.report.breakdown.io_wait_ms += ms;
  if (r.ok()) NoteRead(job, r->stats);
  return r;
}

Status ImpressPipeline::WaitReadInto(LayerJob& job, store::ReadTicket ticket, f16_t* k, f16_t* v, double* bucket,
                                     std::span<const uint32_t> out_rows) {
  auto r = out_rows.empty() ? store_->WaitInto(ticket, k, v) : store_->WaitInto(ticket, k, v, out_rows);
  const double ms = job.run.sw.Lap(bucket);
  job.lr.io_wait_ms += ms;
  job.run.report.breakdown.io_wait_ms += ms;
  if (!r.ok()) return r.status();
  NoteRead(job, *r);
  return Status::Ok();
}

Status ImpressPipeline::FinishStreamedRead(Run& run, int il) {
  const StreamedRead sr = *streamed_;
  streamed_.reset();
  TtftBreakdown& bd = run.report.breakdown;
  LayerReport& lr = run.report.layers[size_t(il)];
  run.sw.Lap(&bd.compute_ms);  // the attention, waits for rows included (moved below)
  auto r = store_->WaitInto(sr.ticket, sr.k, sr.v);
  const double stalled = arrivals_.stalled_ms();
  const double ms = run.sw.Lap(&bd.kv_io_ms) + stalled;
  bd.compute_ms -= stalled;
  bd.kv_io_ms += stalled;
  bd.io_wait_ms += ms;
  lr.io_wait_ms += ms;
  if (!r.ok()) return r.status();
  NoteRead(run, lr, *r);
  return Status::Ok();
}

void ImpressPipeline::NoteRead(LayerJob& job, const store::ReadStats& st) { NoteRead(job.run, job.lr, st); }

void ImpressPipeline::NoteRead(Run& run, LayerReport& lr, const store::ReadStats& st) {
  lr.ssd_bytes += st.ssd_bytes;
  lr.ssd_reads += st.n_ios;
  lr.chunks_device += st.chunks_device;
  lr.chunks_host += st.chunks_host;
  lr.chunks_ssd += st.chunks_ssd;
  lr.chunks_team += st.chunks_team;
  lr.team_bytes += st.team_bytes;
  run.report.team_read_bytes += st.team_bytes;
  if (st.chunks_team > 0) run.read_spans.push_back({st.submitted, st.completed});
  run.report.useful_bytes_read += st.useful_bytes;
  if (st.ssd_bytes > 0) run.read_spans.push_back({st.submitted, st.completed});
}

std::optional<store::ReadTicket> ImpressPipeline::TakePrefetch(int il) {
  std::optional<store::ReadTicket> t = prefetch_[size_t(il)];
  prefetch_[size_t(il)].reset();
  return t;
}

Status ImpressPipeline::EnsureKeysScratch(size_t rows) {
  if (rows <= keys_scratch_rows_) return Status::Ok();
  Backend& be = ctx_.backend();
  if (keys_scratch_) be.Free(DevPtr<void>(keys_scratch_.raw()));
  // Forget the freed buffer first, so a failed allocation cannot leave it to be freed twice.
  keys_scratch_ = {};
  keys_scratch_rows_ = 0;
  const size_t row = size_t(ctx_.config().n_head_kv) * ctx_.config().head_dim;
  IMPRESS_ASSIGN_OR_RETURN(keys_scratch_, AllocArray<f16_t>(be, rows * row));
  keys_scratch_rows_ = rows;
  return Status::Ok();
}

void ImpressPipeline::Upload(DevPtr<f16_t> dst, const std::vector<f16_t>& src, size_t n_rows) {
  const size_t row_bytes = size_t(ctx_.config().n_head_kv) * ctx_.config().head_dim * sizeof(f16_t);
  ctx_.backend().CopyToDevice(DevPtr<void>(dst.raw()), src.data(), n_rows * row_bytes);
}

}  // namespace impress
