// Test helper: random weight rows of every WeightType and random activation rows, NaN-free, with
// the hard cases mixed in (extreme and subnormal fp16 scales, all-zero blocks, every quantized
// value at its largest magnitude).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant/quant-kernels.h"

namespace impress::quant::test {

inline constexpr WeightType kQuantizedTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                                                 WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                                                 WeightType::kQ5_K, WeightType::kQ6_K};
inline constexpr WeightType kHalfTypes[] = {WeightType::kF16, WeightType::kBF16};

// Byte offsets of a block's fp16 scale fields: d first, then m / dmin where the type has one.
inline std::vector<int> HalfFieldOffsets(WeightType t) {
  switch (t) {
    case WeightType::kQ4_1:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return {0, 2};
    case WeightType::kQ6_K: return {208};
    case WeightType::kF16:
    case WeightType::kBF16: return {};
    default: return {0};
  }
}

enum class BlockCase { kRealistic, kExtremeScale, kSubnormalScale, kZero, kMaxMagnitude, kCount };

inline void PutHalf(uint8_t* p, f16_t h) { std::memcpy(p, &h, 2); }

// A finite fp16 scale of the given case.
inline f16_t RandomScale(BlockCase c, std::mt19937& rng) {
  const f16_t sign = (rng() & 1) ? 0x8000 : 0;
  switch (c) {
    case BlockCase::kExtremeScale: return f16_t(sign | (rng() % 2 ? 0x7bff : 0x7800 + rng() % 0x3ff));
    case BlockCase::kSubnormalScale: return f16_t(sign | (1 + rng() % 0x3ff));
    case BlockCase::kMaxMagnitude: return f16_t(sign | 0x7bff);  // 65504
    default: return Fp32ToFp16(std::uniform_real_distribution<float>(1e-4f, 1.0f)(rng) * (sign ? -1.0f : 1.0f));
  }
}

// Fills one block (BlockBytes(t) bytes) of a quantized type.
inline void FillBlock(WeightType t, BlockCase c, std::mt19937& rng, uint8_t* p) {
  const int64_t bytes = BlockBytes(t);
  if (c == BlockCase::kZero) {
    std::memset(p, 0, size_t(bytes));
    return;
  }
  for (int64_t i = 0; i < bytes; ++i) p[i] = uint8_t(rng());
  if (c == BlockCase::kMaxMagnitude) {
    std::memset(p, 0xff, size_t(bytes));  // nibbles 15, fifth bits set, 6-bit scales and mins 63
    if (t == WeightType::kQ8_0) {
      for (int i = 0; i < 32; ++i) p[2 + i] = i % 2 ? 0x80 : 0x7f;  // -128 and 127
    }
    if (t == WeightType::kQ6_K) {
      std::memset(p, 0, 192);          // q = 0: q - 32 = -32
      std::memset(p + 192, 0x80, 16);  // scales -128
    }
  }
  for (int off : HalfFieldOffsets(t)) PutHalf(p + off, RandomScale(c, rng));
}

// A row of n elements of type t, block cases mixed (about half realistic).
inline std::vector<uint8_t> RandomRow(WeightType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(size_t(n / BlockElements(t) * BlockBytes(t)));
  if (t == WeightType::kF16 || t == WeightType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      if (t == WeightType::kF16) {  // any finite half: subnormals up to 65504
        h = uint16_t(rng());
        if ((h & 0x7c00) == 0x7c00) h &= uint16_t(~0x4000);
      } else {  // bf16 of 2^-20 .. 2^20 (wider would overflow fp32 sums against 1e4 activations)
        const float v = std::normal_distribution<float>()(rng) * std::ldexp(1.0f, int(rng() % 41) - 20);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        h = uint16_t(bits >> 16);
      }
      std::memcpy(row.data() + 2 * i, &h, 2);
    }
    return row;
  }
  const int64_t bytes = BlockBytes(t);
  for (size_t off = 0; off < row.size(); off += size_t(bytes)) {
    const uint32_t pick = rng() % 10;
    const BlockCase c = pick < 5 ? BlockCase::kRealistic : static_cast<BlockCase>(pick - 4);
    FillBlock(t, c, rng, row.data() + off);
  }
  return row;
}

// n_rows such rows, one after another (a weight matrix).
inline std::vector<uint8_t> RandomRows(WeightType t, int64_t n_rows, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> data;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto row = RandomRow(t, n, rng);
    data.insert(data.end(), row.begin(), row.end());
  }
  return data;
}

// Activations: normal values whose scale changes every 32 elements (1e-3 .. 1e3), with all-zero
// spans and single spikes.
inline std::vector<float> RandomActivations(int64_t n, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  for (int64_t b = 0; b < n; b += 32) {
    const uint32_t kind = rng() % 8;
    const float scale = kind == 0 ? 0.0f : std::pow(10.0f, exponent(rng));
    for (int64_t i = b; i < b + 32 && i < n; ++i) x[size_t(i)] = normal(rng) * scale;
    if (kind == 1) x[size_t(b + rng() % 32)] = 1e4f;
  }
  return x;
}

}  // namespace impress::quant::test
