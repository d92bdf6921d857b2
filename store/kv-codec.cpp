#include "store/kv-codec.h"

#include "base/kv-codes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace impress::store {

const char* KVEncodingName(KVEncoding e) {
  switch (e) {
    case KVEncoding::kInt8: return "int8";
    case KVEncoding::kInt4: return "int4";
    case KVEncoding::kF16: break;
  }
  return "fp16";
}

std::optional<KVEncoding> ParseKVEncoding(const std::string& name) {
  if (name == "fp16" || name == "f16") return KVEncoding::kF16;
  if (name == "int8" || name == "i8") return KVEncoding::kInt8;
  if (name == "int4" || name == "i4") return KVEncoding::kInt4;
  return std::nullopt;
}

uint32_t RecordBytes(KVEncoding e, int n_heads, int head_dim) {
  if (e != KVEncoding::kF16) return uint32_t(CodedRecordBytes(CodeBits(e), n_heads, head_dim));
  return uint32_t(n_heads) * uint32_t(head_dim) * 2;
}

namespace {

// The largest code of an encoding: q in [-QMax, QMax].
float QMax(KVEncoding e) { return e == KVEncoding::kInt4 ? 7.0f : 127.0f; }

// The smallest fp16 scale s with absmax / s <= qmax, so every quantized value fits its code.
f16_t ScaleFor(float absmax, float qmax) {
  if (!(absmax > 0.0f)) return 0;  // zero (or NaN) head: all q = 0
  const float want = absmax / qmax;
  f16_t s = Fp32ToFp16(want);
  // Rounded down (or to zero): step up one fp16 ulp. Positive fp16 bits order like the values.
  while (Fp16ToFp32(s) < want && s < 0x7bff) ++s;
  return s;
}

// int8: one byte per value. int4: two values per byte, the even one in the low nibble, each
// stored as q + 8 (so 0 never occurs but for padding). Codes q[0, m) are elements d.. of the
// head; d is a multiple of 512, so a byte never holds two runs' codes.
void PutCodes(KVEncoding e, const int8_t* q, int m, int d, uint8_t* codes) {
  if (e == KVEncoding::kInt8) {
    std::memcpy(codes + d, q, size_t(m));
    return;
  }
  uint8_t* b = codes + d / 2;
  for (int i = 0; i < m / 2; ++i) b[i] = uint8_t((q[2 * i] + 8) | ((q[2 * i + 1] + 8) << 4));
  if (m % 2) b[m / 2] = uint8_t(q[m - 1] + 8);
}

void EncodeQuantized(KVEncoding e, const f16_t* row, int n_heads, int head_dim, const int* heads, uint8_t* rec) {
  const float qmax = QMax(e);
  uint8_t* codes = rec + 2 * size_t(n_heads);
  const size_t head_code_bytes = HeadCodeBytes(CodeBits(e), head_dim);
  float x[512];
  int8_t q[512];
  for (int j = 0; j < n_heads; ++j) {
    const f16_t* h = row + size_t(heads ? heads[j] : j) * size_t(head_dim);
    uint8_t* hc = codes + size_t(j) * head_code_bytes;
    float amax = 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      for (int i = 0; i < m; ++i) amax = std::max(amax, std::fabs(x[i]));
    }
    const f16_t s16 = ScaleFor(amax, qmax);
    std::memcpy(rec + 2 * size_t(j), &s16, 2);  // rec is only byte-aligned: copy, don't alias
    const float s = Fp16ToFp32(s16);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int d = 0; d < head_dim; d += 512) {
      const int m = std::min(512, head_dim - d);
      Fp16ToFp32Row(h + d, x, size_t(m));
      // x * inv may land a hair above qmax when s was rounded up exactly to absmax / qmax.
      for (int i = 0; i < m; ++i) q[i] = int8_t(std::clamp(std::nearbyint(x[i] * inv), -qmax, qmax));
      PutCodes(e, q, m, d, hc);
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
    if (e != KVEncoding::kF16) {
      EncodeQuantized(e, row, n_heads, head_dim, heads, out);
    } else if (!heads) {
      std::memcpy(out, row, rec);
    } else {
      for (int j = 0; j < n_heads; ++j)
        std::memcpy(out + size_t(j) * head_bytes, row + size_t(heads[j]) * size_t(head_dim), head_bytes);
    }
  }
}

void DecodeRecord(KVEncoding e, const uint8_t* rec, int n_heads, int head_dim, f16_t* dst) {
  if (e == KVEncoding::kF16) {
    std::memcpy(dst, rec, size_t(n_heads) * size_t(head_dim) * 2);
    return;
  }
  const int bits = CodeBits(e);
  for (int j = 0; j < n_heads; ++j)
    DecodeRecordHead(bits, rec, n_heads, head_dim, j, dst + size_t(j) * size_t(head_dim));
}

}  // namespace impress::store
