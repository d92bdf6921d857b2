// GGUF weight block layouts (the file format, as GGUF defines it) and the int8 activation blocks
// the quantized kernels multiply them with.
//
// Weight blocks are read in place from a mapped file, so every struct here is packed (alignment
// 1): a row may start at any byte and fields are read by value, never through a pointer to a
// member. Element order inside a block is the format's, spelled out beside each struct. The
// activation blocks are ours (never stored in a file) and naturally aligned. Pure data and pure
// inline functions, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/fp16.h"
#include "engine/model/ggml-type.h"

namespace impress::quant {

// Weight types the kernels compute with: the subset of the GGUF type ids (GgmlType, defined once
// in engine/model/ggml-type.h) they support, so a loader can pass a tensor's stored id straight
// through.
enum class WeightType : uint32_t {
  kF16 = uint32_t(GgmlType::kF16),
  kQ4_0 = uint32_t(GgmlType::kQ4_0),
  kQ4_1 = uint32_t(GgmlType::kQ4_1),
  kQ5_0 = uint32_t(GgmlType::kQ5_0),
  kQ5_1 = uint32_t(GgmlType::kQ5_1),
  kQ8_0 = uint32_t(GgmlType::kQ8_0),
  kQ4_K = uint32_t(GgmlType::kQ4_K),
  kQ5_K = uint32_t(GgmlType::kQ5_K),
  kQ6_K = uint32_t(GgmlType::kQ6_K),
  kBF16 = uint32_t(GgmlType::kBF16),
};

inline constexpr int kQK32 = 32;    // elements per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
inline constexpr int kQK256 = 256;  // elements per block of the K-quants (a "super-block")

// Q8_0: y[i] = d * qs[i].
struct __attribute__((packed)) BlockQ8_0 {
  f16_t d;
  int8_t qs[32];
};

// Q4_0: q[i] = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16; y = d * (q - 8).
struct __attribute__((packed)) BlockQ4_0 {
  f16_t d;
  uint8_t qs[16];
};

// Q4_1: nibbles as Q4_0; y = d * q + m.
struct __attribute__((packed)) BlockQ4_1 {
  f16_t d;
  f16_t m;
  uint8_t qs[16];
};

// Q5_0: nibbles as Q4_0, plus bit i of the little-endian 32-bit qh as bit 4 of element i;
// y = d * (q - 16).
struct __attribute__((packed)) BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q5_1: 5-bit q as Q5_0; y = d * q + m.
struct __attribute__((packed)) BlockQ5_1 {
  f16_t d;
  f16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q4_K: 256 elements in 8 sub-blocks of 32. Sub-block j (0..7) takes its 4-bit values from
// qs[32 * (j / 2) + l] (low nibble for even j, high for odd); 6-bit scale sc[j] and min m[j] are
// packed in `scales` (UnpackScaleMinK4). y = (d * sc[j]) * q - dmin * m[j].
struct __attribute__((packed)) BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};

// Q5_K: Q4_K plus a fifth bit: bit j of qh[l] is bit 4 of element l of sub-block j.
struct __attribute__((packed)) BlockQ5_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};

// Q6_K: 256 elements as two halves of 128. In half h, element 32 * c + l (c = 0..3, l = 0..31)
// is ql[64h + l + 32 * (c & 1)] (low nibble for c < 2, high for c >= 2) with bits 4..5 from
// (qh[32h + l] >> 2c) & 3; scales[8h + e / 16] (signed) scales each 16 elements e of the half.
// y = (d * scale) * (q - 32).
struct __attribute__((packed)) BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  f16_t d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(alignof(BlockQ6_K) == 1 && alignof(BlockQ4_K) == 1, "weight blocks are read unaligned");

// Activation block for the 32-element weight types: x[i] ~= d * qs[i], qs in [-127, 127].
// `sum` = sum of qs: it folds the offsets and mins of Q4_0/Q5_0/Q4_1/Q5_1 into one product.
struct ActBlock32 {
  float d;
  int32_t sum;
  int8_t qs[32];
};

// Activation block for the K-quants: 256 elements with one scale; bsums[k] = sum of qs[16k..16k+15]
// (the mins of Q4_K/Q5_K and the -32 of Q6_K are per 16 or 32 elements).
struct ActBlock256 {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

static_assert(sizeof(ActBlock32) == 40 && sizeof(ActBlock256) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. The 12 bytes hold
// scales 0..3 in the low 6 bits of bytes 0..3, mins 0..3 in the low 6 bits of bytes 4..7;
// scales/mins 4..7 keep their low 4 bits in the nibbles of bytes 8..11 and their top 2 bits in
// the top 2 bits of bytes 0..3 (scales) and 4..7 (mins).
// (`static`: the AVX-512 file compiles these with wider instructions; internal linkage keeps the
// linker from handing that copy to code running on a CPU without AVX-512.)
static inline void UnpackScaleMinK4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The 32-bit little-endian qh of Q5_0/Q5_1.
static inline uint32_t LoadQh32(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

}  // namespace impress::quant
