// RunEngineBenchmark: see engine-bench.h.
#include "bench/engine-bench.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "bench/forward-timing.h"
#include "engine/compute/cpu-backend.h"

namespace impress {

namespace {

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux: KiB
}

// sgemm GFLOP/s on one layer's GEMMs (M = m rows), best of 4 passes.
double MeasureSgemm(const ModelConfig& c, int m) {
  const std::vector<LayerGemm> shapes = LayerGemmShapes(c);
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
    best = std::max(best, flops / SecondsSince(t0) / 1e9);
  }
  return best;
}

}  // namespace

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& o) {
  const ModelConfig& c = model.config;
  EngineBenchResult r;
  r.n_threads = o.n_threads;
  auto backend = MakeCpuBackend({o.n_threads});
  r.kernel_path = backend->KernelPath();
  const int n_steps = 5;
  IMPRESS_ASSIGN_OR_RETURN(r.speed, TimeForward(model, *backend, o.forward, o.progress, n_steps));
  r.prefill_gflops = r.speed.prefill_flop_s / 1e9;

  IMPRESS_RETURN_IF_ERROR(BenchStep(o.progress, 4, n_steps, "sgemm"));
  SetBlasThreads(o.n_threads);
  r.sgemm_gflops = MeasureSgemm(c, std::min(o.forward.ubatch, r.speed.n_prefill_short));
  r.prefill_vs_sgemm = r.sgemm_gflops > 0 ? r.prefill_gflops / r.sgemm_gflops : 0;
  r.peak_rss_mb = PeakRssMb();
  r.weights_mb = WeightsMb(model);
  r.kv_cache_mb = KvCacheMb(c, r.speed.n_cache);
  IMPRESS_RETURN_IF_ERROR(BenchStep(o.progress, n_steps, n_steps, "done"));
  spdlog::info(
      "engine bench: prefill {:.0f} tok/s @{} , {:.0f} tok/s @{}, decode {:.1f} tok/s ({:.1f} @{}), prefill "
      "{:.1f} GFLOP/s vs sgemm {:.1f} GFLOP/s, peak RSS {:.0f} MB, kernels {}",
      r.speed.prefill_tok_s_short, r.speed.n_prefill_short, r.speed.prefill_tok_s_long, r.speed.n_prefill_long,
      r.speed.decode_tok_s, r.speed.decode_tok_s_long_ctx, r.speed.n_decode_ctx, r.prefill_gflops, r.sgemm_gflops,
      r.peak_rss_mb, r.kernel_path);
  return r;
}

}  // namespace impress
