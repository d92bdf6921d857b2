#include "bench/engine-bench.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"

namespace impress {

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux: KiB
}

// sgemm GFLOP/s on one layer's GEMMs: (m, n_out, n_in) for Q, K, V, O, gate, up, down.
double MeasureSgemm(const ModelConfig& c, int m) {
  const int e = c.n_embd, nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim, ff = c.n_ff;
  struct Shape { int n, k; };
  std::vector<Shape> shapes = {{nq, e}, {nkv, e}, {nkv, e}, {e, nq}, {ff, e}, {e, ff}};
  if (c.arch == Arch::kLlama) shapes.push_back({ff, e});
  size_t max_w = 0, max_k = 0, max_n = 0;
  for (auto s : shapes) {
    max_w = std::max(max_w, size_t(s.n) * s.k);
    max_k = std::max<size_t>(max_k, s.k);
    max_n = std::max<size_t>(max_n, s.n);
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(size_t(m) * max_k), w(max_w), out(size_t(m) * max_n);
  for (auto& x : a) x = u(rng);
  for (auto& x : w) x = u(rng);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto s : shapes) {
      HostSgemmNT(m, s.n, s.k, a.data(), w.data(), out.data());
      flops += 2.0 * m * s.n * s.k;
    }
    best = std::max(best, flops / Seconds(t0) / 1e9);
  }
  return best;
}

}  // namespace

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& o) {
  const ModelConfig& c = model.config;
  EngineBenchResult r;
  r.n_threads = o.n_threads;
  auto backend = MakeCpuBackend({o.n_threads});
  int n_ctx = c.n_ctx_train > 0 ? c.n_ctx_train : 4096;
  if (c.arch == Arch::kOpt) n_ctx = std::min<int>(n_ctx, int(model.weights.pos_embd.rows()) - c.pos_offset);
  r.n_prefill_long = std::min(o.n_prefill_long, n_ctx);
  r.n_prefill_short = std::min(o.n_prefill_short, r.n_prefill_long);
  r.n_decode = std::max(1, std::min(o.n_decode, n_ctx - r.n_prefill_short));
  const int cache = std::max(r.n_prefill_long, r.n_prefill_short + r.n_decode);
  IMPRESS_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, *backend, {cache, o.ubatch}));

  std::mt19937 rng(7);
  std::vector<int32_t> toks(std::max(r.n_prefill_long, r.n_prefill_short + r.n_decode));
  for (auto& t : toks) t = int32_t(rng() % c.n_vocab);
  std::vector<float> logits;
  auto step = [&](uint64_t done, std::string_view what) {
    return ReportProgress(o.progress, done, 5, what) ? Status::Ok() : Status::Cancelled("benchmark cancelled");
  };

  // Warm-up (first touch of the weights and buffers).
  IMPRESS_RETURN_IF_ERROR(step(0, "warm-up"));
  IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(std::min(64, r.n_prefill_short)), &logits));

  IMPRESS_RETURN_IF_ERROR(step(1, "prefill short"));
  double best_s = 1e30, flops = 0;
  for (int rep = 0; rep < std::max(1, o.repeats); ++rep) {
    gen->Reset();
    backend->ResetFlops();
    const auto t0 = std::chrono::steady_clock::now();
    IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(r.n_prefill_short), &logits));
    const double s = Seconds(t0);
    if (s < best_s) {
      best_s = s;
      flops = backend->Flops();
    }
  }
  r.prefill_tok_s_512 = r.n_prefill_short / best_s;
  r.prefill_gflops = flops / best_s / 1e9;

  IMPRESS_RETURN_IF_ERROR(step(2, "decode"));
  {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < r.n_decode; ++i)
      IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).subspan(r.n_prefill_short + i, 1), &logits));
    r.decode_tok_s = r.n_decode / Seconds(t0);
  }

  IMPRESS_RETURN_IF_ERROR(step(3, "prefill long"));
  best_s = 1e30;
  for (int rep = 0; rep < std::max(1, o.repeats - 1); ++rep) {
    gen->Reset();
    const auto t0 = std::chrono::steady_clock::now();
    IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(r.n_prefill_long), &logits));
    best_s = std::min(best_s, Seconds(t0));
  }
  r.prefill_tok_s_4096 = r.n_prefill_long / best_s;

  IMPRESS_RETURN_IF_ERROR(step(4, "sgemm"));
  SetBlasThreads(o.n_threads);
  r.sgemm_gflops = MeasureSgemm(c, std::min(o.ubatch, r.n_prefill_short));
  r.prefill_vs_sgemm = r.sgemm_gflops > 0 ? r.prefill_gflops / r.sgemm_gflops : 0;
  r.peak_rss_mb = PeakRssMb();
  size_t n_weights = model.weights.tok_embd.data.size() + model.weights.output.data.size() +
                     model.weights.pos_embd.data.size();
  for (const auto& l : model.weights.layers)
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n_weights += t->data.size();
  r.weights_mb = n_weights * 4.0 / (1 << 20);
  r.kv_cache_mb = 2.0 * c.n_layer * cache * c.n_head_kv * c.head_dim * 2.0 / (1 << 20);
  IMPRESS_RETURN_IF_ERROR(step(5, "done"));
  spdlog::info("engine bench: prefill {:.0f} tok/s @{} , {:.0f} tok/s @{}, decode {:.1f} tok/s, prefill {:.1f} GFLOP/s "
               "vs sgemm {:.1f} GFLOP/s, peak RSS {:.0f} MB",
               r.prefill_tok_s_512, r.n_prefill_short, r.prefill_tok_s_4096, r.n_prefill_long, r.decode_tok_s,
               r.prefill_gflops, r.sgemm_gflops, r.peak_rss_mb);
  return r;
}

}  // namespace impress
