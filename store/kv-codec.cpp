#include "store/kv-codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace impress::store {

const char* KVEncodingName(KVEncoding e) { return e == KVEncoding::kInt8 ? "int8" : "fp16"; }

std::optional<KVEncoding> ParseKVEncoding(const std::string& name) {
  if (name == "fp16" || name == "f16") return KVEncoding::kF16;
  if (name == "int8" || name == "i8") return KVEncoding::kInt8;
  return std::nullopt;
}

uint32_t RecordBytes(KVEncoding e, int n_heads, int head_dim) {
  if (e == KVEncoding::kInt8) return uint32_t(n_heads) * (uint32_t(head_dim) + 2);
  return uint32_t(n_heads) * uint32_t(head_dim) * 2;
}

namespace {

// The smallest fp16 scale s with absmax / s <= 127, so every quantized value fits int8.
f16_t ScaleFor(float absmax) {
  if (!(absmax > 0.0f)) return 0;  // zero (or NaN) head: all q = 0
  const float want = absmax / 127.0f;
  f16_t s = Fp32ToFp16(want);
  // Rounded down (or to zero): step up one fp16 ulp. Positive fp16 bits order like the values.
  while (Fp16ToFp32(s) < want && s < 0x7bff) ++s;
  return s;
}

void EncodeInt8(const f16_t* row, int n_heads, int head_dim, const int* heads, uint8_t* rec) {
  int8_t* q = reinterpret_cast<int8_t*>(rec + 2 * size_t(n_heads));
  float x[512];
  for (int j = 0; j < n_heads; ++j) {
    const f16_t* h = row + size_t(heads ? heads[j] : j) * size_t(head_dim);
    float amax = 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      for (int i = 0; i < m; ++i) amax = std::max(amax, std::fabs(x[i]));
    }
    const f16_t s16 = ScaleFor(amax);
    std::memcpy(rec + 2 * size_t(j), &s16, 2);  // rec is only byte-aligned: copy, don't alias
    const float s = Fp16ToFp32(s16);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      for (int i = 0; i < m; ++i) {
        // x * inv may land a hair above 127 when s was rounded up exactly to absmax / 127.
        const float r = std::nearbyint(x[i] * inv);
        q[size_t(j) * size_t(head_dim) + size_t(d + i)] = int8_t(std::clamp(r, -127.0f, 127.0f));
      }
    }
  }
}

}  // namespace

void EncodeRecords(KVEncoding e, const f16_t* src, size_t src_stride, size_t n_tokens, int n_heads, int head_dim,
                   const int* heads, uint8_t* dst) {
  const size_t rec = RecordBytes(e, n_heads, head_dim);
  const size_t head_bytes = size_t(head_dim) * 2;
  for (size_t t = 0; t < n_tokens; ++t) {
    const f16_t* row = src + t * src_stride;
    uint8_t* out = dst + t * rec;
    if (e == KVEncoding::kInt8) {
      EncodeInt8(row, n_heads, head_dim, heads, out);
    } else if (!heads) {
      std::memcpy(out, row, rec);
    } else {
      for (int j = 0; j < n_heads; ++j)
        std::memcpy(out + size_t(j) * head_bytes, row + size_t(heads[j]) * size_t(head_dim), head_bytes);
    }
  }
}

void DecodeRecord(KVEncoding e, const uint8_t* rec, int n_heads, int head_dim, f16_t* dst) {
  if (e != KVEncoding::kInt8) {
    std::memcpy(dst, rec, size_t(n_heads) * size_t(head_dim) * 2);
    return;
  }
  const int8_t* q = reinterpret_cast<const int8_t*>(rec + 2 * size_t(n_heads));
  float x[512];
  for (int j = 0; j < n_heads; ++j) {
    f16_t s16;
    std::memcpy(&s16, rec + 2 * size_t(j), 2);
    const float s = Fp16ToFp32(s16);
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      const int8_t* qh = q + size_t(j) * size_t(head_dim) + size_t(d);
      // q * s may pass the largest half (65504) when s was rounded up; the input did not.
      for (int i = 0; i < m; ++i) x[i] = std::clamp(float(qh[i]) * s, -65504.0f, 65504.0f);
      Fp32ToFp16Row(x, dst + size_t(j) * size_t(head_dim) + size_t(d), size_t(m));
    }
  }
}

}  // namespace impress::store
