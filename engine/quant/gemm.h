// The int8 GEMM for prefill: many activation rows times a quantized weight matrix, read in place.
//
// The activation rows are quantized once into int8 blocks of 32 (GemmActivations, the same
// rounding as the GEMV's QuantizeRow32). Each panel of 32 weight rows is decoded once into
// unsigned bytes with one fp32 scale and offset per 32 elements and laid out so that one 64-byte
// load holds four consecutive elements of 16 weight rows; the AVX-512 kernel then multiplies a
// group of 4 activation rows by the 32 weight rows with vpdpbusd, each weight load used 4 times
// and each activation dword 2 times, and folds every block's integer sum into fp32 as
//   acc = fma(float(isum), dw * da, acc);  acc = fma(mw, da * sum(qa), acc)
// in block order. The scalar path does exactly these operations in the same order (it is the
// reference), so both paths give the same bits.
//
// Small batches (at most kGemmLaneRows activation rows: a question, a chat turn) turn this around,
// since packing a panel would cost more than the few rows it serves: the activation rows are
// interleaved once per call (16 rows to a 64-byte vector: 4 consecutive elements of each), every
// weight row is decoded once, in its own order, into a strip of 8 rows that stays in L1/L2, and
// the kernels broadcast 4 decoded weight bytes against the vector of every activation row, so
// the lanes are activation rows and each output's block sums are folded in the same order with
// the same operations as above (bit for bit the scalar reference's).
//
// Types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K (K-quants per 32-element sub-block) and Q6_K
// (per 16 elements: two block sums per group, each with its own scale). Paths: scalar, AVX-512
// VNNI, and AVX2 (strips at every batch size; every type but Q8_0, see gemm-avx2.cpp);
// what a path lacks (and F16, BF16) is for the caller's fp32 fallback.
//
// Thread contract: GemmActivations is written by Reset/QuantizeRows (threads may quantize
// disjoint row ranges) and then read by any number of threads. GemmRows is reentrant (its scratch
// is per thread); callers split the weight rows across threads, at multiples of kGemmPanel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/quant/quant-kernels.h"

namespace impress::quant {

// Weight rows packed and multiplied together; splitting work at multiples of it avoids padding.
inline constexpr int64_t kGemmPanel = 32;
// Activation rows up to which GemmRows takes the small-batch path (interleaved activations,
// weight rows decoded once into strips); beyond, panels are packed once and serve more rows
// (AVX-512; AVX2 runs strips at every size).
inline constexpr int kGemmLaneRows = 64;

// True when GemmRows computes `type` on `path` (the path must also run on this CPU).
bool GemmSupports(WeightType type, KernelPath path);
// True when GemmRows multiplies m activation rows on `path` with the small-batch kernels, which
// read the activations' interleaved lane layout (GemmActivations::Reset's `lanes`).
bool GemmUsesLanes(int m, KernelPath path);

// m activation rows of k elements as int8 blocks, plus d * sum(qs) per block and per 16-element
// half block in fp32.
class GemmActivations {
 public:
  // Sizes for m rows of k elements; with `residual`, a second set of rows holds what the first
  // leaves of x (ResidualRow32), and GemmRows multiplies both: W . x ~ W . q1 + W . q2, ~16-bit
  // activations. Without `lanes` the rows are not also interleaved for the small-batch kernels
  // (GemmUsesLanes false: the packed panels read the blocks alone); GemmRows then refuses a path
  // that needs them. Errors: kInvalidArgument unless m >= 0, k > 0, k % 32 == 0.
  Status Reset(int m, int64_t k, bool residual = false, bool lanes = true);
  // Quantizes rows [i0, i1) from x (row i at x + i * ldx), as QuantizeRow32, and their residual.
  void QuantizeRows(const float* x, int64_t ldx, int i0, int i1);
  // The rows of lane group v (16v .. 16v + 15, those below m): the unit to give a thread, since
  // every cache line of the interleaved layout holds 4 bytes of each of a group's 16 rows (rows
  // of one group quantized on two threads pass those lines back and forth between the cores).
  void QuantizeLaneGroup(const float* x, int64_t ldx, int64_t v) {
    QuantizeRows(x, ldx, int(16 * v), int(std::min<int64_t>(m_, 16 * v + 16)));
  }
  // The second set (same shape); nullptr unless Reset with `residual`.
  const GemmActivations* residual() const { return residual_.empty() ? nullptr : residual_.data(); }

  int m() const { return m_; }
  int64_t k() const { return k_; }
  const ActBlock32* Row(int i) const { return blocks_.data() + int64_t(i) * (k_ / kQK32); }
  const float* DSum(int i) const { return dsum_.data() + int64_t(i) * (k_ / kQK32); }
  // d * sum(qs[16h .. 16h + 15]) of block b at [2b + h].
  const float* DSum16(int i) const { return dsum16_.data() + int64_t(i) * (k_ / 16); }

  // The same rows interleaved for the small-batch kernels, in lane groups of 16 rows (rows past m are zero): for lane
  // group v and block b (nb = k / 32), LaneQs holds at ((v * nb + b) * 8 + q) * 64 + 4 * l the quad q (elements
  // 4q..4q+3) of row 16v + l; LaneD, LaneDSum at (v * nb + b) * 16 + l that row's d and d * sum; LaneDSum16 at
  // ((v * nb + b) * 2 + h) * 16 + l its half sums.
  bool has_lanes() const { return lanes_; }
  int n_lane_groups() const { return (m_ + 15) / 16; }
  const int8_t* LaneQs() const { return lane_qs_.data(); }
  const float* LaneD() const { return lane_d_.data(); }
  const float* LaneDSum() const { return lane_dsum_.data(); }
  const float* LaneDSum16() const { return lane_dsum16_.data(); }

 private:
  void QuantizeRow(const float* x, int i);
  void InterleaveRow(int i);  // row i's blocks into the lane layout

  int m_ = 0;
  int64_t k_ = 0;
  bool lanes_ = true;
  std::vector<ActBlock32> blocks_;
  std::vector<float> dsum_, dsum16_;
  std::vector<int8_t> lane_qs_;
  std::vector<float> lane_d_, lane_dsum_, lane_dsum16_;
  std::vector<GemmActivations> residual_;  // empty, or the one residual set
};

// For every activation row i < x.m() and weight row r in [r0, r1):
//   y[i * ldy + r] = (beta == 0 ? 0 : beta * y[i * ldy + r]) + W[r, :] . x_i
// (beta == 0 never reads y); with a residual set, then y[i * ldy + r] += W[r, :] . residual_i
// (each panel packed once for both). Errors: kInvalidArgument for a shape mismatch or rows out of range;
// kUnsupported when !GemmSupports(w.type, path) or the CPU cannot run the path.
Status GemmRows(const WeightMatrix& w, const GemmActivations& x, int64_t r0, int64_t r1, float beta, float* y,
                int64_t ldy, KernelPath path = ActiveKernelPath());

namespace gemm_internal {

// One panel of kGemmPanel weight rows, packed: for group g (32 elements) and quad q (elements
// 4q..4q+3), `data` holds at g * 1024 + q * 128 + 4 * r the four bytes of weight row r; `scale`
// holds dw of row r's half h at (g * halves + h) * 64 + r and mw 32 floats later. Rows past the
// matrix are zero.
struct PackedPanel {
  const uint8_t* data;
  const float* scale;
  int64_t n_groups;
  int halves;  // 1, or 2 for Q6_K
};

// One strip of kStripRows weight rows decoded in their own order: row r's element e at
// u[r * k + e], the scale and offset of its span s (group g's half h at s = g * halves + h) at
// dw[r * n_spans + s], mw[...]; rows past the matrix are zero.
inline constexpr int kStripRows = 8;
struct DecodedStrip {
  const uint8_t* u;
  const float* dw;
  const float* mw;
  int64_t k;  // elements per row
  int halves;
  int bits;  // every u is below 2^bits (DecodedBits)
};

// A whole row of `type` (n_groups groups of 32) decoded as DecodeGroup decodes each group, bit for
// bit, in AVX2: u[32 g + e], dw and mw of group g's half h at g * halves + h.
void DecodeRowAvx2(WeightType type, const uint8_t* row, int64_t n_groups, uint8_t* u, float* dw, float* mw);

// The bytes of a packed panel (PackedPanel::data) from kGemmPanel decoded rows, row r's element e
// at u[r * k + e]: 8 x 8 transposes of 4-byte quads, in AVX2.
void PanelQuadsAvx2(const uint8_t* u, int64_t k, int64_t n_groups, uint8_t* data);

// Groups [g0, g1) of a strip's rows; `more`: the output already holds groups [0, g0). The
// kernels take a strip in chunks of kStripChunkGroups groups (twice that for one lane group), so
// that a pair of lane groups' activations over a chunk (16 KiB) and the strip's weights stay in L1.
inline constexpr int64_t kStripChunkGroups = 16;
// `fetch_lines` cache lines from `fetch` on (the next strip's weights) are prefetched into L2
// while the chunk computes, `fetch_step` lines at each group (SetFetch), so that the memory works
// while the kernels do.
struct StripChunk {
  int64_t g0, g1;
  bool more;
  const uint8_t* fetch = nullptr;
  int64_t fetch_lines = 0;
  int64_t fetch_step = 0;

  void SetFetch(const uint8_t* from, int64_t lines) {
    fetch = from;
    fetch_lines = lines;
    fetch_step = (lines + (g1 - g0) - 1) / (g1 - g0);
  }
};

// The slice of c's prefetch that goes with group g (no division: the kernels call it per group).
inline void FetchSlice(const StripChunk& c, int64_t g) {
  const int64_t l0 = (g - c.g0) * c.fetch_step, l1 = std::min(c.fetch_lines, l0 + c.fetch_step);
  for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(c.fetch + 64 * l, 0, 2);
}

// Rows [0, kStripRows) of a decoded strip times every activation row of x
// over one chunk: out[r * ldo + i] for activation rows i < 16 * x.n_lane_groups() (the padding
// rows get 0), the AVX-512 and AVX2 kernels.
void GemmStripAvx512(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo);
void GemmStripAvx2(const DecodedStrip& w, const GemmActivations& x, const StripChunk& c, float* out, int64_t ldo);

// A strip's products into y: y[i * ldy + r] = (beta == 0 ? 0 : beta * y[i * ldy + r]) + out[r * ldo + i]
// for rows i < m and strip rows r < n_valid, as one fma each (8 x 8 transposes in AVX2).
void StoreStripAvx2(const float* out, int64_t ldo, int m, int n_valid, float beta, float* y, int64_t ldy);

// Packs rows [0, n_valid) of `rows` (row_bytes apart) as the scalar packer does, bit for bit, for
// Q4_0, Q4_1 and Q8_0 (16 rows at a time with gathers); false (nothing written) for other types.
bool PackPanelAvx512(WeightType type, const uint8_t* rows, int64_t row_bytes, int n_valid, int64_t n_groups,
                     uint8_t* data, float* scale);

// QuantizeRow32 bit for bit (finite x) plus dsum[b] = d * sum and dsum16[2b + h] = d * (sum of
// half h) for each block, in AVX-512.
void QuantizeRow32Avx512(const float* x, int64_t n, ActBlock32* out, float* dsum, float* dsum16);

// out[i * ldy + r] for rows i of x and panel rows r < n_valid (the AVX-512 kernel).
void GemmPanelAvx512(const PackedPanel& p, const GemmActivations& x, int n_valid, float beta, float* out, int64_t ldy);

}  // namespace gemm_internal

}  // namespace impress::quant
