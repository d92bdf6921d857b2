// RunCudaEngineBenchmark: see cuda-bench.h. Only public engine APIs: it builds with or without
// CUDA (without, MakeCudaBackend says why it cannot run).
#include "bench/cuda-bench.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include "engine/compute/forward.h"

namespace impress {

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The layer's GEMMs (n_out, n_in): Q, K, V, O, up, down (+ gate for Llama), M = m rows, through
// the backend with mapped (weight) right operands as the forward pass issues them.
Result<double> ModelGemmTflops(Backend& be, const ModelConfig& c, int m, int repeats) {
  const int e = c.n_embd, nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim, ff = c.n_ff;
  struct Shape {
    int n, k;
  };
  std::vector<Shape> shapes = {{nq, e}, {nkv, e}, {nkv, e}, {e, nq}, {ff, e}, {e, ff}};
  if (c.arch == Arch::kLlama) shapes.push_back({ff, e});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<std::vector<float>> host_w;
  std::vector<DevPtr<const float>> w;
  size_t max_k = 0, max_n = 0;
  for (const Shape& s : shapes) {
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
  for (const Shape& s : shapes) flops += 2.0 * m * s.n * s.k;
  double best = 0;
  const int n_iter = 20;
  for (int rep = 0; rep < std::max(1, repeats); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_iter; ++i) pass();
    be.Synchronize();
    best = std::max(best, flops * n_iter / Seconds(t0) / 1e12);
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
  int n_ctx = c.n_ctx_train > 0 ? c.n_ctx_train : 4096;
  if (c.arch == Arch::kOpt) n_ctx = std::min<int>(n_ctx, int(model.weights.pos_embd.rows()) - c.pos_offset);
  r.n_prefill_long = std::min(o.n_prefill_long, n_ctx);
  r.n_prefill_short = std::min(o.n_prefill_short, r.n_prefill_long);
  r.n_decode = std::max(1, std::min(o.n_decode, n_ctx - r.n_prefill_short));
  const int cache = std::max(r.n_prefill_long, r.n_prefill_short + r.n_decode);
  auto step = [&](uint64_t done, std::string_view what) {
    return ReportProgress(o.progress, done, 6, what) ? Status::Ok() : Status::Cancelled("benchmark cancelled");
  };
  {
    IMPRESS_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, *backend, {cache, o.ubatch}));
    std::mt19937 rng(7);
    std::vector<int32_t> toks(size_t(std::max(r.n_prefill_long, r.n_prefill_short + r.n_decode)));
    for (auto& t : toks) t = int32_t(rng() % uint32_t(c.n_vocab));
    std::vector<float> logits;

    IMPRESS_RETURN_IF_ERROR(step(0, "warm-up"));
    IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(size_t(r.n_prefill_short)), &logits));
    IMPRESS_RETURN_IF_ERROR(CudaBackendStatus(*backend));

    IMPRESS_RETURN_IF_ERROR(step(1, "prefill short"));
    double best_s = 1e30, flops = 0;
    for (int rep = 0; rep < std::max(1, o.repeats); ++rep) {
      gen->Reset();
      backend->ResetFlops();
      const auto t0 = std::chrono::steady_clock::now();
      IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(size_t(r.n_prefill_short)), &logits));
      const double s = Seconds(t0);
      if (s < best_s) {
        best_s = s;
        flops = backend->Flops();
      }
    }
    r.prefill_tok_s_short = r.n_prefill_short / best_s;
    r.prefill_tflops = flops / best_s / 1e12;

    IMPRESS_RETURN_IF_ERROR(step(2, "decode"));
    {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < r.n_decode; ++i)
        IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).subspan(size_t(r.n_prefill_short + i), 1), &logits));
      const double s = Seconds(t0);
      r.decode_tok_s = r.n_decode / s;
      r.decode_ms_per_token = s * 1e3 / r.n_decode;
    }

    IMPRESS_RETURN_IF_ERROR(step(3, "prefill long"));
    best_s = 1e30;
    for (int rep = 0; rep < std::max(1, o.repeats - 1); ++rep) {
      gen->Reset();
      const auto t0 = std::chrono::steady_clock::now();
      IMPRESS_RETURN_IF_ERROR(gen->Eval(std::span(toks).first(size_t(r.n_prefill_long)), &logits));
      best_s = std::min(best_s, Seconds(t0));
    }
    r.prefill_tok_s_long = r.n_prefill_long / best_s;
    IMPRESS_RETURN_IF_ERROR(CudaBackendStatus(*backend));
  }

  IMPRESS_RETURN_IF_ERROR(step(4, "model GEMMs"));
  IMPRESS_ASSIGN_OR_RETURN(r.model_gemm_tflops, ModelGemmTflops(*backend, c, std::min(o.ubatch, r.n_prefill_short), o.repeats));
  backend.reset();  // give its memory back before the big GEMMs

  IMPRESS_RETURN_IF_ERROR(step(5, "cuBLAS peak"));
  IMPRESS_ASSIGN_OR_RETURN(r.peak_gemm_tflops, MeasureCublasTflops(o.device, gemm, 8192));
  IMPRESS_ASSIGN_OR_RETURN(r.peak_sgemm_tflops, MeasureCublasTflops(o.device, CudaGemmPrecision::kFp32, 8192));
  r.gemm_efficiency = r.peak_gemm_tflops > 0 ? r.model_gemm_tflops / r.peak_gemm_tflops : 0;
  r.prefill_vs_peak = r.peak_gemm_tflops > 0 ? r.prefill_tflops / r.peak_gemm_tflops : 0;

  size_t n_weights = model.weights.tok_embd.data.size() + model.weights.output.data.size() +
                     model.weights.pos_embd.data.size();
  for (const auto& l : model.weights.layers)
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n_weights += t->data.size();
  r.weights_mb = n_weights * 4.0 / (1 << 20);
  r.kv_cache_mb = 2.0 * c.n_layer * cache * c.n_head_kv * c.head_dim * 2.0 / (1 << 20);
  IMPRESS_RETURN_IF_ERROR(step(6, "done"));
  spdlog::info("cuda bench: prefill {:.0f} tok/s @{}, {:.0f} tok/s @{}, decode {:.1f} tok/s, model GEMMs {:.1f} of "
               "{:.1f} TFLOP/s",
               r.prefill_tok_s_short, r.n_prefill_short, r.prefill_tok_s_long, r.n_prefill_long, r.decode_tok_s,
               r.model_gemm_tflops, r.peak_gemm_tflops);
  return r;
}

std::string FormatCudaBench(const CudaBenchResult& r) {
  std::string s;
  s += fmt::format("{:<28} {}\n", "device", r.device);
  s += fmt::format("{:<28} {}\n", "backend", r.backend);
  s += fmt::format("{:<28} {:.0f} tok/s ({} tokens)\n", "prefill short", r.prefill_tok_s_short, r.n_prefill_short);
  s += fmt::format("{:<28} {:.0f} tok/s ({} tokens)\n", "prefill long", r.prefill_tok_s_long, r.n_prefill_long);
  s += fmt::format("{:<28} {:.1f} tok/s ({:.2f} ms/token, {} tokens)\n", "decode", r.decode_tok_s,
                   r.decode_ms_per_token, r.n_decode);
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
