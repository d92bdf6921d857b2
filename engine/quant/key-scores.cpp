// The scalar reference of engine/quant/key-scores.h and the choice of path.
#include "engine/quant/key-scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace impress::quant {

namespace {

// Scale and inverse for a row's absmax; a zero row gets scale 0 and all-zero codes.
struct Int8Scale {
  float scale = 0, inv = 0;
};

Int8Scale ScaleFor(float amax) {
  if (!(amax > 0.0f)) return {};
  return {amax / 127.0f, 127.0f / amax};
}

// x * inv clamped to [-127, 127], then rounded to nearest even: the order the SIMD paths use.
int CodeOf(float x, float inv) {
  const float y = std::min(std::max(x * inv, -127.0f), 127.0f);
  return int(std::nearbyint(y));
}

}  // namespace

bool HasFastKeyScores(KernelPath path) { return path == KernelPath::kAvx512; }

void QuantizeQueriesInt8(const float* q, int rows, int hd, uint8_t* q_u8, float* q_scale) {
  for (int r = 0; r < rows; ++r) {
    const float* x = q + int64_t(r) * hd;
    float amax = 0;
    for (int c = 0; c < hd; ++c) amax = std::max(amax, std::fabs(x[c]));
    const Int8Scale s = ScaleFor(amax);
    q_scale[r] = s.scale;
    uint8_t* out = q_u8 + int64_t(r) * hd;
    for (int c = 0; c < hd; ++c) out[c] = uint8_t(s.inv > 0 ? CodeOf(x[c], s.inv) + 128 : 128);
  }
}

void PackKeysInt8(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, int8_t* codes, int n_pad, int col0,
                  float* scale, int32_t* sum) {
  if (HasFastKeyScores(path)) return PackKeysInt8Avx512(k, stride, n, hd, codes, n_pad, col0, scale, sum);
  for (int j = 0; j < n; ++j) {
    const f16_t* row = k + int64_t(j) * stride;
    float amax = 0;
    for (int c = 0; c < hd; ++c) amax = std::max(amax, std::fabs(Fp16ToFp32(row[c])));
    const Int8Scale s = ScaleFor(amax);
    scale[j] = s.scale;
    int32_t total = 0;
    for (int c = 0; c < hd; ++c) {
      const int code = s.inv > 0 ? CodeOf(Fp16ToFp32(row[c]), s.inv) : 0;
      codes[(int64_t(c / 4) * n_pad + col0 + j) * 4 + c % 4] = int8_t(code);
      total += code;
    }
    sum[j] = total;
  }
}

void KeyScoresInt8(KernelPath path, const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes,
                   int n_pad, const float* k_scale, const int32_t* k_sum, float* s, int ld) {
  if (HasFastKeyScores(path)) return KeyScoresInt8Avx512(q_u8, q_scale, rows, hd, codes, n_pad, k_scale, k_sum, s, ld);
  // The signed sum directly: k_sum is the unsigned form's correction (code + 128 times k).
  for (int r = 0; r < rows; ++r) {
    const uint8_t* q = q_u8 + int64_t(r) * hd;
    for (int j = 0; j < n_pad; ++j) {
      int32_t dot = 0;
      for (int c = 0; c < hd; ++c) dot += (int32_t(q[c]) - 128) * codes[(int64_t(c / 4) * n_pad + j) * 4 + c % 4];
      s[int64_t(r) * ld + j] = float(dot) * (q_scale[r] * k_scale[j]);
    }
  }
}

}  // namespace impress::quant
