// Typed GEMV jobs of the CPU backend (decode and small batches): several quantized matrices over
// one input, the input rows prepared once per activation format and the weight rows of every
// matrix split across the pool as one job, each weight row read once for all input rows.
//
// Thread contract: a TypedGemvs is used by one thread at a time (the backend's issuing thread);
// Run spreads the rows over the pool it is given and returns when all are done.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/compute/thread-pool.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

// One matrix of a job: y (m, w.n_rows) = x W^T + beta * y, rows ldy apart; beta 0 or 1.
struct GemvOut {
  quant::WeightMatrix w;
  float beta = 0;
  float* y = nullptr;
  int ldy = 0;
};

class TypedGemvs {
 public:
  // Matrices one job runs at most: Q/K/V is the most the forward pass issues at once.
  static constexpr size_t kMaxOuts = 4;

  // Runs outs (at most kMaxOuts, all with w.n_cols == the input's width) over m rows of x (ldx
  // apart). The results are those of each matrix alone, bit for bit: a weight row's value never
  // depends on how rows are split. A job under 64 KiB of weights runs on the calling thread.
  // precise_q8_0: Q8_0 matrices multiply the input as two int8 sets (ActivationRow's residual).
  void Run(ThreadPool& pool, quant::KernelPath path, int m, const float* x, int ldx, std::span<const GemvOut> outs,
           bool precise_q8_0 = false);

 private:
  // The prepared input rows per quant::ActFormat, then the residual (precise) kQ8x32 rows.
  std::vector<quant::ActivationRow> acts_[4];
  std::vector<float> staged_;  // results bound for strided or accumulated outputs
};

}  // namespace impress
