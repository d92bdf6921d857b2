// The scalar reference of engine/quant/key-scores.h and the choice of path.
#include "engine/quant/key-scores.h"

#include <algorithm>
#include <cmath>

namespace impress::quant {

namespace {

// x * inv clamped to [-127, 127], then rounded to nearest even: the order the SIMD paths use.
int CodeOf(float x, float inv) {
  const float y = std::min(std::max(x * inv, -127.0f), 127.0f);
  return int(std::nearbyint(y));
}

}  // namespace

bool HasFastKeyScores(KernelPath path) { return path == KernelPath::kAvx512; }

void KeyChannelAbsMax(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, float* amax) {
  if (HasFastKeyScores(path)) return KeyChannelAbsMaxAvx512(k, stride, n, hd, amax);
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < hd; ++c) amax[c] = std::max(amax[c], std::fabs(Fp16ToFp32(k[int64_t(j) * stride + c])));
}

void KeyChannelScales(const float* amax, int hd, float* scale, float* inv) {
  for (int c = 0; c < hd; ++c) {
    const bool live = amax[c] > 0.0f;
    scale[c] = live ? amax[c] / 127.0f : 0.0f;
    inv[c] = live ? 127.0f / amax[c] : 0.0f;
  }
}

void QuantizeQueriesInt8(const float* q, int rows, int hd, const float* channel_scale, uint8_t* q_u8, float* q_scale) {
  float x[512];
  for (int r = 0; r < rows; ++r) {
    float amax = 0;
    for (int c = 0; c < hd; ++c) {
      x[c] = q[int64_t(r) * hd + c] * channel_scale[c];
      amax = std::max(amax, std::fabs(x[c]));
    }
    const bool live = amax > 0.0f;
    q_scale[r] = live ? amax / 127.0f : 0.0f;
    const float inv = live ? 127.0f / amax : 0.0f;
    uint8_t* out = q_u8 + int64_t(r) * hd;
    for (int c = 0; c < hd; ++c) out[c] = uint8_t(CodeOf(x[c], inv) + 128);
  }
}

void PackKeysInt8(KernelPath path, const f16_t* k, int64_t stride, int n, int hd, const float* channel_inv,
                  int8_t* codes, int n_pad, int col0, int32_t* sum) {
  if (HasFastKeyScores(path)) return PackKeysInt8Avx512(k, stride, n, hd, channel_inv, codes, n_pad, col0, sum);
  for (int j = 0; j < n; ++j) {
    const f16_t* row = k + int64_t(j) * stride;
    int32_t total = 0;
    for (int c = 0; c < hd; ++c) {
      const int code = CodeOf(Fp16ToFp32(row[c]), channel_inv[c]);
      codes[(int64_t(c / 4) * n_pad + col0 + j) * 4 + c % 4] = int8_t(code);
      total += code;
    }
    sum[j] = total;
  }
}

void KeyScoresInt8(KernelPath path, const uint8_t* q_u8, const float* q_scale, int rows, int hd, const int8_t* codes,
                   int n_pad, const int32_t* k_sum, float* s, int ld) {
  if (HasFastKeyScores(path)) return KeyScoresInt8Avx512(q_u8, q_scale, rows, hd, codes, n_pad, k_sum, s, ld);
  // The signed sum directly: k_sum is the unsigned form's correction (code + 128 times k).
  for (int r = 0; r < rows; ++r) {
    const uint8_t* q = q_u8 + int64_t(r) * hd;
    for (int j = 0; j < n_pad; ++j) {
      int32_t dot = 0;
      for (int c = 0; c < hd; ++c) dot += (int32_t(q[c]) - 128) * codes[(int64_t(c / 4) * n_pad + j) * 4 + c % 4];
      s[int64_t(r) * ld + j] = float(dot) * q_scale[r];
    }
  }
}

}  // namespace impress::quant
