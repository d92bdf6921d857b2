#include "bench/pipeline-bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "chat/conversation.h"
#include "chat/document.h"
#include "engine/compute/cpu-backend.h"
#include "engine/model/model-loader.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/system-policy.h"
#include "store/kv-codec.h"

namespace impress {

namespace {

Result<std::vector<std::string>> ReadQuestions(const std::string& path, int n) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open the questions file " + path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line) && int(out.size()) < n) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(line);
  }
  if (out.empty()) return Status::InvalidArgument(path + " holds no questions");
  return out;
}

int32_t Argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// KL(p || q) of the softmax distributions of two logit vectors, in nats.
double SoftmaxKl(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto log_softmax = [](const std::vector<float>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double z = 0;
    for (float v : x) z += std::exp(double(v) - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - m - std::log(z);
    return out;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(kl, 0.0);
}

struct Accumulator {
  std::string system;
  std::vector<double> ttft;
  double ssd = 0, kv = 0, err_sum = 0, err_max = 0, agree = 0, amp = 0, chunks = 0, reads = 0, passed = 0, kl = 0,
         kl_max = 0;
  double probe_share = 0, io_share = 0;
  TtftBreakdown bd;

  void Add(const RequestReport& r, bool agrees, double kl_ref) {
    kl += kl_ref;
    kl_max = std::max(kl_max, kl_ref);
    ttft.push_back(r.ttft_ms);
    probe_share += r.probe_share();
    io_share += r.unhidden_io_share();
    ssd += double(r.ssd_bytes_read);
    for (const LayerReport& l : r.layers) kv += double(l.key_bytes + l.value_bytes);
    const double err = r.ttft_ms > 0 ? std::fabs(r.breakdown.other_ms) / r.ttft_ms : 0;
    err_sum += err;
    err_max = std::max(err_max, err);
    agree += agrees ? 1 : 0;
    amp += r.read_amplification();
    chunks += r.chunks_ssd;
    reads += r.ssd_reads;
    passed += r.layers.empty() ? 0 : double(r.n_layers_passed) / double(r.layers.size());
    const TtftBreakdown& b = r.breakdown;
    bd.match_ms += b.match_ms;
    bd.probe_io_ms += b.probe_io_ms;
    bd.probe_compute_ms += b.probe_compute_ms;
    bd.probe_score_ms += b.probe_score_ms;
    bd.kv_io_ms += b.kv_io_ms;
    bd.copy_ms += b.copy_ms;
    bd.compute_ms += b.compute_ms;
    bd.io_wait_ms += b.io_wait_ms;
    bd.other_ms += b.other_ms;
  }
  SystemSummary Summary() const {
    SystemSummary s;
    s.system = system;
    const int n = int(ttft.size());
    s.n_requests = n;
    if (n == 0) return s;
    std::vector<double> sorted = ttft;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double t : ttft) sum += t;
    s.mean_ttft_ms = sum / n;
    s.p50_ttft_ms = n % 2 ? sorted[size_t(n / 2)] : (sorted[size_t(n / 2 - 1)] + sorted[size_t(n / 2)]) / 2;
    s.p99_ttft_ms = sorted[size_t(std::min<double>(n - 1, std::ceil(0.99 * n) - 1))];
    s.probe_share = probe_share / n;
    s.unhidden_io_share = io_share / n;
    s.mean_ssd_bytes = ssd / n;
    s.mean_kv_bytes = kv / n;
    s.mean_breakdown_error = err_sum / n;
    s.max_breakdown_error = err_max;
    s.first_token_agreement = agree / n;
    s.mean_kl = kl / n;
    s.max_kl = kl_max;
    s.mean_read_amplification = amp / n;
    s.mean_chunks_ssd = chunks / n;
    s.mean_ssd_reads = reads / n;
    s.layers_passed = passed / n;
    s.mean_breakdown = bd;
    for (double* p : {&s.mean_breakdown.match_ms, &s.mean_breakdown.probe_io_ms, &s.mean_breakdown.probe_compute_ms,
                      &s.mean_breakdown.probe_score_ms, &s.mean_breakdown.kv_io_ms, &s.mean_breakdown.copy_ms,
                      &s.mean_breakdown.compute_ms, &s.mean_breakdown.io_wait_ms, &s.mean_breakdown.other_ms}) {
      *p /= n;
    }
    return s;
  }
};

}  // namespace

Result<PipelineBenchResult> RunPipelineBenchmark(ModelContext& ctx, const PipelineBenchOptions& o) {
  PipelineBenchResult result;
  IMPRESS_ASSIGN_OR_RETURN(Document doc, LoadDocument(o.document));
  IMPRESS_ASSIGN_OR_RETURN(std::vector<std::string> questions, ReadQuestions(o.questions, o.n_questions));
  result.n_questions = int(questions.size());

  const std::filesystem::path dir = std::filesystem::path(o.store_dir) / fmt::format("pipeline-bench-{}", ::getpid());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(d, e);
    }
  } cleanup{dir};

  // The document lives only on the SSD: no device or host tier. A compact encoding also gets an
  // fp16 copy of the same ingest, the reference every question is judged against.
  const bool compact = o.kv_encoding != store::KVEncoding::kF16;
  store::PrefixStoreOptions so = StoreOptionsFor(ctx.config(), o.settings.probe_heads, o.settings.probe_spread);
  if (o.chunk_tokens > 0) so.chunk_tokens = o.chunk_tokens;
  so.dir = (dir / "main").string();
  so.device_bytes = 0;
  so.host_bytes = 0;
  so.reorder_interval = std::chrono::milliseconds(0);
  so.kv_encoding = o.kv_encoding;
  so.probe_encoding = o.probe_encoding;
  IMPRESS_ASSIGN_OR_RETURN(auto st, store::PrefixStore::Open(so));
  std::unique_ptr<store::PrefixStore> ref_st;
  if (compact) {
    store::PrefixStoreOptions ro = so;
    ro.dir = (dir / "fp16").string();
    ro.kv_encoding = store::KVEncoding::kF16;
    IMPRESS_ASSIGN_OR_RETURN(ref_st, store::PrefixStore::Open(ro));
  }
  ImpressPipeline pipe(ctx, st.get());
  std::unique_ptr<ImpressPipeline> ref_pipe;
  if (compact) ref_pipe = std::make_unique<ImpressPipeline>(ctx, ref_st.get());

  Conversation conv;
  conv.AddDocument(std::move(doc));
  std::vector<PromptTokens> prompts;
  for (const std::string& q : questions) prompts.push_back(conv.Build(q, ctx.tokenizer(), ctx.chat_template()));
  result.n_document_tokens = prompts[0].n_prefix;

  // Full KV already resident in host memory (what an in-memory prompt cache gives): a third
  // store whose host tier holds the whole document (with room to spare), filled as the ingest is
  // stored.
  store::PrefixStoreOptions mo = so;
  mo.dir = (dir / "ram").string();
  mo.kv_encoding = store::KVEncoding::kF16;
  mo.probe_encoding.reset();
  mo.host_bytes = 2 * KvBytes(ctx.config(), int64_t(result.n_document_tokens) + 1024);
  mo.admit_on_insert = true;
  IMPRESS_ASSIGN_OR_RETURN(auto ram_st, store::PrefixStore::Open(mo));
  ImpressPipeline ram_pipe(ctx, ram_st.get());

  const int total_steps = 1 + result.n_questions * (compact ? 8 : 7);
  int step = 0;
  auto tick = [&](const char* what) {
    return ReportProgress(o.progress, uint64_t(++step), uint64_t(total_steps), what);
  };

  // Ingest: one full prefill of the document, stored (in both stores when compact).
  std::vector<float> logits;
  PipelineSettings s = o.settings;
  s.system = SystemKind::kRecomp;
  s.report_importance = false;
  {
    IMPRESS_ASSIGN_OR_RETURN(RequestReport r, pipe.Prefill({prompts[0].tokens, prompts[0].n_prefix}, s, 0, &logits,
                                                           [&](uint64_t d, uint64_t t, std::string_view) {
                                                             return ReportProgress(o.progress, d, t, "ingest");
                                                           }));
    result.ingest_ms = r.ttft_ms;
    result.recomp_ttft_ms = r.ttft_ms;
    for (store::PrefixStore* into : {st.get(), ref_st.get(), ram_st.get()}) {
      if (!into) continue;
      pipe.StoreAsync(size_t(prompts[0].n_prefix), into);
      IMPRESS_ASSIGN_OR_RETURN(uint64_t stored, pipe.WaitForStore());
      if (stored != uint64_t(prompts[0].n_prefix)) {
        return Status::Internal(fmt::format("stored {} of {} document tokens", stored, prompts[0].n_prefix));
      }
    }
  }
  tick("ingest");

  const std::vector<SystemKind> systems = {SystemKind::kAsLike, SystemKind::kAsH2oLru, SystemKind::kAsH2oLfu,
                                           SystemKind::kImpress};
  // Rows: the systems, IMPRESS after reorder, the fp16 reference when compact, IMPRESS with every
  // layer's own probe deciding (no predicted selection: PipelineSettings::predict_select) with and
  // without predicted reads (predict_next: its tokens and logits, read sooner) and after reorder,
  // then AS-like with the full KV resident in host memory.
  std::vector<Accumulator> acc(systems.size() + (compact ? 6 : 5));
  for (size_t i = 0; i < systems.size(); ++i) acc[i].system = SystemName(systems[i]);
  acc[systems.size()].system = "impress (after reorder)";
  if (compact) acc[systems.size() + 1].system = "as (fp16 reference)";
  Accumulator& own = acc[acc.size() - 4];
  own.system = "impress (own probe)";
  Accumulator& own_predicted = acc[acc.size() - 3];
  own_predicted.system = "impress (own probe, predicted)";
  Accumulator& own_ro = acc[acc.size() - 2];
  own_ro.system = "impress (own probe, reordered)";
  Accumulator& in_ram = acc.back();
  in_ram.system = "as (full KV in RAM)";
  std::vector<int32_t> ref_first(prompts.size());
  std::vector<std::vector<float>> ref_logits(prompts.size());
  auto settings_for = [&](SystemKind sys) {
    PipelineSettings ps = o.settings;
    ps.system = sys;
    ps.report_importance = System(sys).traits().reorders;  // reorder follows the verdicts of those that reorder
    return ps;
  };
  auto run = [&](ImpressPipeline& p, size_t q, const PipelineSettings& ps) -> Result<RequestReport> {
    IMPRESS_ASSIGN_OR_RETURN(RequestReport r, p.Prefill({prompts[q].tokens, prompts[q].n_prefix}, ps, 0, &logits));
    if (r.n_matched != prompts[q].n_prefix) {
      return Status::Internal(
          fmt::format("question {}: matched {} of {} prefix tokens", q, r.n_matched, prompts[q].n_prefix));
    }
    return r;
  };

  for (size_t q = 0; q < prompts.size(); ++q) {
    if (compact) {
      IMPRESS_ASSIGN_OR_RETURN(RequestReport r, run(*ref_pipe, q, settings_for(SystemKind::kAsLike)));
      ref_first[q] = Argmax(logits);
      ref_logits[q] = logits;
      acc[systems.size() + 1].Add(r, true, 0.0);
      tick("reference");
    }
    for (size_t i = 0; i < systems.size(); ++i) {
      IMPRESS_ASSIGN_OR_RETURN(RequestReport r, run(pipe, q, settings_for(systems[i])));
      if (!compact && systems[i] == SystemKind::kAsLike) {
        ref_first[q] = Argmax(logits);
        ref_logits[q] = logits;
      }
      acc[i].Add(r, Argmax(logits) == ref_first[q], SoftmaxKl(ref_logits[q], logits));
      tick(SystemName(systems[i]));
    }
    for (const bool predicted : {false, true}) {
      PipelineSettings ps = settings_for(SystemKind::kImpress);
      ps.predict_select = false;
      ps.predict_next = predicted;
      ps.report_importance = false;  // the statistics reorder follows count each question once
      IMPRESS_ASSIGN_OR_RETURN(RequestReport r, run(pipe, q, ps));
      (predicted ? own_predicted : own).Add(r, Argmax(logits) == ref_first[q], SoftmaxKl(ref_logits[q], logits));
      tick(predicted ? "impress (own probe, predicted reads)" : "impress (own probe)");
    }
    IMPRESS_ASSIGN_OR_RETURN(RequestReport r, run(ram_pipe, q, settings_for(SystemKind::kAsLike)));
    if (r.chunks_ssd != 0) return Status::Internal("the in-RAM reference read from the SSD");
    in_ram.Add(r, Argmax(logits) == ref_first[q], SoftmaxKl(ref_logits[q], logits));
    tick("as (full KV in RAM)");
  }

  IMPRESS_ASSIGN_OR_RETURN(store::ReorderReport rr, st->ReorderNow());
  result.segments_reordered = rr.segments_reordered;
  for (size_t q = 0; q < prompts.size(); ++q) {
    PipelineSettings ps = settings_for(SystemKind::kImpress);
    ps.report_importance = false;
    IMPRESS_ASSIGN_OR_RETURN(RequestReport r, run(pipe, q, ps));
    acc[systems.size()].Add(r, Argmax(logits) == ref_first[q], SoftmaxKl(ref_logits[q], logits));
    tick("impress after reorder");
    ps.predict_select = false;
    IMPRESS_ASSIGN_OR_RETURN(r, run(pipe, q, ps));
    own_ro.Add(r, Argmax(logits) == ref_first[q], SoftmaxKl(ref_logits[q], logits));
    tick("impress after reorder, own probe");
  }

  for (const Accumulator& a : acc) result.systems.push_back(a.Summary());
  const SystemSummary& as = compact ? result.systems[systems.size() + 1] : result.systems[0];
  const SystemSummary& lfu = result.systems[2];
  const SystemSummary& imp = result.systems[3];
  const SystemSummary& imp_ro = result.systems[4];
  result.impress_vs_as_bytes = as.mean_ssd_bytes > 0 ? imp.mean_ssd_bytes / as.mean_ssd_bytes : 0;
  result.reorder_vs_as_bytes = as.mean_ssd_bytes > 0 ? imp_ro.mean_ssd_bytes / as.mean_ssd_bytes : 0;
  result.impress_vs_h2o_bytes = lfu.mean_ssd_bytes > 0 ? imp.mean_ssd_bytes / lfu.mean_ssd_bytes : 0;
  result.ttft_speedup_vs_h2o = imp.mean_ttft_ms > 0 ? lfu.mean_ttft_ms / imp.mean_ttft_ms : 0;
  result.ttft_speedup_vs_h2o_reorder = imp_ro.mean_ttft_ms > 0 ? lfu.mean_ttft_ms / imp_ro.mean_ttft_ms : 0;
  result.read_amp_before_reorder = imp.mean_read_amplification;
  result.read_amp_after_reorder = imp_ro.mean_read_amplification;
  const store::StoreStats stats = st->Stats();
  result.io_engine = stats.io_engine;
  result.chunk_tokens = st->options().chunk_tokens;
  result.direct_io = stats.direct_io;
  return result;
}

namespace {

// Device memory for the kernel timing, freed with the backend's Free.
struct DevBuffers {
  Backend& be;
  std::vector<DevPtr<void>> ptrs;
  ~DevBuffers() {
    for (DevPtr<void> p : ptrs) be.Free(p);
  }
  template <class T>
  Result<DevPtr<T>> Upload(const std::vector<T>& host) {
    IMPRESS_ASSIGN_OR_RETURN(DevPtr<T> d, AllocArray<T>(be, host.size()));
    ptrs.push_back(DevPtr<void>(d.raw()));
    be.CopyToDevice(DevPtr<void>(d.raw()), host.data(), host.size() * sizeof(T));
    return d;
  }
};

// Best of `repeats` calls of fn, in ms: the loaded machine's noise only ever adds time.
template <class Fn>
Result<double> BestMs(int repeats, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    IMPRESS_RETURN_IF_ERROR(fn());
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

Result<QuestionKernelTimes> TimeQuestionKernels(Backend& be, const ModelConfig& c, int n_new, int n_selected,
                                                int n_document, int probe_heads, bool probe_spread, int repeats) {
  const int hd = c.head_dim, n_kv = c.n_head_kv, group = c.n_head / c.n_head_kv;
  QuestionKernelTimes t;
  t.n_new = n_new;
  t.n_selected = n_selected;
  t.n_document = n_document;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  auto halves = [&](size_t n) {
    std::vector<f16_t> v(n);
    for (f16_t& x : v) x = Fp32ToFp16(nd(rng));
    return v;
  };
  DevBuffers buf{be, {}};
  const size_t row = size_t(n_kv) * hd;
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<float> q, buf.Upload(floats(size_t(n_new) * c.n_head * hd)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<f16_t> k_new, buf.Upload(halves(size_t(n_new) * row)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<f16_t> v_new, buf.Upload(halves(size_t(n_new) * row)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<f16_t> k_sel, buf.Upload(halves(size_t(n_selected) * row)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<f16_t> v_sel, buf.Upload(halves(size_t(n_selected) * row)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<float> out, buf.Upload(std::vector<float>(size_t(n_new) * c.n_head * hd)));

  AttentionArgs a;
  static_cast<AttentionQuery&>(a) = MakeAttentionQuery(n_new, c.n_head, n_kv, hd, q, k_new);
  a.v_new = v_new;
  a.n_prefix = n_selected;
  a.k_prefix = k_sel;
  a.v_prefix = v_sel;
  a.out = out;
  IMPRESS_ASSIGN_OR_RETURN(t.attention_ms, BestMs(repeats, [&] { return be.Attention(a); }));
  // QK^T and PV: 2 * 2 * heads * rows * keys * head_dim (the causal triangle of the new tokens
  // counted whole: it is small next to the prefix).
  const double attn_flop = 4.0 * c.n_head * n_new * double(n_selected + n_new) * hd;
  t.attention_gflops = attn_flop / (t.attention_ms * 1e6);

  const std::vector<int> heads = ProbeQueryHeads(c, probe_heads, probe_spread);
  const std::vector<int> kv_heads = ProbeKvHeads(c, probe_heads, probe_spread);
  t.probe_heads = int(heads.size());
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<f16_t> k_doc, buf.Upload(halves(size_t(n_document) * kv_heads.size() * hd)));
  IMPRESS_ASSIGN_OR_RETURN(DevPtr<float> imp, buf.Upload(std::vector<float>(heads.size() * size_t(n_document))));
  ScoreKeysArgs s;
  static_cast<AttentionQuery&>(s) = MakeAttentionQuery(n_new, c.n_head, n_kv, hd, q, k_new);
  s.n_prefix = n_document;
  s.k_prefix = k_doc;
  s.prefix_kv_heads = kv_heads;
  s.query_heads = heads;
  s.importance = imp;
  IMPRESS_ASSIGN_OR_RETURN(t.score_ms, BestMs(repeats, [&] { return be.ScoreKeys(s); }));
  t.score_gflops = 2.0 * double(heads.size()) * n_new * double(n_document + n_new) * hd / (t.score_ms * 1e6);
  if (be.HostAddressable()) {
    // The probe as the pipeline runs it by default: the same keys as int4 records.
    std::vector<f16_t> k_host(size_t(n_document) * kv_heads.size() * hd);
    be.CopyToHost(k_host.data(), DevPtr<const void>(k_doc.raw()), k_host.size() * sizeof(f16_t));
    const int n_slots = int(kv_heads.size());
    std::vector<uint8_t> records(size_t(n_document) * store::RecordBytes(store::KVEncoding::kInt4, n_slots, hd));
    store::EncodeRecords(store::KVEncoding::kInt4, k_host.data(), size_t(n_slots) * hd, size_t(n_document), n_slots, hd,
                         nullptr, records.data());
    ScoreKeysArgs coded = s;
    coded.k_prefix = {};
    coded.code_bits = 4;
    coded.key_codes = records.data();
    IMPRESS_ASSIGN_OR_RETURN(t.score_int4_ms, BestMs(repeats, [&] { return be.ScoreKeys(coded); }));
  }

  // The reference: one fp32 sgemm per KV head of its group's queries times the selected keys,
  // the product the attention's first half computes.
  const int m = group * n_new, n = n_selected + n_new;
  const std::vector<float> qa = floats(size_t(m) * hd), ka = floats(size_t(n) * hd);
  std::vector<float> ca(size_t(m) * n);
  IMPRESS_ASSIGN_OR_RETURN(const double gemm_ms, BestMs(repeats, [&] {
                             for (int g = 0; g < n_kv; ++g) HostSgemmNT(m, n, hd, qa.data(), ka.data(), ca.data());
                             return Status::Ok();
                           }));
  t.sgemm_gflops = 2.0 * n_kv * m * double(n) * hd / (gemm_ms * 1e6);
  return t;
}

}  // namespace impress
