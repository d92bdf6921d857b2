// Block decoding (DequantizeRow) and activation quantization (QuantizeRow32/256): the scalar
// definitions every kernel is checked against.
//
// Decoding rounds each multiply and add on its own, in the order the format's reference
// (numpy in the gguf package) uses, so results are bit for bit the same; contraction into FMA
// cannot change them: every product feeding an add is exact in fp32 (an fp16 scale, 11
// significant bits, times an integer of at most 6 + 6 bits).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/quant-kernels.h"

namespace impress::quant {
namespace {

void DecodeF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    f16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = Fp16ToFp32(h);
  }
}

void DecodeBF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    bf16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    dst[i] = Bf16ToFp32(b);
  }
}

// The 4-bit value of element i (0..31) of a Q4_0/Q4_1/Q5_0/Q5_1 block.
inline int Nibble32(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

void DecodeQ8_0(const BlockQ8_0* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib, y += kQK32) {
    const float d = Fp16ToFp32(b[ib].d);
    for (int i = 0; i < kQK32; ++i) y[i] = float(b[ib].qs[i]) * d;
  }
}

void DecodeQ4_0(const BlockQ4_0* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib, y += kQK32) {
    const float d = Fp16ToFp32(b[ib].d);
    for (int i = 0; i < kQK32; ++i) y[i] = float(Nibble32(b[ib].qs, i) - 8) * d;
  }
}

void DecodeQ4_1(const BlockQ4_1* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib, y += kQK32) {
    const float d = Fp16ToFp32(b[ib].d), m = Fp16ToFp32(b[ib].m);
    for (int i = 0; i < kQK32; ++i) y[i] = float(Nibble32(b[ib].qs, i)) * d + m;
  }
}

void DecodeQ5_0(const BlockQ5_0* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib, y += kQK32) {
    const float d = Fp16ToFp32(b[ib].d);
    const uint32_t qh = LoadQh32(b[ib].qh);
    for (int i = 0; i < kQK32; ++i) {
      const int q = Nibble32(b[ib].qs, i) | int((qh >> i) & 1) << 4;
      y[i] = d * float(q - 16);
    }
  }
}

void DecodeQ5_1(const BlockQ5_1* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib, y += kQK32) {
    const float d = Fp16ToFp32(b[ib].d), m = Fp16ToFp32(b[ib].m);
    const uint32_t qh = LoadQh32(b[ib].qh);
    for (int i = 0; i < kQK32; ++i) {
      const int q = Nibble32(b[ib].qs, i) | int((qh >> i) & 1) << 4;
      y[i] = d * float(q) + m;
    }
  }
}

// Q4_K and Q5_K share their scales and nibble layout; qh is null for Q4_K.
void DecodeK4or5(f16_t d16, f16_t dmin16, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = Fp16ToFp32(d16), dmin = Fp16ToFp32(dmin16);
  for (int j = 0; j < 8; ++j, y += 32) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, scales, &sc, &m);
    const float dj = d * float(sc), mj = dmin * float(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 15;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      y[l] = dj * float(v) - mj;
    }
  }
}

void DecodeQ6_K(const BlockQ6_K* b, float* y, int64_t n_blocks) {
  for (int64_t ib = 0; ib < n_blocks; ++ib) {
    const float d = Fp16ToFp32(b[ib].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b[ib].ql + 64 * h;
      const uint8_t* qh = b[ib].qh + 32 * h;
      const int8_t* sc = b[ib].scales + 8 * h;
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          const int lo = (ql[l + 32 * (c & 1)] >> (c >= 2 ? 4 : 0)) & 15;
          const int q = lo | ((qh[l] >> (2 * c)) & 3) << 4;
          const int e = 32 * c + l;
          y[e] = (d * float(sc[e / 16])) * float(q - 32);
        }
      }
    }
  }
}

// round-to-nearest-even of x * iscale, clamped to the symmetric int8 range.
inline int8_t QuantizeOne(float x, float iscale) {
  const float q = std::nearbyint(x * iscale);
  return int8_t(std::clamp(q, -127.0f, 127.0f));
}

// Quantizes `len` values with one scale; returns d.
float QuantizeSpan(const float* x, int len, int8_t* qs) {
  float amax = 0.0f;
  for (int i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0.0f) {
    std::memset(qs, 0, size_t(len));
    return 0.0f;
  }
  const float iscale = 127.0f / amax;
  for (int i = 0; i < len; ++i) qs[i] = QuantizeOne(x[i], iscale);
  return amax / 127.0f;
}

}  // namespace

void DequantizeRow(WeightType type, const uint8_t* src, float* dst, int64_t n) {
  const int64_t nb = n / BlockElements(type);
  switch (type) {
    case WeightType::kF16: return DecodeF16(src, dst, n);
    case WeightType::kBF16: return DecodeBF16(src, dst, n);
    case WeightType::kQ8_0: return DecodeQ8_0(reinterpret_cast<const BlockQ8_0*>(src), dst, nb);
    case WeightType::kQ4_0: return DecodeQ4_0(reinterpret_cast<const BlockQ4_0*>(src), dst, nb);
    case WeightType::kQ4_1: return DecodeQ4_1(reinterpret_cast<const BlockQ4_1*>(src), dst, nb);
    case WeightType::kQ5_0: return DecodeQ5_0(reinterpret_cast<const BlockQ5_0*>(src), dst, nb);
    case WeightType::kQ5_1: return DecodeQ5_1(reinterpret_cast<const BlockQ5_1*>(src), dst, nb);
    case WeightType::kQ4_K:
      for (const auto* b = reinterpret_cast<const BlockQ4_K*>(src); b != reinterpret_cast<const BlockQ4_K*>(src) + nb;
           ++b, dst += kQK256) {
        DecodeK4or5(b->d, b->dmin, b->scales, nullptr, b->qs, dst);
      }
      return;
    case WeightType::kQ5_K:
      for (const auto* b = reinterpret_cast<const BlockQ5_K*>(src); b != reinterpret_cast<const BlockQ5_K*>(src) + nb;
           ++b, dst += kQK256) {
        DecodeK4or5(b->d, b->dmin, b->scales, b->qh, b->qs, dst);
      }
      return;
    case WeightType::kQ6_K: return DecodeQ6_K(reinterpret_cast<const BlockQ6_K*>(src), dst, nb);
  }
}

void QuantizeRow32(const float* x, int64_t n, ActBlock32* out) {
  for (int64_t ib = 0; ib < n / kQK32; ++ib, x += kQK32) {
    ActBlock32& b = out[ib];
    b.d = QuantizeSpan(x, kQK32, b.qs);
    b.sum = 0;
    for (int i = 0; i < kQK32; ++i) b.sum += b.qs[i];
  }
}

void ResidualRow32(const float* x, int64_t n, const ActBlock32* q, float* r) {
  for (int64_t ib = 0; ib < n / kQK32; ++ib) {
    const ActBlock32& b = q[ib];
    for (int i = 0; i < kQK32; ++i) r[ib * kQK32 + i] = std::fma(-b.d, float(b.qs[i]), x[ib * kQK32 + i]);
  }
}

void QuantizeRow256(const float* x, int64_t n, ActBlock256* out) {
  for (int64_t ib = 0; ib < n / kQK256; ++ib, x += kQK256) {
    ActBlock256& b = out[ib];
    b.d = QuantizeSpan(x, kQK256, b.qs);
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b.qs[16 * k + i];
      b.bsums[k] = int16_t(s);
    }
  }
}

}  // namespace impress::quant
