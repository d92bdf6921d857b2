// The CUDA backend's kernels, written once as plain bodies that run on the GPU (nvcc, launched by
// cuda-kernels.cu) and on the host through a small emulator (g++, tests/cuda/kernel-emulation-
// test.cpp), so the index arithmetic is tested against the CPU backend on machines without a GPU.
//
// Two shapes of body:
//   elementwise:  `void operator()(int64_t idx) const` for idx in [0, n) -- one thread per item.
//   block:        `template <class Exec> void operator()(const Exec& ex, int bx, int by, int bz,
//                 char* smem) const` -- one thread block; work is split into phases
//                 ex.Each([&](int t) { ... }), each followed by a barrier. All state that lives
//                 across phases is in shared memory (smem), never in a thread's locals, so the
//                 host emulator may run a phase's threads one after another.
// Every block body has a SmemBytes(...) telling the launcher (and the emulator) its shared
// memory; the bodies never index past it.
//
// Numerics follow cpu-backend.cpp: fp32 math, fp16 K/V widened on load, softmax as
// exp(s - max) / sum, RoPE angles in double. Reductions run in a fixed order (no float atomics),
// so results are deterministic run to run.
//
// Thread contract: pure functions of their arguments; no globals.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define IMPRESS_KFN __device__ __forceinline__
#define IMPRESS_HKFN __host__ __device__ __forceinline__
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/fp16.h"
#define IMPRESS_KFN inline
#define IMPRESS_HKFN inline
#endif

namespace impress::cuda {

#if defined(__CUDACC__)
IMPRESS_KFN float HalfToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }
IMPRESS_KFN uint16_t FloatToHalf(float f) { return __half_as_ushort(__float2half_rn(f)); }
IMPRESS_KFN uint16_t FloatToBf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
IMPRESS_KFN float NegInf() { return -__int_as_float(0x7f800000); }
#else
inline float HalfToFloat(uint16_t h) { return Fp16ToFp32(h); }
inline uint16_t FloatToHalf(float f) { return Fp32ToFp16(f); }
inline uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}
inline float NegInf() { return -INFINITY; }
#endif

IMPRESS_HKFN int MinI(int a, int b) { return a < b ? a : b; }
IMPRESS_HKFN int MaxI(int a, int b) { return a > b ? a : b; }

constexpr int kBlockThreads = 128;  // threads of every block body
constexpr int kElemThreads = 256;   // threads per block of elementwise kernels
constexpr int kMaxHeadDim = 256;    // attention bodies (shared memory grows with head_dim)

// ---- elementwise bodies ----------------------------------------------------------------------

// RoPE, rotate-half: one item per (token, i < head_dim/2); angle pos * inv_freq[i] in double.
struct RopeBody {
  float* x;  // (n_tok, n_heads, head_dim)
  const int32_t* positions;
  const float* inv_freq;
  int n_tok, n_heads, head_dim;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int half = head_dim / 2;
    const int64_t t = idx / half;
    const int i = int(idx % half);
    const double ang = double(positions[t]) * double(inv_freq[i]);
    const float cs = float(cos(ang)), sn = float(sin(ang));
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * cs - x1 * sn;
      v[i + half] = x1 * cs + x0 * sn;
    }
  }
};

// out[r, c] = silu(gate[r*ld + c]) * up[r*ld + c]; out dense. out may equal gate when ld == n_cols.
struct SwiGluBody {
  float* out;
  const float* gate;
  const float* up;
  int n_cols, ld;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int64_t r = idx / n_cols;
    const int c = int(idx % n_cols);
    const float g = gate[r * ld + c];
    out[idx] = g / (1.0f + expf(-g)) * up[r * ld + c];
  }
};

struct ReluBody {
  float* x;
  IMPRESS_KFN void operator()(int64_t idx) const { x[idx] = x[idx] > 0 ? x[idx] : 0.0f; }
};

struct AddBody {
  float* x;
  const float* y;
  IMPRESS_KFN void operator()(int64_t idx) const { x[idx] += y[idx]; }
};

// x[r*ld + c] += bias[c]
struct AddBiasBody {
  float* x;
  const float* bias;
  int n_cols, ld;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int64_t r = idx / n_cols;
    const int c = int(idx % n_cols);
    x[r * ld + c] += bias[c];
  }
};

// out[r, c] = table[ids[r], c]
struct GetRowsBody {
  float* out;
  const float* table;
  const int32_t* ids;
  int n_cols;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int64_t r = idx / n_cols;
    const int c = int(idx % n_cols);
    out[idx] = table[int64_t(ids[r]) * n_cols + c];
  }
};

// dst[r*ld_dst + c] = half or bfloat16 of src[r*ld_src + c] (round to nearest even).
struct ToHalfBody {
  uint16_t* dst;
  const float* src;
  int n_cols, ld_dst, ld_src;
  bool bf16;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int64_t r = idx / n_cols;
    const int c = int(idx % n_cols);
    const float v = src[r * ld_src + c];
    dst[r * ld_dst + c] = bf16 ? FloatToBf16(v) : FloatToHalf(v);
  }
};

// ---- norms (one block per row) ---------------------------------------------------------------

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. out may equal x.
struct RmsNormBody {
  float* out;
  const float* x;
  const float* w;
  int n_cols;
  float eps;
  static int SmemBytes(int n_threads) { return int(sizeof(float)) * (n_threads + 1); }
  template <class Exec>
  IMPRESS_KFN void operator()(const Exec& ex, int bx, int, int, char* smem) const {
    float* red = reinterpret_cast<float*>(smem);  // (n_threads) partial sums, then the scale
    const int nt = ex.n_threads();
    const float* xr = x + int64_t(bx) * n_cols;
    float* orow = out + int64_t(bx) * n_cols;
    ex.Each([&](int t) {
      float s = 0;
      for (int c = t; c < n_cols; c += nt) s += xr[c] * xr[c];
      red[t] = s;
    });
    ex.Each([&](int t) {
      if (t != 0) return;
      double ss = 0;
      for (int u = 0; u < nt; ++u) ss += red[u];
      red[nt] = float(1.0 / sqrt(ss / n_cols + double(eps)));
    });
    ex.Each([&](int t) {
      const float scale = red[nt];
      for (int c = t; c < n_cols; c += nt) orow[c] = xr[c] * scale * w[c];
    });
  }
};

// out[r] = (x[r] - mean) / sqrt(var + eps) * w + b (b may be null). out may equal x.
struct LayerNormBody {
  float* out;
  const float* x;
  const float* w;
  const float* b;
  int n_cols;
  float eps;
  static int SmemBytes(int n_threads) { return int(sizeof(float)) * (n_threads + 2); }
  template <class Exec>
  IMPRESS_KFN void operator()(const Exec& ex, int bx, int, int, char* smem) const {
    float* red = reinterpret_cast<float*>(smem);  // partials; red[nt] = mean, red[nt+1] = 1/std
    const int nt = ex.n_threads();
    const float* xr = x + int64_t(bx) * n_cols;
    float* orow = out + int64_t(bx) * n_cols;
    ex.Each([&](int t) {
      float s = 0;
      for (int c = t; c < n_cols; c += nt) s += xr[c];
      red[t] = s;
    });
    ex.Each([&](int t) {
      if (t != 0) return;
      double s = 0;
      for (int u = 0; u < nt; ++u) s += red[u];
      red[nt] = float(s / n_cols);
    });
    ex.Each([&](int t) {
      const float mean = red[nt];
      float s = 0;
      for (int c = t; c < n_cols; c += nt) s += (xr[c] - mean) * (xr[c] - mean);
      red[t] = s;
    });
    ex.Each([&](int t) {
      if (t != 0) return;
      double s = 0;
      for (int u = 0; u < nt; ++u) s += red[u];
      red[nt + 1] = float(1.0 / sqrt(s / n_cols + double(eps)));
    });
    ex.Each([&](int t) {
      const float mean = red[nt], inv = red[nt + 1];
      for (int c = t; c < n_cols; c += nt) orow[c] = (xr[c] - mean) * inv * w[c] + (b ? b[c] : 0.0f);
    });
  }
};

// ---- attention --------------------------------------------------------------------------------

// What every attention body reads. Key j of kv head g (prefix slot `slot`):
//   j <  n_prefix: k_prefix[(j * n_slots + slot) * head_dim ...]
//   j >= n_prefix: k_new[((j - n_prefix) * n_head_kv + g) * head_dim ...]
// New token i sees keys [0, n_prefix + i + 1).
struct AttnShape {
  int n_new, n_head, n_head_kv, head_dim;
  float scale;
  const float* q;         // (n_new, n_head, head_dim)
  const uint16_t* k_new;  // (n_new, n_head_kv, head_dim) fp16
  const uint16_t* v_new;  // same; may be null when no output is wanted
  int n_prefix, n_slots;
  const uint16_t* k_prefix;  // (n_prefix, n_slots, head_dim) fp16
  const uint16_t* v_prefix;

  IMPRESS_KFN const uint16_t* Key(int j, int g, int slot) const {
    return j < n_prefix ? k_prefix + (int64_t(j) * n_slots + slot) * head_dim
                        : k_new + (int64_t(j - n_prefix) * n_head_kv + g) * head_dim;
  }
  IMPRESS_KFN const uint16_t* Value(int j, int g, int slot) const {
    return j < n_prefix ? v_prefix + (int64_t(j) * n_slots + slot) * head_dim
                        : v_new + (int64_t(j - n_prefix) * n_head_kv + g) * head_dim;
  }
};

// Key tile width for a head size: keeps shared memory near 48 KiB for head_dim 64 and under
// 100 KiB for 256.
IMPRESS_HKFN int AttnKeyTile(int head_dim) { return head_dim <= 64 ? 64 : 32; }
constexpr int kAttnRowTile = 16;  // query rows per block

// Pass 1: for a block of query rows, the online softmax over their visible keys: row max m and
// row sum l (of exp(s - m)), and with an output, the attention output sum_j p_j v_j / l.
//
// Rows of a block: attention mode (query_heads == null): blockIdx.y = kv head g, and the
// n_new * group rows (i, hh) are flattened as r = i * group + hh (head g * group + hh), so one
// K/V tile serves the whole GQA group. Score mode: blockIdx.y = x, one query head
// query_heads[x], rows r = i, keys of prefix slot slot_of[g].
// Split mode (n_split > 1, blockIdx.z = split): the block covers only its share of key tiles
// and writes unnormalised partials (part_m, part_l, part_o) that CombineBody merges.
struct RowPassBody {
  AttnShape s;
  const int* query_heads;  // score mode: (gridDim.y) heads; null: attention mode
  const int* slot_of;      // score mode: (n_head_kv) prefix slot of each kv head
  float* out;              // (n_new, n_head, head_dim) or null (stats only)
  float* row_max;          // (n_head, n_new)
  float* row_sum;          // (n_head, n_new)
  int n_split;
  float* part_m;  // split mode: (n_split, n_head, n_new)
  float* part_l;
  float* part_o;  // split mode with out: (n_split, n_head, n_new, head_dim)

  static int SmemFloats(int head_dim, bool with_out) {
    const int bq = kAttnRowTile, bk = AttnKeyTile(head_dim), kp = head_dim + 1;
    return bq * head_dim + bk * kp * (with_out ? 2 : 1) + bq * bk + (with_out ? bq * head_dim : 0) + 3 * bq;
  }
  static int SmemBytes(int head_dim, bool with_out) { return int(sizeof(float)) * SmemFloats(head_dim, with_out); }

  template <class Exec>
  IMPRESS_KFN void operator()(const Exec& ex, int bx, int by, int bz, char* smem) const {
    const int hd = s.head_dim, kp = hd + 1, group = s.n_head / s.n_head_kv;
    const int BQ = kAttnRowTile, BK = AttnKeyTile(hd);
    const bool with_out = out != nullptr;
    int n_hh, h_first, g, slot;
    if (query_heads) {
      h_first = query_heads[by];
      n_hh = 1;
      g = h_first / group;
      slot = slot_of[g];
    } else {
      g = by;
      n_hh = group;
      h_first = g * group;
      slot = g;
    }
    const int n_rows = s.n_new * n_hh;
    const int r0 = bx * BQ;
    if (r0 >= n_rows) return;  // uniform over the block
    const int nr = MinI(BQ, n_rows - r0);
    const int n_keys = s.n_prefix + (r0 + nr - 1) / n_hh + 1;  // keys the block's last row sees
    // This split's key range, in whole tiles.
    const int n_tiles = (n_keys + BK - 1) / BK;
    const int tiles_per_split = (n_tiles + n_split - 1) / n_split;
    const int k_begin = MinI(n_keys, bz * tiles_per_split * BK);
    const int k_end = MinI(n_keys, (bz + 1) * tiles_per_split * BK);

    float* Q = reinterpret_cast<float*>(smem);  // (BQ, hd)
    float* K = Q + BQ * hd;                     // (BK, hd + 1)
    float* V = K + BK * kp;                     // (BK, hd + 1) with out
    float* S = V + (with_out ? BK * kp : 0);    // (BQ, BK) scores, then probabilities
    float* O = S + BQ * BK;                     // (BQ, hd) with out: unnormalised output
    float* M = O + (with_out ? BQ * hd : 0);    // (BQ) running max
    float* L = M + BQ;                          // (BQ) running sum
    float* A = L + BQ;                          // (BQ) rescale factor of the current tile
    const int nt = ex.n_threads();

    ex.Each([&](int t) {
      for (int e = t; e < BQ * hd; e += nt) {
        const int r = e / hd, d = e % hd;
        float v = 0;
        if (r < nr) {
          const int i = (r0 + r) / n_hh, h = h_first + (r0 + r) % n_hh;
          v = s.q[(int64_t(i) * s.n_head + h) * hd + d];
        }
        Q[e] = v;
        if (with_out) O[e] = 0;
      }
      if (t < BQ) {
        M[t] = NegInf();
        L[t] = 0;
      }
    });
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      const int nk = MinI(BK, k_end - k0);
      ex.Each([&](int t) {
        for (int e = t; e < BK * hd; e += nt) {
          const int c = e / hd, d = e % hd;
          float kv = 0, vv = 0;
          if (c < nk) {
            kv = HalfToFloat(s.Key(k0 + c, g, slot)[d]);
            if (with_out) vv = HalfToFloat(s.Value(k0 + c, g, slot)[d]);
          }
          K[c * kp + d] = kv;
          if (with_out) V[c * kp + d] = vv;
        }
      });
      ex.Each([&](int t) {
        for (int e = t; e < BQ * BK; e += nt) {
          const int r = e / BK, c = e % BK;
          float v = NegInf();
          if (r < nr && c < nk && k0 + c < s.n_prefix + (r0 + r) / n_hh + 1) {
            const float* qr = Q + r * hd;
            const float* kc = K + c * kp;
            float dot = 0;
            for (int d = 0; d < hd; ++d) dot += qr[d] * kc[d];
            v = s.scale * dot;
          }
          S[e] = v;
        }
      });
      ex.Each([&](int t) {
        if (t >= BQ) return;
        float* sr = S + t * BK;
        float mx = M[t];
        for (int c = 0; c < BK; ++c) mx = fmaxf(mx, sr[c]);
        if (mx == NegInf()) {  // nothing visible yet (or a padding row)
          for (int c = 0; c < BK; ++c) sr[c] = 0;
          A[t] = 1;
          return;
        }
        float sum = 0;
        for (int c = 0; c < BK; ++c) {
          const float p = expf(sr[c] - mx);  // exp(-inf) = 0 for masked columns
          sr[c] = p;
          sum += p;
        }
        const float alpha = expf(M[t] - mx);  // 0 on the first visible tile
        A[t] = alpha;
        L[t] = L[t] * alpha + sum;
        M[t] = mx;
      });
      if (with_out) {
        ex.Each([&](int t) {
          for (int e = t; e < BQ * hd; e += nt) {
            const int r = e / hd, d = e % hd;
            const float* pr = S + r * BK;
            float acc = O[e] * A[r];
            for (int c = 0; c < nk; ++c) acc += pr[c] * V[c * kp + d];
            O[e] = acc;
          }
        });
      }
    }
    ex.Each([&](int t) {
      const bool split = n_split > 1;
      if (with_out) {
        for (int e = t; e < nr * hd; e += nt) {
          const int r = e / hd, d = e % hd;
          const int i = (r0 + r) / n_hh, h = h_first + (r0 + r) % n_hh;
          if (split) {
            part_o[((int64_t(bz) * s.n_head + h) * s.n_new + i) * hd + d] = O[e];
          } else {
            out[(int64_t(i) * s.n_head + h) * hd + d] = O[e] / L[r];
          }
        }
      }
      if (t < nr) {
        const int i = (r0 + t) / n_hh, h = h_first + (r0 + t) % n_hh;
        if (split) {
          part_m[(int64_t(bz) * s.n_head + h) * s.n_new + i] = M[t];
          part_l[(int64_t(bz) * s.n_head + h) * s.n_new + i] = L[t];
        } else {
          row_max[int64_t(h) * s.n_new + i] = M[t];
          row_sum[int64_t(h) * s.n_new + i] = L[t];
        }
      }
    });
  }
};

// Merges the splits of RowPassBody: one item per (head x, token i, d) with d < head_dim when
// there is an output, else d = 0 only. Heads: heads[x] when given, else x.
struct CombineBody {
  int n_split, n_head, n_new, head_dim;
  const int* heads;
  const float* part_m;
  const float* part_l;
  const float* part_o;
  float* out;  // (n_new, n_head, head_dim) or null
  float* row_max;
  float* row_sum;
  IMPRESS_KFN void operator()(int64_t idx) const {
    const int width = out ? head_dim : 1;
    const int d = int(idx % width);
    const int64_t row = idx / width;
    const int i = int(row % n_new);
    const int x = int(row / n_new);
    const int h = heads ? heads[x] : x;
    float m = NegInf();
    for (int sp = 0; sp < n_split; ++sp) m = fmaxf(m, part_m[(int64_t(sp) * n_head + h) * n_new + i]);
    float l = 0, o = 0;
    for (int sp = 0; sp < n_split; ++sp) {
      const int64_t k = (int64_t(sp) * n_head + h) * n_new + i;
      const float pm = part_m[k];
      if (pm == NegInf()) continue;  // a split with no visible key
      const float f = expf(pm - m);
      l += part_l[k] * f;
      if (out) o += part_o[k * head_dim + d] * f;
    }
    if (out) out[(int64_t(i) * n_head + h) * head_dim + d] = o / l;
    if (d == 0) {
      row_max[int64_t(h) * n_new + i] = m;
      row_sum[int64_t(h) * n_new + i] = l;
    }
  }
};

// Pass 2: H2O importance. For query head heads[by] and key columns [bx*BK, +BK) of [0, n_cols),
// the sum over the new-token rows that see the column of exp(s - row_max) / row_sum, written to
// imp[by * ld + column]. Each column is summed by fixed threads in a fixed order: no atomics.
struct ImportanceBody {
  AttnShape s;
  const int* heads;    // (gridDim.y) query heads
  const int* slot_of;  // (n_head_kv) prefix slot of each kv head; null: slot = kv head
  const float* row_max;
  const float* row_sum;
  int n_cols, ld;
  float* imp;

  static int SmemFloats(int head_dim, int n_threads) {
    const int bk = AttnKeyTile(head_dim);
    return bk * (head_dim + 1) + kAttnRowTile * head_dim + 2 * kAttnRowTile + n_threads;
  }
  static int SmemBytes(int head_dim, int n_threads) { return int(sizeof(float)) * SmemFloats(head_dim, n_threads); }

  template <class Exec>
  IMPRESS_KFN void operator()(const Exec& ex, int bx, int by, int, char* smem) const {
    const int hd = s.head_dim, kp = hd + 1, group = s.n_head / s.n_head_kv;
    const int BQ = kAttnRowTile, BK = AttnKeyTile(hd);
    const int h = heads[by], g = h / group, slot = slot_of ? slot_of[g] : g;
    const int c0 = bx * BK;
    if (c0 >= n_cols) return;
    const int nc = MinI(BK, n_cols - c0);
    const int nt = ex.n_threads();
    const int n_sub = nt / BK;  // threads per column (kBlockThreads is a multiple of BK)

    float* K = reinterpret_cast<float*>(smem);  // (BK, hd + 1)
    float* Q = K + BK * kp;                     // (BQ, hd)
    float* Mx = Q + BQ * hd;                    // (BQ)
    float* Li = Mx + BQ;                        // (BQ) 1 / row sum
    float* acc = Li + BQ;                       // (nt) per-thread partial column sums

    ex.Each([&](int t) {
      for (int e = t; e < BK * hd; e += nt) {
        const int c = e / hd, d = e % hd;
        K[c * kp + d] = c < nc ? HalfToFloat(s.Key(c0 + c, g, slot)[d]) : 0.0f;
      }
      acc[t] = 0;
    });
    // Column j is seen by rows i >= j - n_prefix.
    const int i_begin = MaxI(0, c0 - s.n_prefix);
    for (int i0 = i_begin; i0 < s.n_new; i0 += BQ) {
      ex.Each([&](int t) {
        for (int e = t; e < BQ * hd; e += nt) {
          const int r = e / hd, d = e % hd, i = i0 + r;
          Q[e] = i < s.n_new ? s.q[(int64_t(i) * s.n_head + h) * hd + d] : 0.0f;
        }
        if (t < BQ) {
          const int i = i0 + t;
          Mx[t] = i < s.n_new ? row_max[int64_t(h) * s.n_new + i] : 0.0f;
          Li[t] = i < s.n_new ? 1.0f / row_sum[int64_t(h) * s.n_new + i] : 0.0f;
        }
      });
      ex.Each([&](int t) {
        const int c = t % BK;
        if (c >= nc) return;
        float a = acc[t];
        for (int r = t / BK; r < BQ; r += n_sub) {
          const int i = i0 + r;
          if (i >= s.n_new || c0 + c >= s.n_prefix + i + 1) continue;
          const float* qr = Q + r * hd;
          const float* kc = K + c * kp;
          float dot = 0;
          for (int d = 0; d < hd; ++d) dot += qr[d] * kc[d];
          a += expf(s.scale * dot - Mx[r]) * Li[r];
        }
        acc[t] = a;
      });
    }
    ex.Each([&](int t) {
      if (t >= nc) return;
      float sum = 0;
      for (int u = 0; u < n_sub; ++u) sum += acc[t + u * BK];
      imp[int64_t(by) * ld + c0 + t] = sum;
    });
  }
};

#if !defined(__CUDACC__)
// ---- host emulator (tests) -----------------------------------------------------------------

struct HostExec {
  int n;
  int n_threads() const { return n; }
  template <class F>
  void Each(F f) const {
    for (int t = 0; t < n; ++t) f(t);
  }
};

template <class Body>
void EmulateElementwise(const Body& body, int64_t n) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Runs every block of a (gx, gy, gz) grid with `smem_bytes` of shared memory (a fresh heap
// buffer per block, so a sanitizer sees any overrun).
template <class Body>
void EmulateBlocks(const Body& body, int gx, int gy, int gz, int smem_bytes, int n_threads = kBlockThreads) {
  for (int z = 0; z < gz; ++z)
    for (int y = 0; y < gy; ++y)
      for (int x = 0; x < gx; ++x) {
        std::vector<char> smem(size_t(std::max(smem_bytes, 1)));
        std::fill(smem.begin(), smem.end(), char(0x7f));  // garbage, as on a GPU
        body(HostExec{n_threads}, x, y, z, smem.data());
      }
}
#endif

}  // namespace impress::cuda
