#include "engine/model/quantize-blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/fp16.h"
#include "engine/model/dequant.h"
#include "engine/quant/block-formats.h"

namespace impress {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

constexpr float kMaxHalf = 65504.0f;

int Round(float v) { return int(std::lrintf(v)); }

// fp16 of a non-negative or signed scale; false when it does not fit fp16.
bool Half(float v, f16_t* h, float* back) {
  if (!(std::fabs(v) <= kMaxHalf)) return false;
  *h = Fp32ToFp16(v);
  *back = Fp16ToFp32(*h);
  return true;
}

Status TooLarge(const char* type) {
  return Status::InvalidArgument(std::string("values too large for ") + type + "'s fp16 scales");
}

// The scale d (fp16-rounded) of a symmetric block q = clamp(round(x / d), lo, hi) with the least
// squared error among d = v / t for the value v of largest magnitude and a few divisors t near
// the ends of the range (the sign of t decides which end v lands on).
float FitSymmetric(const float* x, int n, int lo, int hi, bool fp16_scale) {
  float vmax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  if (vmax == 0) return 0;
  const float ends[] = {float(lo), float(lo) + 0.5f, float(lo) + 1, float(hi), float(hi) - 0.5f};
  float best_d = vmax / float(lo), best_err = INFINITY;
  for (float t : ends) {
    float d = vmax / t;
    if (fp16_scale) d = Fp16ToFp32(Fp32ToFp16(d));
    if (d == 0 || !std::isfinite(d)) continue;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(Round(x[i] / d), lo, hi);
      const float e = x[i] - d * float(q);
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = d;
    }
  }
  return best_d;
}

Status Q8_0(const float* x, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    BlockQ8_0 blk;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d;
    f16_t dh = 0;
    if (!Half(amax / 127.0f, &dh, &d)) return TooLarge("Q8_0");
    blk.d = dh;
    for (int i = 0; i < 32; ++i) blk.qs[i] = int8_t(d == 0 ? 0 : std::clamp(Round(x[i] / d), -127, 127));
    std::memcpy(out + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
  return Status::Ok();
}

// Stores a 32-value block of Q4_0/Q4_1/Q5_0/Q5_1 from its values q (4 or 5 bits each): nibbles
// of elements i and i + 16 share byte i; the fifth bits go to qh (element i at bit i).
void StoreLegacy(GgmlType type, f16_t d, f16_t m, const uint8_t* q, uint8_t* out) {
  uint8_t qs[16];
  uint32_t qh = 0;
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t((q[i] & 15) | (q[i + 16] & 15) << 4);
  for (int i = 0; i < 32; ++i) qh |= uint32_t(q[i] >> 4 & 1) << i;
  const uint8_t qh4[4] = {uint8_t(qh), uint8_t(qh >> 8), uint8_t(qh >> 16), uint8_t(qh >> 24)};
  auto put = [&](const void* p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  };
  put(&d, 2);
  if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1) put(&m, 2);
  if (type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) put(qh4, 4);
  put(qs, 16);
}

// Q4_0 (bits 4) and Q5_0 (bits 5): q in [0, 2^bits), y = d * (q - 2^(bits - 1)).
template <int kBits>
Status SymmetricLegacy(const float* x, int64_t nb, uint8_t* out) {
  constexpr int kHalfRange = 1 << (kBits - 1);
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float d = FitSymmetric(x, 32, -kHalfRange, kHalfRange - 1, false);
    f16_t dh = 0;
    if (!Half(d, &dh, &d)) return TooLarge(kBits == 4 ? "Q4_0" : "Q5_0");
    uint8_t q[32];
    for (int i = 0; i < 32; ++i)
      q[i] = uint8_t(d == 0 ? kHalfRange : std::clamp(Round(x[i] / d), -kHalfRange, kHalfRange - 1) + kHalfRange);
    StoreLegacy(kBits == 4 ? GgmlType::kQ4_0 : GgmlType::kQ5_0, dh, 0, q,
                out + b * int64_t(kBits == 4 ? sizeof(quant::BlockQ4_0) : sizeof(quant::BlockQ5_0)));
  }
  return Status::Ok();
}

// Q4_1 / Q5_1: y = d * q + m over [min, max] of the block.
template <int kBits>
Status AffineLegacy(const float* x, int64_t nb, uint8_t* out) {
  constexpr int kLevels = (1 << kBits) - 1;
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    f16_t dh, mh;
    float d, m;
    if (!Half((hi - lo) / kLevels, &dh, &d) || !Half(lo, &mh, &m)) return TooLarge(kBits == 4 ? "Q4_1" : "Q5_1");
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) q[i] = uint8_t(d == 0 ? 0 : std::clamp(Round((x[i] - m) / d), 0, kLevels));
    StoreLegacy(kBits == 4 ? GgmlType::kQ4_1 : GgmlType::kQ5_1, dh, mh, q,
                out + b * int64_t(kBits == 4 ? sizeof(quant::BlockQ4_1) : sizeof(quant::BlockQ5_1)));
  }
  return Status::Ok();
}

// The inverse of UnpackScaleMinK4 (block-formats.h): 6-bit scales and mins into 12 bytes.
void PackScaleMinK4(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t((m[j] & 63) | (m[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

// Q4_K / Q5_K: 8 sub-blocks of 32, y = (d * sc[j]) * q - dmin * m[j], q in [0, 2^bits).
// Returns the 256 q values in q[].
template <int kBits>
Status AffineK(const float* x, f16_t* d_out, f16_t* dmin_out, uint8_t* scales, uint8_t* q) {
  constexpr int kLevels = (1 << kBits) - 1;
  float scale[8], neg_min[8], max_scale = 0, max_neg_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* v = x + 32 * j;
    float lo = 0, hi = v[0];  // the offset is -dmin * m with m >= 0: the range starts at or below 0
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    scale[j] = std::max(0.0f, (hi - lo) / kLevels);
    neg_min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_neg_min = std::max(max_neg_min, neg_min[j]);
  }
  float d, dmin;
  if (!Half(max_scale / 63, d_out, &d) || !Half(max_neg_min / 63, dmin_out, &dmin)) {
    return TooLarge(kBits == 4 ? "Q4_K" : "Q5_K");
  }
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = uint8_t(d == 0 ? 0 : std::clamp(Round(scale[j] / d), 0, 63));
    // Rounded up so the sub-block's lowest value stays inside the range.
    m[j] = uint8_t(dmin == 0 ? 0 : std::clamp(int(std::ceil(neg_min[j] / dmin)), 0, 63));
    const float ds = d * float(sc[j]), off = dmin * float(m[j]);
    for (int i = 0; i < 32; ++i) {
      const int k = 32 * j + i;
      q[k] = uint8_t(ds == 0 ? 0 : std::clamp(Round((x[k] + off) / ds), 0, kLevels));
    }
  }
  PackScaleMinK4(sc, m, scales);
  return Status::Ok();
}

// Q4_K / Q5_K blocks: the low 4 bits of the q values of sub-blocks 2p and 2p+1 share the bytes
// qs[32p..32p+32); Q5_K keeps each value's fifth bit in qh (bit j: sub-block j).
template <int kBits>
Status QuantizeK(const float* x, int64_t nb, uint8_t* out) {
  using Block = std::conditional_t<kBits == 4, BlockQ4_K, BlockQ5_K>;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    Block blk;
    uint8_t q[256];
    f16_t d = 0, dmin = 0;
    IMPRESS_RETURN_IF_ERROR(AffineK<kBits>(x, &d, &dmin, blk.scales, q));
    blk.d = d;
    blk.dmin = dmin;
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < 32; ++l) blk.qs[32 * p + l] = uint8_t((q[64 * p + l] & 15) | (q[64 * p + 32 + l] & 15) << 4);
    if constexpr (kBits == 5) {
      for (int l = 0; l < 32; ++l) {
        uint8_t h = 0;
        for (int j = 0; j < 8; ++j) h = uint8_t(h | (q[32 * j + l] >> 4 & 1) << j);
        blk.qh[l] = h;
      }
    }
    std::memcpy(out + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
  return Status::Ok();
}

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales under one fp16 d; q in [0, 64), y =
// (d * sc) * (q - 32).
Status Q6_K(const float* x, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    BlockQ6_K blk;
    float sub[16], amax = 0;
    for (int j = 0; j < 16; ++j) {
      sub[j] = FitSymmetric(x + 16 * j, 16, -32, 31, false);
      amax = std::max(amax, std::fabs(sub[j]));
    }
    float d;
    f16_t dh = 0;
    if (!Half(amax / 127, &dh, &d)) return TooLarge("Q6_K");
    blk.d = dh;
    uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      const int sc = d == 0 ? 0 : std::clamp(Round(sub[j] / d), -128, 127);
      blk.scales[j] = int8_t(sc);
      const float ds = d * float(sc);
      for (int i = 0; i < 16; ++i) {
        const int k = 16 * j + i;
        q[k] = uint8_t(ds == 0 ? 32 : std::clamp(Round(x[k] / ds), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* v = q + 128 * h;
        blk.ql[64 * h + l] = uint8_t((v[l] & 15) | (v[64 + l] & 15) << 4);
        blk.ql[64 * h + 32 + l] = uint8_t((v[32 + l] & 15) | (v[96 + l] & 15) << 4);
        blk.qh[32 * h + l] =
            uint8_t((v[l] >> 4) | (v[32 + l] >> 4) << 2 | (v[64 + l] >> 4) << 4 | (v[96 + l] >> 4) << 6);
      }
    }
    std::memcpy(out + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
  return Status::Ok();
}

}  // namespace

bool CanQuantize(uint32_t type_id) {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

Status QuantizeRow(uint32_t type_id, const float* x, int64_t n, uint8_t* out) {
  if (!CanQuantize(type_id)) return Status::Unsupported("cannot quantize to " + GgmlTypeName(type_id));
  const GgmlTypeTraits* tr = GgmlTypeInfo(type_id);
  if (n < 0 || n % int64_t(tr->block_size) != 0) {
    return Status::InvalidArgument(std::to_string(n) + " values are not whole " + tr->name + " blocks of " +
                                   std::to_string(tr->block_size));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return Status::InvalidArgument("non-finite value at index " + std::to_string(i));
  }
  const int64_t nb = n / int64_t(tr->block_size);
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32: std::memcpy(out, x, size_t(n) * 4); return Status::Ok();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > kMaxHalf) return TooLarge("F16");
        const f16_t h = Fp32ToFp16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::Ok();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, x + i, 4);
        const uint16_t h = uint16_t((bits + 0x7fff + (bits >> 16 & 1)) >> 16);  // nearest even
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::Ok();
    case GgmlType::kQ8_0: return Q8_0(x, nb, out);
    case GgmlType::kQ4_0: return SymmetricLegacy<4>(x, nb, out);
    case GgmlType::kQ5_0: return SymmetricLegacy<5>(x, nb, out);
    case GgmlType::kQ4_1: return AffineLegacy<4>(x, nb, out);
    case GgmlType::kQ5_1: return AffineLegacy<5>(x, nb, out);
    case GgmlType::kQ4_K: return QuantizeK<4>(x, nb, out);
    case GgmlType::kQ5_K: return QuantizeK<5>(x, nb, out);
    case GgmlType::kQ6_K: return Q6_K(x, nb, out);
    default: return Status::Unsupported("cannot quantize to " + GgmlTypeName(type_id));
  }
}

}  // namespace impress
