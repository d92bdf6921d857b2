// Internal to engine/quant: decodes one 32-element group of a weight row into unsigned 8-bit
// integers u[0..32) with one fp32 scale and offset, value = dw * u + mw, for every type the int8
// GEMM computes. Unsigned because vpdpbusd multiplies unsigned by signed bytes: a signed format
// is shifted up and the shift folded into mw (Q8_0: u = q + 128, mw = -128 * dw; Q4_0: mw =
// -8 * dw; Q5_0: mw = -16 * dw; these products are exact). K-quants give each of their eight
// sub-blocks its own dw = d * scale and mw = -(dmin * min). Q6_K scales every 16 elements, so a
// group of it has two halves, each with its own dw[h], mw[h] (kHalves = 2); the others write
// dw[0], mw[0] only.
//
// Included by gemm.cpp only (the one place that packs weights, so every path multiplies the same
// integers). Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/quant/block-formats.h"

namespace impress::quant::gemm_internal {

inline float HalfAt(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// The low and high nibbles of 16 bytes as elements 0..15 and 16..31.
inline void Nibbles32(const uint8_t* qs, uint8_t* u) {
  for (int i = 0; i < 16; ++i) {
    u[i] = qs[i] & 15;
    u[i + 16] = qs[i] >> 4;
  }
}

// Halves of a 32-element group with their own scale: 2 for Q6_K, else 1.
template <WeightType T>
inline constexpr int kHalves = T == WeightType::kQ6_K ? 2 : 1;
// The same for a type known at run time.
inline constexpr int Halves(WeightType t) { return t == WeightType::kQ6_K ? 2 : 1; }

// The width of the decoded values: every u of type t is below 2^DecodedBits(t).
inline constexpr int DecodedBits(WeightType t) {
  switch (t) {
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ4_K: return 4;
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ5_K: return 5;
    case WeightType::kQ6_K: return 6;
    default: return 8;
  }
}

// Group g (32 elements) of `row`, a row of type T.
template <WeightType T>
inline void DecodeGroup(const uint8_t* row, int64_t g, uint8_t* u, float* dw, float* mw) {
  if constexpr (T == WeightType::kQ8_0) {
    const uint8_t* b = row + g * int64_t(sizeof(BlockQ8_0));
    for (int i = 0; i < 32; ++i) u[i] = uint8_t(b[2 + i] ^ 0x80);
    *dw = HalfAt(b);
    *mw = -128.0f * *dw;
  } else if constexpr (T == WeightType::kQ4_0 || T == WeightType::kQ4_1) {
    const uint8_t* b = row + g * int64_t(T == WeightType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ4_1));
    *dw = HalfAt(b);
    if constexpr (T == WeightType::kQ4_0) {
      Nibbles32(b + 2, u);
      *mw = -8.0f * *dw;
    } else {
      Nibbles32(b + 4, u);
      *mw = HalfAt(b + 2);
    }
  } else if constexpr (T == WeightType::kQ5_0 || T == WeightType::kQ5_1) {
    constexpr bool kMin = T == WeightType::kQ5_1;
    const uint8_t* b = row + g * int64_t(kMin ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0));
    const int o = kMin ? 4 : 2;  // qh follows d (and m)
    const uint32_t qh = LoadQh32(b + o);
    Nibbles32(b + o + 4, u);
    for (int i = 0; i < 32; ++i) u[i] = uint8_t(u[i] | ((qh >> i) & 1) << 4);
    *dw = HalfAt(b);
    *mw = kMin ? HalfAt(b + 2) : -16.0f * *dw;
  } else if constexpr (T == WeightType::kQ4_K || T == WeightType::kQ5_K) {
    constexpr bool k5 = T == WeightType::kQ5_K;
    const int64_t block_bytes = k5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    const uint8_t* b = row + (g / 8) * block_bytes;
    const int j = int(g % 8);
    uint8_t sc = 0, m = 0;
    UnpackScaleMinK4(j, b + 4, &sc, &m);
    const uint8_t* qs = b + (k5 ? 48 : 16) + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) u[l] = uint8_t((qs[l] >> shift) & 15);
    if constexpr (k5) {
      const uint8_t* qh = b + 16;
      for (int l = 0; l < 32; ++l) u[l] = uint8_t(u[l] | ((qh[l] >> j) & 1) << 4);
    }
    *dw = HalfAt(b) * float(sc);
    *mw = -(HalfAt(b + 2) * float(m));
  } else if constexpr (T == WeightType::kQ6_K) {
    const uint8_t* b = row + (g / 8) * int64_t(sizeof(BlockQ6_K));
    const int h = int(g % 8) / 4, c = int(g % 8) % 4;
    const uint8_t* ql = b + 64 * h + 32 * (c & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int shift = c >= 2 ? 4 : 0;
    for (int l = 0; l < 32; ++l) u[l] = uint8_t(((ql[l] >> shift) & 15) | ((qh[l] >> (2 * c)) & 3) << 4);
    const float d = HalfAt(b + 208);
    for (int half = 0; half < 2; ++half) {
      dw[half] = d * float(int8_t(b[192 + 8 * h + 2 * c + half]));
      mw[half] = -32.0f * dw[half];
    }
  }
}

}  // namespace impress::quant::gemm_internal
