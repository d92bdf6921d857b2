// The portable scalar path: the reference every SIMD path is tested against. Written in the
// formats' own signed terms (q - 8, q - 32, ...) so that the SIMD offset tricks are checked
// against the plain definition, not against themselves.
//
// Per block the dot is integer parts combined with fp32 scales:
//   Q8_0, Q4_0, Q5_0:  (dw * da) * I,                I = sum (q - offset) * a
//   Q4_1, Q5_1:        (dw * da) * I + m * (da * S),  I = sum q * a, S = sum a
//   Q4_K, Q5_K:        (d * da) * I1 - (dmin * da) * I2,  I1 = sum_j sc_j sum q * a,  I2 = sum_j m_j S_j
//   Q6_K:              (d * da) * I,                I = sum_k scale_k sum (q - 32) * a
#include <cstring>

#include "engine/quant/kernel-table.h"

namespace impress::quant {
namespace {

inline int Nibble32(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

// ---- integer parts per block ----

int32_t IntQ8_0(const BlockQ8_0& w, const ActBlock32& a) {
  int32_t s = 0;
  for (int i = 0; i < kQK32; ++i) s += int32_t(w.qs[i]) * a.qs[i];
  return s;
}

// sum (q - offset) * a over a 32-block whose q comes from nibbles (+ qh bits when qh != 0).
int32_t IntNibbles(const uint8_t* qs, uint32_t qh, int offset, const ActBlock32& a) {
  int32_t s = 0;
  for (int i = 0; i < kQK32; ++i) s += (Nibble32(qs, i) + int((qh >> i) & 1) * 16 - offset) * a.qs[i];
  return s;
}

// I1 and I2 of a Q4_K/Q5_K block (qh null for Q4_K).
void IntK4or5(const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, const ActBlock256& a, int32_t* out) {
  int32_t i1 = 0, i2 = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, scales, &sc, &m);
    int32_t dot = 0, sum_a = 0;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
      if (qh) q |= ((qh[l] >> j) & 1) << 4;
      dot += q * a.qs[32 * j + l];
      sum_a += a.qs[32 * j + l];
    }
    i1 += int32_t(sc) * dot;
    i2 += int32_t(m) * sum_a;
  }
  out[0] = i1;
  out[1] = i2;
}

int32_t IntQ6_K(const BlockQ6_K& w, const ActBlock256& a) {
  int32_t total = 0;
  for (int h = 0; h < 2; ++h) {
    int32_t per16[8] = {};
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = (w.ql[64 * h + l + 32 * (c & 1)] >> (c >= 2 ? 4 : 0)) & 15;
        const int q = lo | ((w.qh[32 * h + l] >> (2 * c)) & 3) << 4;
        const int e = 32 * c + l;
        per16[e / 16] += (q - 32) * a.qs[128 * h + e];
      }
    }
    for (int k = 0; k < 8; ++k) total += int32_t(w.scales[8 * h + k]) * per16[k];
  }
  return total;
}

// ---- block parts and float combination, per type ----

// How a type's integer parts become its fp32 contribution: the block scale alone, ...
template <class Blk, class Act>
struct ScaledInt {
  using W = Blk;
  using A = Act;
  static constexpr int kParts = 1;
  static float Combine(const W& w, const A& a, const int32_t* p) { return (Fp16ToFp32(w.d) * a.d) * float(p[0]); }
};

// ... plus the min m times the activation block's sum (Q4_1, Q5_1) ...
template <class Blk>
struct ScaledIntPlusMin : ScaledInt<Blk, ActBlock32> {
  static float Combine(const Blk& w, const ActBlock32& a, const int32_t* p) {
    return ScaledInt<Blk, ActBlock32>::Combine(w, a, p) + Fp16ToFp32(w.m) * (a.d * float(a.sum));
  }
};

// ... or minus dmin times the min-weighted sums (Q4_K, Q5_K; qh only for Q5_K).
template <class Blk, bool kHasQh>
struct KQuant4or5 : ScaledInt<Blk, ActBlock256> {
  static constexpr int kParts = 2;
  static void Parts(const Blk& w, const ActBlock256& a, int32_t* p) {
    const uint8_t* qh = nullptr;
    if constexpr (kHasQh) qh = w.qh;
    IntK4or5(w.scales, qh, w.qs, a, p);
  }
  static float Combine(const Blk& w, const ActBlock256& a, const int32_t* p) {
    return ScaledInt<Blk, ActBlock256>::Combine(w, a, p) - (Fp16ToFp32(w.dmin) * a.d) * float(p[1]);
  }
};

struct Q8_0 : ScaledInt<BlockQ8_0, ActBlock32> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntQ8_0(w, a); }
};
struct Q4_0 : ScaledInt<BlockQ4_0, ActBlock32> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntNibbles(w.qs, 0, 8, a); }
};
struct Q5_0 : ScaledInt<BlockQ5_0, ActBlock32> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntNibbles(w.qs, LoadQh32(w.qh), 16, a); }
};
struct Q6_K : ScaledInt<BlockQ6_K, ActBlock256> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntQ6_K(w, a); }
};
struct Q4_1 : ScaledIntPlusMin<BlockQ4_1> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntNibbles(w.qs, 0, 0, a); }
};
struct Q5_1 : ScaledIntPlusMin<BlockQ5_1> {
  static void Parts(const W& w, const A& a, int32_t* p) { p[0] = IntNibbles(w.qs, LoadQh32(w.qh), 0, a); }
};
using Q4_K = KQuant4or5<BlockQ4_K, false>;
using Q5_K = KQuant4or5<BlockQ5_K, true>;

template <class T>
float Dot(const uint8_t* w_row, const void* x, int64_t n) {
  const auto* w = reinterpret_cast<const typename T::W*>(w_row);
  const auto* a = static_cast<const typename T::A*>(x);
  const int64_t nb = n / int64_t(sizeof(a->qs));
  float sum = 0.0f;
  for (int64_t ib = 0; ib < nb; ++ib) {
    int32_t p[2];
    T::Parts(w[ib], a[ib], p);
    sum += T::Combine(w[ib], a[ib], p);
  }
  return sum;
}

template <class T>
void Parts(const uint8_t* w_row, const void* x, int64_t n, int32_t* parts) {
  const auto* w = reinterpret_cast<const typename T::W*>(w_row);
  const auto* a = static_cast<const typename T::A*>(x);
  const int64_t nb = n / int64_t(sizeof(a->qs));
  for (int64_t ib = 0; ib < nb; ++ib) T::Parts(w[ib], a[ib], parts + T::kParts * ib);
}

// F16/BF16 . fp32: eight independent partial sums (a chain of n / 8 adds each), then pairwise.
template <float (*Load)(const uint8_t*)>
float DotHalfRow(const uint8_t* w_row, const void* xv, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += Load(w_row + 2 * (i + k)) * x[i + k];
  }
  for (; i < n; ++i) acc[i % 8] += Load(w_row + 2 * i) * x[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

float LoadF16(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

float LoadBF16(const uint8_t* p) {
  bf16_t h;
  std::memcpy(&h, p, 2);
  return Bf16ToFp32(h);
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = {
      {DotHalfRow<LoadF16>, DotHalfRow<LoadBF16>, Dot<Q8_0>, Dot<Q4_0>, Dot<Q4_1>, Dot<Q5_0>, Dot<Q5_1>, Dot<Q4_K>,
       Dot<Q5_K>, Dot<Q6_K>},
      {nullptr, nullptr, Parts<Q8_0>, Parts<Q4_0>, Parts<Q4_1>, Parts<Q5_0>, Parts<Q5_1>, Parts<Q4_K>, Parts<Q5_K>,
       Parts<Q6_K>},
  };
  return table;
}

}  // namespace impress::quant
