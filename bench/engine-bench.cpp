// RunEngineBenchmark: see engine-bench.h.
#include "bench/engine-bench.h"

#include <immintrin.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "bench/forward-timing.h"
#include "engine/compute/cpu-backend.h"
#include "engine/compute/forward.h"

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

// Tokens/s and counted FLOP/s of the fastest of n_runs prefills of n tokens from an empty cache.
struct PrefillRate {
  double tok_s = 0, flop_s = 0;
};
Result<PrefillRate> TimePrefill(Generator& gen, Backend& backend, int n, int n_runs, int n_vocab) {
  std::vector<int32_t> toks(static_cast<size_t>(n));
  std::mt19937 rng(static_cast<uint32_t>(n));
  for (auto& t : toks) t = int32_t(rng() % uint32_t(n_vocab));
  std::vector<float> logits;
  PrefillRate best;
  for (int rep = 0; rep < n_runs; ++rep) {
    gen.Reset();
    backend.ResetFlops();
    const auto t0 = std::chrono::steady_clock::now();
    IMPRESS_RETURN_IF_ERROR(gen.Eval(toks, &logits));
    const double s = SecondsSince(t0);
    if (n / s > best.tok_s) best = PrefillRate{n / s, backend.Flops() / s};
  }
  return best;
}

}  // namespace

double MeasureReadBandwidth(int n_threads, size_t bytes, int passes) {
  n_threads = std::max(1, n_threads);
  bytes = bytes / (size_t(n_threads) * 128) * (size_t(n_threads) * 128);
  if (bytes == 0) return 0;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 0;
  auto* buf = static_cast<const uint8_t*>(mem);
  std::memset(mem, 1, bytes);
  const size_t part = bytes / size_t(n_threads);
  std::vector<int64_t> sink(size_t(n_threads) * 8);  // one cache line per thread
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back([&, t] {
        const uint8_t* p = buf + part * size_t(t);
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256()};
        for (size_t off = 0; off < part; off += 128) {
          for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_add_epi64(acc[k], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 32 * k)));
        }
        const __m256i s = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
        sink[size_t(t) * 8] = _mm256_extract_epi64(s, 0);  // keeps the loads
      });
    }
    for (auto& th : threads) th.join();
    best = std::max(best, double(bytes) / SecondsSince(t0) / 1e9);
  }
  munmap(mem, bytes);
  return best;
}

Result<EngineBenchResult> RunEngineBenchmark(const Model& model, const EngineBenchOptions& o) {
  const ModelConfig& c = model.config;
  EngineBenchResult r;
  r.n_threads = o.n_threads;
  auto backend = MakeCpuBackend({o.n_threads});
  r.kernel_path = backend->KernelPath();
  const int n_steps = 6;
  IMPRESS_ASSIGN_OR_RETURN(r.speed, TimeForward(model, *backend, o.forward, o.progress, n_steps));
  r.prefill_gflops = r.speed.prefill_flop_s / 1e9;

  IMPRESS_RETURN_IF_ERROR(BenchStep(o.progress, 4, n_steps, "small batches"));
  {
    const int n_big = r.speed.n_prefill_short;
    IMPRESS_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, *backend, {std::max(64, n_big), o.forward.ubatch}));
    const int n_runs = std::max(3, o.forward.repeats);
    double* const tok_s[] = {&r.prefill_tok_s_16, &r.prefill_tok_s_32, &r.prefill_tok_s_64};
    for (int i = 0; i < 3; ++i) {
      const int n = 16 << i;
      IMPRESS_ASSIGN_OR_RETURN(const PrefillRate rate, TimePrefill(*gen, *backend, n, n_runs, c.n_vocab));
      *tok_s[i] = rate.tok_s;
      if (n == 32) r.question_gflops = rate.flop_s / 1e9;
    }
    // The fraction from pairs of runs back to back (32 rows, the faster of two, then the large
    // batch), the median of their ratios: the two best rates, measured minutes apart, moved with
    // the machine's load (from 0.67 to 1.02 within an hour on a shared VM).
    std::vector<double> ratios;
    for (int pair = 0; pair < n_runs && n_big > 32; ++pair) {
      IMPRESS_ASSIGN_OR_RETURN(const PrefillRate small, TimePrefill(*gen, *backend, 32, 2, c.n_vocab));
      IMPRESS_ASSIGN_OR_RETURN(const PrefillRate big, TimePrefill(*gen, *backend, n_big, 1, c.n_vocab));
      if (big.flop_s > 0) ratios.push_back(small.flop_s / big.flop_s);
    }
    if (!ratios.empty()) {
      std::sort(ratios.begin(), ratios.end());
      const size_t h = ratios.size() / 2;
      r.question_gflops_frac = ratios.size() % 2 ? ratios[h] : (ratios[h - 1] + ratios[h]) / 2;
    }
  }
  IMPRESS_RETURN_IF_ERROR(BenchStep(o.progress, 5, n_steps, "sgemm"));
  SetBlasThreads(o.n_threads);
  r.sgemm_gflops = MeasureSgemm(c, std::min(o.forward.ubatch, r.speed.n_prefill_short));
  r.prefill_vs_sgemm = r.sgemm_gflops > 0 ? r.prefill_gflops / r.sgemm_gflops : 0;
  r.peak_rss_mb = PeakRssMb();  // before the probe, whose buffer is no part of the engine
  r.weights_mb = WeightsMb(model);
  r.kv_cache_mb = KvCacheMb(c, r.speed.n_cache);
  r.model_file_mb = o.model_file_bytes > 0 ? o.model_file_bytes / (1 << 20) : r.weights_mb;
  r.rss_vs_file_kv = r.peak_rss_mb / std::max(1.0, r.model_file_mb + r.kv_cache_mb);
  r.weights_bytes_per_token = DecodeWeightBytes(model);
  const double mean_ctx = r.speed.n_prefill_short + r.speed.n_decode / 2.0;
  r.decode_bytes_per_token = r.weights_bytes_per_token + KvCacheMb(c, 1) * (1 << 20) * mean_ctx;
  if (o.bw_probe_bytes > 0) r.mem_bw_gbs = MeasureReadBandwidth(o.n_threads, o.bw_probe_bytes);
  if (r.mem_bw_gbs > 0) r.decode_bw_fraction = r.decode_bytes_per_token * r.speed.decode_tok_s / (r.mem_bw_gbs * 1e9);
  if (r.speed.n_decode_ctx == 8000) r.decode_tok_s_8k = r.speed.decode_tok_s_long_ctx;
  if (r.speed.n_decode_ctx > 0) {
    if (r.speed.prefill_tok_s_short > 0)
      r.prefill_ctx_vs_short = r.speed.prefill_tok_s_ctx / r.speed.prefill_tok_s_short;
    const double ctx = r.speed.n_decode_ctx + r.speed.n_decode / 2.0;
    r.decode_bytes_per_token_ctx = r.weights_bytes_per_token + KvCacheMb(c, 1) * (1 << 20) * ctx;
    if (r.mem_bw_gbs > 0)
      r.decode_bw_fraction_ctx = r.decode_bytes_per_token_ctx * r.speed.decode_tok_s_long_ctx / (r.mem_bw_gbs * 1e9);
    const double n = r.speed.n_decode_ctx;
    const double extra_s = (r.speed.prefill_tok_s_ctx > 0 && r.speed.prefill_tok_s_short > 0)
                               ? n / r.speed.prefill_tok_s_ctx - n / r.speed.prefill_tok_s_short
                               : 0;
    const double attn_flops = 4.0 * c.n_head * c.head_dim * c.n_layer * n * (n + 1) / 2;
    if (extra_s > 0) r.attention_gflops_ctx = attn_flops / extra_s / 1e9;
  }
  IMPRESS_RETURN_IF_ERROR(BenchStep(o.progress, n_steps, n_steps, "done"));
  spdlog::info(
      "engine bench: prefill {:.0f} tok/s @{} , {:.0f} tok/s @{}, {:.1f}/{:.1f}/{:.1f} tok/s @16/32/64 ({:.2f} of "
      "the GFLOP/s @32), decode {:.1f} tok/s ({:.1f} @{}, {:.2f} of memory speed; prefill of that context {:.1f} "
      "tok/s), prefill "
      "{:.1f} GFLOP/s vs sgemm {:.1f} GFLOP/s, peak RSS {:.0f} MB, kernels {}, memory {:.1f} GB/s (decode at {:.2f} "
      "of it)",
      r.speed.prefill_tok_s_short, r.speed.n_prefill_short, r.speed.prefill_tok_s_long, r.speed.n_prefill_long,
      r.prefill_tok_s_16, r.prefill_tok_s_32, r.prefill_tok_s_64, r.question_gflops_frac, r.speed.decode_tok_s,
      r.speed.decode_tok_s_long_ctx, r.speed.n_decode_ctx, r.decode_bw_fraction_ctx, r.speed.prefill_tok_s_ctx,
      r.prefill_gflops, r.sgemm_gflops, r.peak_rss_mb, r.kernel_path, r.mem_bw_gbs, r.decode_bw_fraction);
  return r;
}

}  // namespace impress
