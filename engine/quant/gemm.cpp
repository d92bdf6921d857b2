// The int8 GEMM's activation blocks, weight-panel packing, the scalar reference and the checked
// entry point. See gemm.h.
#include "engine/quant/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/quant/gemm-decode-inl.h"

namespace impress::quant {

namespace {

using gemm_internal::DecodeGroup;
using gemm_internal::PackedPanel;

bool TypeInGemm(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return true;
    default: return false;
  }
}

// Decodes a whole row: u[k], dw[k / 32], mw[k / 32].
template <WeightType T>
void DecodeRowT(const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
  for (int64_t g = 0; g < n_groups; ++g) DecodeGroup<T>(row, g, u + 32 * g, dw + g, mw + g);
}

// Packs rows [r0, r0 + n_valid) of w into the panel layout of gemm.h (data and scale sized for
// the row's groups; padding rows zeroed).
template <WeightType T>
void PackPanelT(const WeightMatrix& w, int64_t r0, int n_valid, uint8_t* data, float* scale) {
  const int64_t n_groups = w.n_cols / kQK32, row_bytes = w.RowBytes();
  for (int r = 0; r < int(kGemmPanel); ++r) {
    if (r >= n_valid) {
      for (int64_t g = 0; g < n_groups; ++g) {
        for (int q = 0; q < 8; ++q) std::memset(data + g * 1024 + q * 128 + 4 * r, 0, 4);
        scale[g * 64 + r] = 0.0f;
        scale[g * 64 + 32 + r] = 0.0f;
      }
      continue;
    }
    const uint8_t* row = w.data + (r0 + r) * row_bytes;
    for (int64_t g = 0; g < n_groups; ++g) {
      alignas(32) uint8_t u[32];
      DecodeGroup<T>(row, g, u, scale + g * 64 + r, scale + g * 64 + 32 + r);
      for (int q = 0; q < 8; ++q) std::memcpy(data + g * 1024 + q * 128 + 4 * r, u + 4 * q, 4);
    }
  }
}

template <template <WeightType> class Op, class... Args>
void ForType(WeightType type, Args&&... args) {
  switch (type) {
    case WeightType::kQ8_0: Op<WeightType::kQ8_0>::Run(args...); break;
    case WeightType::kQ4_0: Op<WeightType::kQ4_0>::Run(args...); break;
    case WeightType::kQ4_1: Op<WeightType::kQ4_1>::Run(args...); break;
    case WeightType::kQ5_0: Op<WeightType::kQ5_0>::Run(args...); break;
    case WeightType::kQ5_1: Op<WeightType::kQ5_1>::Run(args...); break;
    case WeightType::kQ4_K: Op<WeightType::kQ4_K>::Run(args...); break;
    case WeightType::kQ5_K: Op<WeightType::kQ5_K>::Run(args...); break;
    default: break;
  }
}

template <WeightType T>
struct DecodeRowOp {
  static void Run(const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
    DecodeRowT<T>(row, n_groups, u, dw, mw);
  }
};
template <WeightType T>
struct PackPanelOp {
  static void Run(const WeightMatrix& w, int64_t r0, int n_valid, uint8_t* data, float* scale) {
    PackPanelT<T>(w, r0, n_valid, data, scale);
  }
};

// The reference: rows [r0, r1), each decoded once, every activation row in turn; per block
// exactly the operations (and order) of the SIMD kernels.
void GemmScalar(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy) {
  const int64_t n_groups = w.n_cols / kQK32;
  std::vector<uint8_t> u(size_t(w.n_cols));
  std::vector<float> dw(static_cast<size_t>(n_groups)), mw(static_cast<size_t>(n_groups));
  for (int64_t r = r0; r < r1; ++r) {
    ForType<DecodeRowOp>(w.type, w.data + r * w.RowBytes(), n_groups, u.data(), dw.data(), mw.data());
    for (int i = 0; i < x.m(); ++i) {
      const ActBlock32* a = x.Row(i);
      const float* ds = x.DSum(i);
      float acc = 0.0f;
      for (int64_t g = 0; g < n_groups; ++g) {
        int32_t isum = 0;
        for (int e = 0; e < 32; ++e) isum += int32_t(u[size_t(32 * g + e)]) * a[g].qs[e];
        acc = std::fma(float(isum), dw[size_t(g)] * a[g].d, acc);
        acc = std::fma(mw[size_t(g)], ds[g], acc);
      }
      float& out = y[i * ldy + r];
      out = beta == 0.0f ? acc : std::fma(beta, out, acc);
    }
  }
}

}  // namespace

bool GemmSupports(WeightType type, KernelPath path) {
  return TypeInGemm(type) && (path == KernelPath::kScalar || path == KernelPath::kAvx512);
}

Status GemmActivations::Reset(int m, int64_t k) {
  if (m < 0 || k <= 0 || k % kQK32 != 0)
    return Status::InvalidArgument("gemm activations: " + std::to_string(m) + " rows of " + std::to_string(k) +
                                   " elements (k must be a positive multiple of 32)");
  m_ = m;
  k_ = k;
  blocks_.resize(size_t(m) * size_t(k / kQK32));
  dsum_.resize(blocks_.size());
  return Status::Ok();
}

void GemmActivations::QuantizeRows(const float* x, int64_t ldx, int i0, int i1) {
  static const bool avx512 = MissingCpuFeature(KernelPath::kAvx512) == nullptr;
  const int64_t nb = k_ / kQK32;
  for (int i = i0; i < i1; ++i) {
    ActBlock32* b = blocks_.data() + int64_t(i) * nb;
    float* ds = dsum_.data() + int64_t(i) * nb;
    if (avx512) {
      gemm_internal::QuantizeRow32Avx512(x + int64_t(i) * ldx, k_, b, ds);
      continue;
    }
    QuantizeRow32(x + int64_t(i) * ldx, k_, b);
    for (int64_t g = 0; g < nb; ++g) ds[g] = b[g].d * float(b[g].sum);
  }
}

Status GemmRows(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy, KernelPath path) {
  if (!GemmSupports(w.type, path))
    return Status::Unsupported(std::string("gemm: no int8 GEMM for ") + WeightTypeName(w.type) + " on the " +
                               KernelPathName(path) + " path");
  if (const char* missing = MissingCpuFeature(path))
    return Status::Unsupported(std::string("gemm: this CPU lacks ") + missing + " for the " + KernelPathName(path) +
                               " path");
  if (w.n_cols != x.k() || w.n_cols % BlockElements(w.type) != 0 || r0 < 0 || r1 > w.n_rows || r0 > r1 ||
      (x.m() > 0 && ldy < r1))
    return Status::InvalidArgument("gemm: weights " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) +
                                   ", activations " + std::to_string(x.m()) + " x " + std::to_string(x.k()) +
                                   ", rows [" + std::to_string(r0) + ", " + std::to_string(r1) + "), ldy " +
                                   std::to_string(ldy));
  if (x.m() == 0 || r0 == r1) return Status::Ok();
  if (path == KernelPath::kScalar) {
    GemmScalar(w, x, r0, r1, beta, y, ldy);
    return Status::Ok();
  }
  // One panel at a time: packed once, multiplied by every activation row while it sits in cache.
  const int64_t n_groups = w.n_cols / kQK32;
  thread_local std::vector<uint8_t> data;
  thread_local std::vector<float> scale;
  data.resize(size_t(n_groups) * 1024);
  scale.resize(size_t(n_groups) * 64);
  for (int64_t p0 = r0; p0 < r1; p0 += kGemmPanel) {
    const int n_valid = int(std::min(kGemmPanel, r1 - p0));
    ForType<PackPanelOp>(w.type, w, p0, n_valid, data.data(), scale.data());
    gemm_internal::GemmPanelAvx512(PackedPanel{data.data(), scale.data(), n_groups}, x, n_valid, beta, y + p0, ldy);
  }
  return Status::Ok();
}

}  // namespace impress::quant
