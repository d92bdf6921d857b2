// RunCudaEngineBenchmark: see cuda-bench.h. Only public engine APIs: it builds with or without
// CUDA (without, MakeCudaBackend says why it cannot run).
#include "bench/cuda-bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/forward-timing.h"

namespace impress {

namespace {

// The layer's GEMMs (n_out, n_in): Q, K, V, O, up, down (+ gate for Llama), M = m rows, through
// the backend with mapped (weight) right operands as the forward pass issues them.
Result<double> ModelGemmTflops(Backend& be, const ModelConfig& c, int m, int repeats) {
  const std::vector<LayerGemm> shapes = LayerGemmShapes(c);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<std::vector<float>> host_w;
  std::vector<DevPtr<const float>> w;
  size_t max_k = 0, max_n = 0;
  for (const LayerGemm& s : shapes) {
    host_w.emplace_back(size_t(s.n) * s.k);
    for (float& x : host_w.back()) x = u(rng);
    IMPRESS_ASSIGN_OR_RETURN(auto p, be.MapConstant(host_w.back().data(), host_w.back().size()));
    w.push_back(p);
    max_k = std::max<size_t>(max_k, s.k);
    max_n = std::max<size_t>(max_n, s.n);
  }
  auto cleanup = [&] {
    be.Synchronize();
    for (auto p : w) be.ReleaseConstant(p);
  };
  auto act = AllocArray<float>(be, size_t(m) * max_k);
  auto out = AllocArray<float>(be, size_t(m) * max_n);
  if (!act.ok() || !out.ok()) {
    cleanup();
    return act.ok() ? out.status() : act.status();
  }
  std::vector<float> host_act(size_t(m) * max_k);
  for (float& x : host_act) x = u(rng);
  be.CopyToDevice(DevPtr<void>(act->raw()), host_act.data(), host_act.size() * sizeof(float));
  auto pass = [&] {
    for (size_t i = 0; i < shapes.size(); ++i)
      be.Gemm(Trans::kNo, Trans::kYes, m, shapes[i].n, shapes[i].k, 1.0f, *act, shapes[i].k, w[i], shapes[i].k, 0.0f,
              *out, shapes[i].n);
  };
  pass();  // warm-up: half copies of the weights, cuBLAS heuristics
  be.Synchronize();
  double flops = 0;
  for (const LayerGemm& s : shapes) flops += 2.0 * m * s.n * s.k;
  double best = 0;
  const int n_iter = 20;
  for (int rep = 0; rep < std::max(1, repeats); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_iter; ++i) pass();
    be.Synchronize();
    best = std::max(best, flops * n_iter / SecondsSince(t0) / 1e12);
  }
  be.Free(DevPtr<void>(act->raw()));
  be.Free(DevPtr<void>(out->raw()));
  cleanup();
  IMPRESS_RETURN_IF_ERROR(CudaBackendStatus(be));
  return best;
}

}  // namespace

Result<CudaBenchResult> RunCudaEngineBenchmark(const Model& model, const CudaBenchOptions& o) {
  const ModelConfig& c = model.config;
  CudaBenchResult r;
  IMPRESS_ASSIGN_OR_RETURN(r.device, CudaDeviceDescription(o.device));
  IMPRESS_ASSIGN_OR_RETURN(auto backend, MakeCudaBackend(CudaBackendOptions{o.device, o.gemm}));
  r.backend = backend->Name();
  CudaGemmPrecision gemm = o.gemm;
  if (const char* env = std::getenv("IMPRESS_CUDA_GEMM"); env && *env) {
    IMPRESS_ASSIGN_OR_RETURN(gemm, ParseCudaGemmPrecision(env));
  }
  const int n_steps = 6;
  IMPRESS_ASSIGN_OR_RETURN(r.speed, TimeForward(model, *backend, o.forward, o.progress, n_steps,
                                                [&] { return CudaBackendStatus(*backend); }));
  r.prefill_tflops = r.speed.prefill_flop_s / 1e12;
  auto step = [&](uint64_t done, std::string_view what) { return BenchStep(o.progress, done, n_steps, what); };

  IMPRESS_RETURN_IF_ERROR(step(4, "model GEMMs"));
  IMPRESS_ASSIGN_OR_RETURN(
      r.model_gemm_tflops,
      ModelGemmTflops(*backend, c, std::min(o.forward.ubatch, r.speed.n_prefill_short), o.forward.repeats));
  backend.reset();  // give its memory back before the big GEMMs

  IMPRESS_RETURN_IF_ERROR(step(5, "cuBLAS peak"));
  IMPRESS_ASSIGN_OR_RETURN(r.peak_gemm_tflops, MeasureCublasTflops(o.device, gemm, 8192));
  IMPRESS_ASSIGN_OR_RETURN(r.peak_sgemm_tflops, MeasureCublasTflops(o.device, CudaGemmPrecision::kFp32, 8192));
  r.gemm_efficiency = r.peak_gemm_tflops > 0 ? r.model_gemm_tflops / r.peak_gemm_tflops : 0;
  r.prefill_vs_peak = r.peak_gemm_tflops > 0 ? r.prefill_tflops / r.peak_gemm_tflops : 0;

  r.weights_mb = WeightsMb(model);
  r.kv_cache_mb = KvCacheMb(c, r.speed.n_cache);
  IMPRESS_RETURN_IF_ERROR(step(6, "done"));
  spdlog::info(
      "cuda bench: prefill {:.0f} tok/s @{}, {:.0f} tok/s @{}, decode {:.1f} tok/s, model GEMMs {:.1f} of "
      "{:.1f} TFLOP/s",
      r.speed.prefill_tok_s_short, r.speed.n_prefill_short, r.speed.prefill_tok_s_long, r.speed.n_prefill_long,
      r.speed.decode_tok_s, r.model_gemm_tflops, r.peak_gemm_tflops);
  return r;
}

std::string FormatCudaBench(const CudaBenchResult& r) {
  std::string s;
  s += fmt::format("{:<28} {}\n", "device", r.device);
  s += fmt::format("{:<28} {}\n", "backend", r.backend);
  s += fmt::format("{:<28} {:.0f} tok/s ({} tokens)\n", "prefill short", r.speed.prefill_tok_s_short,
                   r.speed.n_prefill_short);
  s += fmt::format("{:<28} {:.0f} tok/s ({} tokens)\n", "prefill long", r.speed.prefill_tok_s_long,
                   r.speed.n_prefill_long);
  s += fmt::format("{:<28} {:.1f} tok/s ({:.2f} ms/token, {} tokens)\n", "decode", r.speed.decode_tok_s,
                   r.speed.decode_ms_per_token, r.speed.n_decode);
  s += fmt::format("{:<28} {:.2f} TFLOP/s ({:.1f}% of the matrix rate)\n", "prefill achieved", r.prefill_tflops,
                   100 * r.prefill_vs_peak);
  s += fmt::format("{:<28} {:.2f} TFLOP/s ({:.1f}% of the matrix rate)\n", "model GEMMs (M = ubatch)",
                   r.model_gemm_tflops, 100 * r.gemm_efficiency);
  s += fmt::format("{:<28} {:.1f} TFLOP/s\n", "cuBLAS 8192^3 (same prec.)", r.peak_gemm_tflops);
  s += fmt::format("{:<28} {:.1f} TFLOP/s\n", "cuBLAS 8192^3 fp32", r.peak_sgemm_tflops);
  s += fmt::format("{:<28} {:.0f} MB weights, {:.0f} MB KV cache\n", "memory", r.weights_mb, r.kv_cache_mb);
  return s;
}

}  // namespace impress
