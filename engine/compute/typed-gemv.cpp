// Typed GEMV jobs: see typed-gemv.h.
#include "engine/compute/typed-gemv.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <functional>

namespace impress {

void TypedGemvs::Run(ThreadPool& pool, quant::KernelPath path, int m, const float* x, int ldx,
                     std::span<const GemvOut> outs, bool precise_q8_0) {
  if (m <= 0 || outs.empty() || outs.size() > kMaxOuts) return;
  // The set of prepared rows a matrix multiplies: its format's, or the residual kQ8x32 one.
  auto set_of = [precise_q8_0](const quant::WeightMatrix& w) {
    return precise_q8_0 && w.type == quant::WeightType::kQ8_0 ? 3
                                                              : static_cast<int>(quant::ActivationFormatFor(w.type));
  };
  // Each input row prepared once per set the matrices need.
  bool prepared[4] = {false, false, false, false};
  int64_t total_bytes = 0;
  for (const GemvOut& o : outs) {
    total_bytes += o.w.n_rows * o.w.RowBytes();
    const quant::ActFormat format = quant::ActivationFormatFor(o.w.type);
    const int f = set_of(o.w);
    if (prepared[f]) continue;
    prepared[f] = true;
    std::vector<quant::ActivationRow>& acts = acts_[f];
    if (acts.size() < size_t(m)) acts.resize(size_t(m));
    for (int i = 0; i < m; ++i) {
      const Status st = acts[size_t(i)].Prepare(format, x + int64_t(i) * ldx, o.w.n_cols, f == 3);
      if (!st.ok()) {  // unreachable: ValidateModel checks that rows are whole blocks
        spdlog::error("cpu backend: {}", st.ToString());
        return;
      }
    }
  }
  // Where each matrix's results go: y itself, or a staging area then copied or added into y.
  float* dst[kMaxOuts];
  bool direct[kMaxOuts];
  size_t staged = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    const GemvOut& o = outs[j];
    direct[j] = o.beta == 0.0f && (m == 1 || o.ldy == o.w.n_rows);
    if (!direct[j]) staged += size_t(m) * size_t(o.w.n_rows);
  }
  if (staged_.size() < staged) staged_.resize(staged);
  staged = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    dst[j] = direct[j] ? outs[j].y : staged_.data() + staged;
    if (!direct[j]) staged += size_t(m) * size_t(outs[j].w.n_rows);
  }
  // Chunks of whole rows, each matrix cut in proportion to its bytes (a few chunks a thread, so
  // the pool's dynamic claiming evens them out).
  const int64_t want = (pool.n_threads() == 1 || total_bytes < (int64_t(64) << 10)) ? 1 : pool.n_threads() * 4;
  int64_t first_chunk[kMaxOuts + 1];
  first_chunk[0] = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    const int64_t n = outs[j].w.n_rows, bytes = n * outs[j].w.RowBytes();
    const int64_t c = std::clamp<int64_t>((want * bytes + total_bytes - 1) / std::max<int64_t>(total_bytes, 1), 1,
                                          std::max<int64_t>(1, n / 4));
    first_chunk[j + 1] = first_chunk[j] + c;
  }
  const size_t n_out = outs.size();
  const int64_t n_chunks = first_chunk[n_out];
  const quant::ActivationRow* acts[4] = {acts_[0].data(), acts_[1].data(), acts_[2].data(), acts_[3].data()};
  const std::function<void(int64_t)> task = [&](int64_t c) {
    size_t j = 0;
    while (c >= first_chunk[j + 1]) ++j;
    const quant::WeightMatrix& w = outs[j].w;
    const int64_t nc = first_chunk[j + 1] - first_chunk[j], k = c - first_chunk[j];
    const int64_t r0 = w.n_rows * k / nc, r1 = w.n_rows * (k + 1) / nc;
    const Status st = quant::GemvBatch(w, acts[set_of(w)], m, r0, r1, dst[j], path);
    if (!st.ok()) spdlog::error("cpu backend: {}", st.ToString());
  };
  if (n_chunks <= 1) {
    task(0);
  } else {
    pool.ParallelFor(n_chunks, task);
  }
  for (size_t j = 0; j < n_out; ++j) {
    if (direct[j]) continue;
    const GemvOut& o = outs[j];
    const int64_t n = o.w.n_rows;
    for (int i = 0; i < m; ++i) {
      float* yr = o.y + int64_t(i) * o.ldy;
      const float* r = dst[j] + int64_t(i) * n;
      if (o.beta == 0.0f) {
        std::memcpy(yr, r, sizeof(float) * size_t(n));
      } else {
        for (int64_t q = 0; q < n; ++q) yr[q] = o.beta * yr[q] + r[q];
      }
    }
  }
}

}  // namespace impress
