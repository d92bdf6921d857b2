#include "bench/kernel-bench.h"

#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "engine/compute/cpu-backend.h"
#include "engine/quant/gemm.h"

namespace impress::quant {
namespace {

// Byte offsets of the fp16 scale fields in a block of `type` (none for F16/BF16).
std::vector<int> ScaleOffsets(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: return {0};
    case WeightType::kQ4_1:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return {0, 2};
    case WeightType::kQ6_K: return {208};
    default: return {};
  }
}

// Random blocks with scales in [1e-3, 1e-2) (F16/BF16: every element such a value), so no
// subnormal or non-finite value slows the fp32 arithmetic being timed.
std::vector<uint8_t> RandomMatrix(WeightType type, int64_t n_bytes) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  std::vector<uint8_t> data(static_cast<size_t>(n_bytes));
  if (type == WeightType::kF16 || type == WeightType::kBF16) {
    for (int64_t i = 0; i + 2 <= n_bytes; i += 2) {
      const float v = scale(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = type == WeightType::kF16 ? Fp32ToFp16(v) : uint16_t(bits >> 16);
      std::memcpy(data.data() + i, &h, 2);
    }
    return data;
  }
  for (auto& b : data) b = uint8_t(rng());
  const int64_t block = BlockBytes(type);
  for (int64_t off = 0; off < n_bytes; off += block) {
    for (int field : ScaleOffsets(type)) {
      const f16_t h = Fp32ToFp16(scale(rng));
      std::memcpy(data.data() + off + field, &h, 2);
    }
  }
  return data;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The best thread-CPU seconds of one call of fn, over at least 3 calls and min_seconds in all.
template <class Fn>
Result<double> BestCpuSeconds(double min_seconds, Fn fn) {
  if (Status st = fn(); !st.ok()) return st;  // warm-up
  double best = 1e30, total = 0;
  for (int i = 0; i < 3 || total < min_seconds; ++i) {
    const double t0 = ThreadCpuSeconds();
    if (Status st = fn(); !st.ok()) return st;
    const double t = ThreadCpuSeconds() - t0;
    best = std::min(best, t);
    total += t;
  }
  return best;
}

}  // namespace

Result<GemvBenchResult> BenchGemv(WeightType type, KernelPath path, int64_t n_rows, int64_t n_cols,
                                  double min_seconds) {
  if (!IsSupportedWeightType(uint32_t(type)) || n_rows <= 0 || n_cols <= 0 || n_cols % BlockElements(type) != 0) {
    return Status::InvalidArgument("cannot benchmark a " + std::to_string(n_rows) + " x " + std::to_string(n_cols) +
                                   " matrix of " + WeightTypeName(type));
  }
  WeightMatrix w{type, nullptr, n_rows, n_cols};
  const std::vector<uint8_t> data = RandomMatrix(type, n_rows * w.RowBytes());
  w.data = data.data();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> xf(static_cast<size_t>(n_cols));
  for (float& v : xf) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(n_rows));
  ActivationRow x;
  // The activation is quantized inside the timed loop: a decode step pays for it once per GEMV.
  // The best call's thread CPU time: on a shared machine, wall time also counts other
  // programs' turns.
  GemvBenchResult r;
  r.weight_bytes = int64_t(data.size());
  auto best = BestCpuSeconds(min_seconds, [&]() -> Status {
    ++r.n_gemv;
    if (Status st = x.Prepare(ActivationFormatFor(type), xf.data(), n_cols); !st.ok()) return st;
    return Gemv(w, x, 0, n_rows, y.data(), path);
  });
  if (!best.ok()) return best.status();
  r.seconds_per_gemv = *best;
  r.weight_gbs = double(r.weight_bytes) / r.seconds_per_gemv / 1e9;
  return r;
}

const std::vector<KernelPath>& KernelBenchPaths() {
  static const std::vector<KernelPath> paths = {KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512};
  return paths;
}

Result<std::vector<KernelBenchRow>> RunKernelBenchmark(double min_seconds) {
  const WeightType types[] = {WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
                              WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                              WeightType::kQ5_K, WeightType::kQ6_K};
  const int64_t shapes[][2] = {{576, 1536}, {4096, 4096}};
  std::vector<KernelBenchRow> rows;
  for (const auto& shape : shapes) {
    for (WeightType t : types) {
      KernelBenchRow row{.n_rows = shape[0], .n_cols = shape[1], .type = t, .weight_bytes = 0, .gbs = {}};
      for (KernelPath p : KernelBenchPaths()) {
        if (MissingCpuFeature(p)) {
          row.gbs.push_back(0);
          continue;
        }
        auto r = BenchGemv(t, p, shape[0], shape[1], min_seconds);
        if (!r.ok()) return r.status();
        row.weight_bytes = r->weight_bytes;
        row.gbs.push_back(r->weight_gbs);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

Result<std::vector<GemmBenchRow>> RunGemmBenchmark(double min_seconds) {
  SetBlasThreads(1);
  struct Case {
    int64_t m, n, k;
    std::vector<WeightType> types;
  };
  // n (weight rows), k: SmolLM2-135M's (no K-quant fits 576 columns) and Llama-3.2-1B's q at 512
  // rows; then Qwen2.5-1.5B's q/o, up/gate (Q4_K) and down (Q6_K in Q4_K_M files) at the small
  // batches of a question (16, 17, 24, 32, 64 rows: a 17-row question fills one lane group and one
  // row of the next) and at 512.
  const std::vector<WeightType> types = {WeightType::kQ4_1, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ8_0,
                                         WeightType::kQ6_K};
  std::vector<Case> cases;
  for (const auto& shape :
       std::initializer_list<std::array<int64_t, 2>>{{576, 576}, {1536, 576}, {576, 1536}, {2048, 2048}})
    cases.push_back({512, shape[0], shape[1], types});
  for (int64_t m : {16, 17, 24, 32, 64, 512}) {
    cases.push_back({m, 1536, 1536, {WeightType::kQ4_K}});
    cases.push_back({m, 8960, 1536, {WeightType::kQ4_K}});
    cases.push_back({m, 1536, 8960, {WeightType::kQ6_K}});
  }
  const KernelPath path = ActiveKernelPath();
  std::vector<GemmBenchRow> rows;
  for (const Case& c : cases) {
    const int64_t m = c.m, n = c.n, k = c.k;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<float> x(size_t(m * k)), y(size_t(m * n));
    for (float& v : x) v = normal(rng);
    for (WeightType t : c.types) {
      if (k % BlockElements(t) != 0) continue;
      WeightMatrix w{t, nullptr, n, k};
      const std::vector<uint8_t> data = RandomMatrix(t, n * w.RowBytes());
      w.data = data.data();
      GemmBenchRow row{.m = m, .n = n, .k = k, .type = t};
      const double flop = 2.0 * double(m) * double(n) * double(k);
      if (GemmSupports(t, path)) {
        GemmActivations acts;
        auto int8 = BestCpuSeconds(min_seconds, [&]() -> Status {
          IMPRESS_RETURN_IF_ERROR(acts.Reset(int(m), k));
          acts.QuantizeRows(x.data(), k, 0, int(m));
          return GemmRows(w, acts, 0, n, 0.0f, y.data(), n, path);
        });
        if (!int8.ok()) return int8.status();
        row.int8_gflops = flop / *int8 / 1e9;
      }
      // Tiles of at most 4 MiB of fp32, as the CPU backend's fallback decodes them.
      const int64_t tile = std::clamp<int64_t>(((int64_t(4) << 20) / (k * 4)) / 16 * 16, 16, n);
      std::vector<float> wf(size_t(tile * k));
      auto tiles = BestCpuSeconds(min_seconds, [&]() -> Status {
        for (int64_t r0 = 0; r0 < n; r0 += tile) {
          const int64_t nr = std::min(tile, n - r0);
          for (int64_t r = 0; r < nr; ++r) DequantizeRow(t, w.data + (r0 + r) * w.RowBytes(), wf.data() + r * k, k);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(nr), int(k), 1.0f, x.data(), int(k),
                      wf.data(), int(k), 0.0f, y.data() + r0, int(n));
        }
        return Status::Ok();
      });
      if (!tiles.ok()) return tiles.status();
      row.tiles_gflops = flop / *tiles / 1e9;
      std::vector<float> full(size_t(n * k));
      for (int64_t r = 0; r < n; ++r) DequantizeRow(t, w.data + r * w.RowBytes(), full.data() + r * k, k);
      auto sgemm = BestCpuSeconds(min_seconds, [&]() -> Status {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x.data(), int(k),
                    full.data(), int(k), 0.0f, y.data(), int(n));
        return Status::Ok();
      });
      if (!sgemm.ok()) return sgemm.status();
      row.sgemm_gflops = flop / *sgemm / 1e9;
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace impress::quant
