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
    case WeightType::kQ5_K:
    case WeightType::kQ6_K: return true;
    default: return false;
  }
}

// Decodes a whole row: u[k], dw and mw [k / 32 * kHalves<T>] (group g's half h at g * halves + h).
template <WeightType T>
void DecodeRowT(const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
  constexpr int kH = gemm_internal::kHalves<T>;
  for (int64_t g = 0; g < n_groups; ++g) DecodeGroup<T>(row, g, u + 32 * g, dw + kH * g, mw + kH * g);
}

// Rows [r0, r0 + n_valid) of w decoded whole in AVX2 (DecodeRowAvx2) into n rows of u (k bytes
// each) and of dw, mw (n_spans each); rows n_valid .. n - 1 zero.
void DecodeRows(const WeightMatrix& w, int64_t r0, int n, int n_valid, uint8_t* u, float* dw, float* mw) {
  const int64_t n_groups = w.n_cols / kQK32, k = w.n_cols, row_bytes = w.RowBytes();
  const int64_t n_spans = n_groups * gemm_internal::Halves(w.type);
  for (int r = 0; r < n; ++r) {
    uint8_t* ur = u + r * k;
    float *dr = dw + r * n_spans, *mr = mw + r * n_spans;
    if (r < n_valid) {
      gemm_internal::DecodeRowAvx2(w.type, w.data + (r0 + r) * row_bytes, n_groups, ur, dr, mr);
    } else {
      std::memset(ur, 0, size_t(k));
      std::fill(dr, dr + n_spans, 0.0f);
      std::fill(mr, mr + n_spans, 0.0f);
    }
  }
}

// Packs rows [r0, r0 + n_valid) of w into the panel layout of gemm.h (data and scale sized for
// the row's groups; padding rows zeroed): the rows decoded whole in AVX2 (DecodeRowAvx2, bit for
// bit DecodeGroup), their quads transposed into place (PanelQuadsAvx2), the scales copied.
// (Decoded a group at a time in scalar code, packing was 7% of a 512-token prefill's CPU samples;
// this way about 2%.)
void PackPanel(const WeightMatrix& w, int64_t r0, int n_valid, uint8_t* data, float* scale) {
  constexpr int kP = int(kGemmPanel);
  const int64_t n_groups = w.n_cols / kQK32, k = w.n_cols;
  const int halves = gemm_internal::Halves(w.type);
  const int64_t n_spans = n_groups * halves;
  thread_local std::vector<uint8_t> u;
  thread_local std::vector<float> dw, mw;
  u.resize(size_t(kP * k));
  dw.resize(size_t(kP * n_spans));
  mw.resize(dw.size());
  DecodeRows(w, r0, kP, n_valid, u.data(), dw.data(), mw.data());
  gemm_internal::PanelQuadsAvx2(u.data(), k, n_groups, data);
  for (int64_t sp = 0; sp < n_spans; ++sp) {  // span sp = g * halves + h at scale[sp * 64 + r], mw 32 later
    float* sg = scale + sp * 64;
    for (int r = 0; r < kP; ++r) {
      sg[r] = dw[size_t(r * n_spans + sp)];
      sg[32 + r] = mw[size_t(r * n_spans + sp)];
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
    case WeightType::kQ6_K: Op<WeightType::kQ6_K>::Run(args...); break;
    default: break;
  }
}

template <WeightType T>
struct DecodeRowOp {
  static void Run(const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw) {
    DecodeRowT<T>(row, n_groups, u, dw, mw);
  }
};

// The reference: rows [r0, r1), each decoded once, every activation row in turn; per block
// exactly the operations (and order) of the SIMD kernels.
void GemmScalar(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy) {
  const int64_t n_groups = w.n_cols / kQK32;
  const int halves = gemm_internal::Halves(w.type), span = 32 / halves;
  std::vector<uint8_t> u(size_t(w.n_cols));
  std::vector<float> dw(static_cast<size_t>(n_groups * halves)), mw(dw.size());
  for (int64_t r = r0; r < r1; ++r) {
    ForType<DecodeRowOp>(w.type, w.data + r * w.RowBytes(), n_groups, u.data(), dw.data(), mw.data());
    for (int i = 0; i < x.m(); ++i) {
      const ActBlock32* a = x.Row(i);
      const float* ds = halves == 1 ? x.DSum(i) : x.DSum16(i);
      float acc = 0.0f;
      for (int64_t s = 0; s < n_groups * halves; ++s) {  // each span of elements with one scale
        const ActBlock32& ab = a[s / halves];
        const int e0 = int(s % halves) * span;
        int32_t isum = 0;
        for (int e = e0; e < e0 + span; ++e) isum += int32_t(u[size_t(s * span + e - e0)]) * ab.qs[e];
        acc = std::fma(float(isum), dw[size_t(s)] * ab.d, acc);
        acc = std::fma(mw[size_t(s)], ds[s], acc);
      }
      float& out = y[i * ldy + r];
      out = beta == 0.0f ? acc : std::fma(beta, out, acc);
    }
  }
}

// The small-batch path: strips of kStripRows weight rows, each decoded once and multiplied by
// every activation row (and the residual set's) while it sits in L1/L2.
void GemmStrips(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy, KernelPath path) {
  constexpr int kS = gemm_internal::kStripRows;
  const int64_t n_groups = w.n_cols / kQK32, k = w.n_cols;
  const int halves = gemm_internal::Halves(w.type);
  const int64_t n_spans = n_groups * halves, ldo = 16 * int64_t(x.n_lane_groups()), row_bytes = w.RowBytes();
  // The kernels take the lane groups in pairs, the strip's rows in the inner loop, so what a chunk
  // must keep in L1 is one pair's activations (1 KiB a group) and the strip's weights (256 bytes
  // a group), however many lane groups the batch has. (Chunks of 16 KiB of all the lane groups'
  // activations, 4 groups at 512 rows, spent about 8% of a 512-row AVX2 GEMM starting and ending
  // its tiles.)
  const int64_t chunk_groups = gemm_internal::kStripChunkGroups * (x.n_lane_groups() == 1 ? 2 : 1);
  thread_local std::vector<uint8_t> u;
  thread_local std::vector<float> dw, mw, out;
  u.resize(size_t(kS * k));
  dw.resize(size_t(kS * n_spans));
  mw.resize(dw.size());
  out.resize(size_t(kS * ldo));
  const GemmActivations* lo = x.residual();
  for (int64_t s0 = r0; s0 < r1; s0 += kS) {
    const int n_valid = int(std::min<int64_t>(kS, r1 - s0));
    DecodeRows(w, s0, kS, n_valid, u.data(), dw.data(), mw.data());
    const gemm_internal::DecodedStrip strip{u.data(), dw.data(), mw.data(),
                                            k,        halves,    gemm_internal::DecodedBits(w.type)};
    // The next strip's weights are fetched into L2 while this strip computes, spread over the
    // first set's groups: the decode would otherwise wait for memory with the kernels idle (at
    // 16-64 rows a third of the decode's time was those loads).
    const uint8_t* next = w.data + (s0 + kS) * row_bytes;
    const int64_t next_lines = (std::clamp<int64_t>(r1 - s0 - kS, 0, kS) * row_bytes + 63) / 64;
    for (const GemmActivations* set : {&x, lo}) {
      if (!set) continue;
      for (int64_t g0 = 0; g0 < n_groups; g0 += chunk_groups) {
        const int64_t g1 = std::min(n_groups, g0 + chunk_groups);
        gemm_internal::StripChunk chunk{g0, g1, g0 > 0};
        if (set == &x)
          chunk.SetFetch(next + 64 * (next_lines * g0 / n_groups),
                         next_lines * g1 / n_groups - next_lines * g0 / n_groups);
        if (path == KernelPath::kAvx512) {
          gemm_internal::GemmStripAvx512(strip, *set, chunk, out.data(), ldo);
        } else {
          gemm_internal::GemmStripAvx2(strip, *set, chunk, out.data(), ldo);
        }
      }
      const float b = set == &x ? beta : 1.0f;  // the residual set adds onto the first's products
      gemm_internal::StoreStripAvx2(out.data(), ldo, x.m(), n_valid, b, y + s0, ldy);
    }
  }
}

}  // namespace

bool GemmSupports(WeightType type, KernelPath path) {
  switch (path) {
    case KernelPath::kScalar:
    case KernelPath::kAvx512: return TypeInGemm(type);
    case KernelPath::kAvx2: return TypeInGemm(type) && type != WeightType::kQ8_0;  // bytes < 64 only
  }
  return false;
}

bool GemmUsesLanes(int m, KernelPath path) {
  return path == KernelPath::kAvx2 || (path == KernelPath::kAvx512 && m <= kGemmLaneRows);
}

Status GemmActivations::Reset(int m, int64_t k, bool residual, bool lanes) {
  if (m < 0 || k <= 0 || k % kQK32 != 0)
    return Status::InvalidArgument("gemm activations: " + std::to_string(m) + " rows of " + std::to_string(k) +
                                   " elements (k must be a positive multiple of 32)");
  m_ = m;
  k_ = k;
  lanes_ = lanes;
  blocks_.resize(size_t(m) * size_t(k / kQK32));
  dsum_.resize(blocks_.size());
  dsum16_.resize(2 * blocks_.size());
  residual_.resize(residual ? 1 : 0);
  if (!lanes) return residual ? residual_[0].Reset(m, k, false, false) : Status::Ok();
  // The lane layout (small batches, and every batch on AVX2): the rows' lanes are written by
  // InterleaveRow. The kernels also compute the padding rows' lanes of the last lane group and
  // discard them; they are zeroed here so that they hold no earlier batch's values (which could
  // be NaN), not because any output depends on them.
  const int64_t nb = k / kQK32;
  const size_t lane_blocks = size_t((m + 15) / 16) * size_t(nb);
  lane_qs_.resize(lane_blocks * 512);
  lane_d_.resize(lane_blocks * 16);
  lane_dsum_.resize(lane_blocks * 16);
  lane_dsum16_.resize(lane_blocks * 32);
  if (const int l0 = m % 16; l0 != 0) {
    const int n_pad = 16 - l0;
    for (int64_t vb = int64_t(m / 16) * nb; vb < int64_t(lane_blocks); ++vb) {
      for (int q = 0; q < 8; ++q) std::memset(lane_qs_.data() + (vb * 8 + q) * 64 + 4 * l0, 0, size_t(4 * n_pad));
      std::fill_n(lane_d_.data() + vb * 16 + l0, n_pad, 0.0f);
      std::fill_n(lane_dsum_.data() + vb * 16 + l0, n_pad, 0.0f);
      for (int h = 0; h < 2; ++h) std::fill_n(lane_dsum16_.data() + (vb * 2 + h) * 16 + l0, n_pad, 0.0f);
    }
  }
  return residual ? residual_[0].Reset(m, k) : Status::Ok();
}

void GemmActivations::QuantizeRows(const float* x, int64_t ldx, int i0, int i1) {
  thread_local std::vector<float> r;
  if (!residual_.empty()) r.resize(size_t(k_));
  for (int i = i0; i < i1; ++i) {
    QuantizeRow(x + int64_t(i) * ldx, i);
    if (residual_.empty()) continue;
    ResidualRow32(x + int64_t(i) * ldx, k_, Row(i), r.data());
    residual_[0].QuantizeRow(r.data(), i);
  }
}

void GemmActivations::InterleaveRow(int i) {
  const int64_t nb = k_ / kQK32, v = i / 16, l = i % 16;
  const ActBlock32* b = Row(i);
  for (int64_t g = 0; g < nb; ++g) {
    const int64_t vb = v * nb + g;
    for (int q = 0; q < 8; ++q) std::memcpy(lane_qs_.data() + (vb * 8 + q) * 64 + 4 * l, b[g].qs + 4 * q, 4);
    lane_d_[size_t(vb * 16 + l)] = b[g].d;
    lane_dsum_[size_t(vb * 16 + l)] = DSum(i)[g];
    for (int h = 0; h < 2; ++h) lane_dsum16_[size_t((vb * 2 + h) * 16 + l)] = DSum16(i)[2 * g + h];
  }
}

void GemmActivations::QuantizeRow(const float* x, int i) {
  static const bool avx512 = MissingCpuFeature(KernelPath::kAvx512) == nullptr;
  const int64_t nb = k_ / kQK32;
  ActBlock32* b = blocks_.data() + int64_t(i) * nb;
  float* ds = dsum_.data() + int64_t(i) * nb;
  float* ds16 = dsum16_.data() + int64_t(i) * 2 * nb;
  if (avx512) {
    gemm_internal::QuantizeRow32Avx512(x, k_, b, ds, ds16);
    if (lanes_) InterleaveRow(i);
    return;
  }
  QuantizeRow32(x, k_, b);
  for (int64_t g = 0; g < nb; ++g) {
    ds[g] = b[g].d * float(b[g].sum);
    for (int h = 0; h < 2; ++h) {
      int32_t sum = 0;
      for (int e = 16 * h; e < 16 * h + 16; ++e) sum += b[g].qs[e];
      ds16[2 * g + h] = b[g].d * float(sum);
    }
  }
  if (lanes_) InterleaveRow(i);
}

Status GemmRows(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy, KernelPath path) {
  if (!GemmSupports(w.type, path))
    return Status::Unsupported(std::string("gemm: no int8 GEMM for ") + WeightTypeName(w.type) + " on the " +
                               KernelPathName(path) + " path");
  // CPUID is slow (a VM exit under a hypervisor): asked once per path.
  static const char* const kMissing[] = {MissingCpuFeature(KernelPath::kScalar), MissingCpuFeature(KernelPath::kAvx2),
                                         MissingCpuFeature(KernelPath::kAvx512)};
  if (const char* missing = kMissing[int(path)])
    return Status::Unsupported(std::string("gemm: this CPU lacks ") + missing + " for the " + KernelPathName(path) +
                               " path");
  if (w.n_cols != x.k() || w.n_cols % BlockElements(w.type) != 0 || r0 < 0 || r1 > w.n_rows || r0 > r1 ||
      (x.m() > 0 && ldy < r1))
    return Status::InvalidArgument("gemm: weights " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) +
                                   ", activations " + std::to_string(x.m()) + " x " + std::to_string(x.k()) +
                                   ", rows [" + std::to_string(r0) + ", " + std::to_string(r1) + "), ldy " +
                                   std::to_string(ldy));
  if (x.m() == 0 || r0 == r1) return Status::Ok();
  if (GemmUsesLanes(x.m(), path) && !x.has_lanes())
    return Status::InvalidArgument(std::string("gemm: ") + std::to_string(x.m()) + " activation rows on the " +
                                   KernelPathName(path) + " path need the interleaved layout (Reset with lanes)");
  const GemmActivations* lo = x.residual();
  if (path == KernelPath::kScalar) {
    GemmScalar(w, x, r0, r1, beta, y, ldy);
    if (lo) GemmScalar(w, *lo, r0, r1, 1.0f, y, ldy);
    return Status::Ok();
  }
  // AVX2 takes strips at every batch size: its panel kernel (vpmaddubsw, 2 rows at a time) is
  // slower than the strips even at 512 rows.
  if (GemmUsesLanes(x.m(), path)) {
    GemmStrips(w, x, r0, r1, beta, y, ldy, path);
    return Status::Ok();
  }
  // One panel at a time: packed once, multiplied by every activation row while it sits in cache.
  const int64_t n_groups = w.n_cols / kQK32;
  thread_local std::vector<uint8_t> data;
  thread_local std::vector<float> scale;
  const int halves = gemm_internal::Halves(w.type);
  data.resize(size_t(n_groups) * 1024);
  scale.resize(size_t(n_groups * halves) * 64);
  for (int64_t p0 = r0; p0 < r1; p0 += kGemmPanel) {
    const int n_valid = int(std::min(kGemmPanel, r1 - p0));
    if (!gemm_internal::PackPanelAvx512(w.type, w.data + p0 * w.RowBytes(), w.RowBytes(), n_valid, n_groups,
                                        data.data(), scale.data()))
      PackPanel(w, p0, n_valid, data.data(), scale.data());
    const PackedPanel panel{data.data(), scale.data(), n_groups, halves};
    for (const GemmActivations* set : {&x, lo}) {
      if (!set) continue;
      const float b = set == &x ? beta : 1.0f;  // the residual set adds onto the first's products
      gemm_internal::GemmPanelAvx512(panel, *set, n_valid, b, y + p0, ldy);
    }
  }
  return Status::Ok();
}

}  // namespace impress::quant
