// TimeForward and the shape-derived sizes: see forward-timing.h.
#include "bench/forward-timing.h"

#include <time.h>

#include <algorithm>
#include <random>
#include <span>

#include "engine/compute/forward.h"
#include "engine/model/dequant.h"

namespace impress {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

Status BenchStep(const ProgressFn& progress, uint64_t done, uint64_t total, std::string_view what) {
  return ReportProgress(progress, done, total, what) ? Status::Ok() : Status::Cancelled("benchmark cancelled");
}

Result<ForwardSpeed> TimeForward(const Model& model, Backend& backend, const ForwardTimingOptions& o,
                                 const ProgressFn& progress, int n_steps,
                                 const std::function<Status()>& check_backend) {
  const ModelConfig& c = model.config;
  ForwardSpeed r;
  int n_ctx = c.n_ctx_train > 0 ? c.n_ctx_train : 4096;
  if (c.arch == Arch::kOpt) n_ctx = std::min<int>(n_ctx, int(model.weights.pos_embd.rows()) - c.pos_offset);
  r.n_prefill_long = std::min(o.n_prefill_long, n_ctx);
  r.n_prefill_short = std::min(o.n_prefill_short, r.n_prefill_long);
  r.n_decode = std::max(1, std::min(o.n_decode, n_ctx - r.n_prefill_short));
  r.n_cache = std::max(r.n_prefill_long, r.n_prefill_short + r.n_decode);
  if (o.n_decode_ctx > r.n_prefill_long) {
    r.n_decode_ctx = std::min(o.n_decode_ctx, n_ctx - r.n_decode);
    if (r.n_decode_ctx <= r.n_prefill_long) r.n_decode_ctx = 0;
    r.n_cache = std::max(r.n_cache, r.n_decode_ctx + r.n_decode);
  }
  r.n_cache = std::max(r.n_cache, std::min(o.n_ctx, n_ctx));
  IMPRESS_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, backend, {r.n_cache, o.ubatch}));
  if (o.n_ctx > 0) {
    // Resident as a filled context: the allocator hands out pages only when first written.
    const std::vector<f16_t> zeros(size_t(r.n_cache) * size_t(c.n_head_kv) * size_t(c.head_dim));
    for (int il = 0; il < c.n_layer; ++il) {
      for (DevPtr<const f16_t> kv : {gen->KCache(il), gen->VCache(il)}) {
        backend.CopyToDevice(DevPtr<void>(const_cast<f16_t*>(kv.raw())), zeros.data(), zeros.size() * sizeof(f16_t));
      }
    }
    backend.Synchronize();
  }

  std::mt19937 rng(7);
  std::vector<int32_t> toks(size_t(r.n_cache));
  for (auto& t : toks) t = int32_t(rng() % uint32_t(c.n_vocab));
  const std::span<const int32_t> all(toks);
  std::vector<float> logits;
  auto step = [&](uint64_t done, std::string_view what) { return BenchStep(progress, done, uint64_t(n_steps), what); };
  auto check = [&] { return check_backend ? check_backend() : Status::Ok(); };
  // The fastest of n_runs prefills of n tokens from an empty cache.
  double last_s = 0;  // the last of them
  auto best_prefill = [&](int n, int n_runs, double* flops) -> Result<double> {
    double best_s = 1e30;
    for (int rep = 0; rep < std::max(1, n_runs); ++rep) {
      gen->Reset();
      backend.ResetFlops();
      const auto t0 = std::chrono::steady_clock::now();
      IMPRESS_RETURN_IF_ERROR(gen->Eval(all.first(size_t(n)), &logits));
      const double s = SecondsSince(t0);
      last_s = s;
      if (s < best_s) {
        best_s = s;
        if (flops) *flops = backend.Flops();
      }
    }
    return best_s;
  };

  // Warm-up: first touch of the weights and buffers (and, on a GPU, kernel and GEMM selection).
  IMPRESS_RETURN_IF_ERROR(step(0, "warm-up"));
  const int n_warmup = o.n_warmup > 0 ? std::min(o.n_warmup, r.n_prefill_short) : r.n_prefill_short;
  IMPRESS_RETURN_IF_ERROR(gen->Eval(all.first(size_t(n_warmup)), &logits));
  IMPRESS_RETURN_IF_ERROR(check());

  IMPRESS_RETURN_IF_ERROR(step(1, "prefill short"));
  double flops = 0;
  IMPRESS_ASSIGN_OR_RETURN(const double short_s, best_prefill(r.n_prefill_short, o.repeats, &flops));
  r.prefill_tok_s_short = r.n_prefill_short / short_s;
  r.prefill_flop_s = flops / short_s;

  IMPRESS_RETURN_IF_ERROR(step(2, "decode"));  // continues the last short prefill's cache
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  for (int i = 0; i < r.n_decode; ++i)
    IMPRESS_RETURN_IF_ERROR(gen->Eval(all.subspan(size_t(r.n_prefill_short + i), 1), &logits));
  const double decode_s = SecondsSince(t0);
  r.decode_cpu_ms_per_token = (ProcessCpuSeconds() - cpu0) * 1e3 / r.n_decode;
  r.decode_tok_s = r.n_decode / decode_s;
  r.decode_ms_per_token = decode_s * 1e3 / r.n_decode;

  IMPRESS_RETURN_IF_ERROR(step(3, "prefill long"));
  IMPRESS_ASSIGN_OR_RETURN(const double long_s, best_prefill(r.n_prefill_long, o.repeats - 1, nullptr));
  r.prefill_tok_s_long = r.n_prefill_long / long_s;
  if (r.n_decode_ctx > 0) {  // continue the long prefill's cache up to n_decode_ctx, then decode
    const auto t_ctx = std::chrono::steady_clock::now();
    IMPRESS_RETURN_IF_ERROR(
        gen->Eval(all.subspan(size_t(r.n_prefill_long), size_t(r.n_decode_ctx - r.n_prefill_long)), &logits));
    r.prefill_tok_s_ctx = r.n_decode_ctx / (last_s + SecondsSince(t_ctx));
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu1 = ProcessCpuSeconds();
    for (int i = 0; i < r.n_decode; ++i)
      IMPRESS_RETURN_IF_ERROR(gen->Eval(all.subspan(size_t(r.n_decode_ctx + i), 1), &logits));
    r.decode_tok_s_long_ctx = r.n_decode / SecondsSince(t1);
    r.decode_cpu_ms_per_token_long_ctx = (ProcessCpuSeconds() - cpu1) * 1e3 / r.n_decode;
  }
  IMPRESS_RETURN_IF_ERROR(check());
  return r;
}

std::vector<LayerGemm> LayerGemmShapes(const ModelConfig& c) {
  const int e = c.n_embd, nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim, ff = c.n_ff;
  std::vector<LayerGemm> shapes = {{nq, e}, {nkv, e}, {nkv, e}, {e, nq}, {ff, e}, {e, ff}};
  if (c.arch.spec().graph.ffn == FfnKind::kSwiGlu) shapes.push_back({ff, e});  // the gate
  return shapes;
}

double WeightsMb(const Model& model) {
  const ModelWeights& w = model.weights;
  uint64_t n = TensorBytes(w.tok_embd) + TensorBytes(w.output) + TensorBytes(w.pos_embd);
  for (const auto& l : w.layers)
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) n += TensorBytes(*t);
  return double(n) / (1 << 20);
}

double DecodeWeightBytes(const Model& model) {
  const ModelWeights& w = model.weights;
  const Tensor& head = w.output.empty() ? w.tok_embd : w.output;
  double n = double(TensorBytes(head)) + double(TensorBytes(w.output_norm));
  if (w.tok_embd.rows() > 0) n += double(TensorBytes(w.tok_embd)) / double(w.tok_embd.rows());
  for (const auto& l : w.layers) {
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.attn_norm, &l.ffn_norm})
      n += double(TensorBytes(*t));
  }
  return n;
}

double KvCacheMb(const ModelConfig& c, int n_cache) {
  return 2.0 * c.n_layer * n_cache * c.n_head_kv * c.head_dim * 2.0 / (1 << 20);
}

}  // namespace impress
