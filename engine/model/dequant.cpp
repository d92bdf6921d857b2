#include "engine/model/dequant.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/fp16.h"
#include "engine/quant/quant-kernels.h"

// Bit-exact agreement with the reference (numpy: every multiply and add rounded on its own).
// Contraction into FMA cannot change a result here: each product that feeds an add is exact in
// fp32 (an fp16 scale, 11 significant bits, times integers of at most 6 + 4 bits), so fma(a, b, c)
// and a * b + c round identically. The test checks it bit for bit.

namespace impress {
namespace {

constexpr int kQK = 32;     // block size of Q4_0, Q4_1, Q8_0
constexpr int kQK_K = 256;  // block size of the K-quants

inline float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// F32: the bytes are the values.
void RowF32(const uint8_t* src, float* dst, uint64_t n_blocks) { std::memcpy(dst, src, n_blocks * 4); }

// F16: IEEE half, converted exactly.
void RowF16(const uint8_t* src, float* dst, uint64_t n) {
  constexpr uint64_t kChunk = 1024;
  uint16_t tmp[kChunk];
  for (uint64_t i = 0; i < n; i += kChunk) {
    const uint64_t m = n - i < kChunk ? n - i : kChunk;
    std::memcpy(tmp, src + i * 2, m * 2);
    Fp16ToFp32Row(tmp, dst + i, m);
  }
}

// BF16: the high half of an fp32.
void RowBF16(const uint8_t* src, float* dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, src + i * 2, 2);
    dst[i] = Bf16ToFp32(b);
  }
}

// Q8_0: { f16 d; int8 qs[32]; }  y = qs * d
void RowQ8_0(const uint8_t* src, float* dst, uint64_t n_blocks) {
  for (uint64_t ib = 0; ib < n_blocks; ++ib, src += 34, dst += kQK) {
    const float d = LoadHalf(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK; ++j) dst[j] = float(qs[j]) * d;
  }
}

// Q4_0: { f16 d; u8 qs[16]; }  low nibbles are elements 0..15, high nibbles 16..31; y = (q - 8) * d
void RowQ4_0(const uint8_t* src, float* dst, uint64_t n_blocks) {
  for (uint64_t ib = 0; ib < n_blocks; ++ib, src += 18, dst += kQK) {
    const float d = LoadHalf(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = float(int(qs[j] & 0x0f) - 8) * d;
      dst[j + kQK / 2] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1: { f16 d; f16 m; u8 qs[16]; }  y = q * d + m
void RowQ4_1(const uint8_t* src, float* dst, uint64_t n_blocks) {
  for (uint64_t ib = 0; ib < n_blocks; ++ib, src += 20, dst += kQK) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = float(qs[j] & 0x0f) * d + m;
      dst[j + kQK / 2] = float(qs[j] >> 4) * d + m;
    }
  }
}

// Q4_K scales: 8 six-bit scales and 8 six-bit mins packed in 12 bytes (ggml get_scale_min_k4).
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K: { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } 256 elements in 8 sub-blocks of 32;
// y = (d * sc) * q - (dmin * m)
void RowQ4_K(const uint8_t* src, float* dst, uint64_t n_blocks) {
  for (uint64_t ib = 0; ib < n_blocks; ++ib, src += 144) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64) {
      uint8_t sc, m;
      ScaleMinK4(is + 0, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      ScaleMinK4(is + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// Q6_K: { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } 256 elements, 6-bit q - 32;
// y = (d * scale) * q
void RowQ6_K(const uint8_t* src, float* dst, uint64_t n_blocks) {
  for (uint64_t ib = 0; ib < n_blocks; ++ib, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadHalf(src + 208);
    for (int n = 0; n < kQK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l + 0] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = (d * float(sc[is + 0])) * float(q1);
        dst[l + 32] = (d * float(sc[is + 2])) * float(q2);
        dst[l + 64] = (d * float(sc[is + 4])) * float(q3);
        dst[l + 96] = (d * float(sc[is + 6])) * float(q4);
      }
      dst += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

using RowFn = void (*)(const uint8_t* src, float* dst, uint64_t n_blocks);

// Q5_0, Q5_1, Q5_K: the quantized kernels' block decoders (bit-exact against gguf-py too).
template <quant::WeightType kType, int kBlock>
void RowKernelDecode(const uint8_t* src, float* dst, uint64_t n_blocks) {
  quant::DequantizeRow(kType, src, dst, int64_t(n_blocks) * kBlock);
}

// The converter of a type, in units of its blocks; nullptr when unsupported.
RowFn RowFnFor(uint32_t type_id) {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32: return RowF32;
    case GgmlType::kF16: return RowF16;
    case GgmlType::kBF16: return RowBF16;
    case GgmlType::kQ8_0: return RowQ8_0;
    case GgmlType::kQ4_0: return RowQ4_0;
    case GgmlType::kQ4_1: return RowQ4_1;
    case GgmlType::kQ4_K: return RowQ4_K;
    case GgmlType::kQ6_K: return RowQ6_K;
    case GgmlType::kQ5_0: return RowKernelDecode<quant::WeightType::kQ5_0, 32>;
    case GgmlType::kQ5_1: return RowKernelDecode<quant::WeightType::kQ5_1, 32>;
    case GgmlType::kQ5_K: return RowKernelDecode<quant::WeightType::kQ5_K, 256>;
    default: return nullptr;
  }
}

}  // namespace

bool CanDequantize(uint32_t type_id) { return RowFnFor(type_id) != nullptr; }

const char* SupportedDequantTypes() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"; }

Result<uint64_t> GgmlByteSize(uint32_t type_id, uint64_t n_elements) {
  const GgmlTypeTraits* t = GgmlTypeInfo(type_id);
  if (!t) return Status::Unsupported("unknown GGML type id " + std::to_string(type_id));
  if (n_elements % t->block_size != 0) {
    return Status::InvalidArgument(std::to_string(n_elements) + " elements are not a whole number of " + t->name +
                                   " blocks of " + std::to_string(t->block_size));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n_elements / t->block_size, uint64_t(t->type_size), &bytes)) {
    return Status::InvalidArgument(std::to_string(n_elements) + " elements of " + t->name +
                                   " overflow 64 bits of bytes");
  }
  return bytes;
}

Status Dequantize(uint32_t type_id, const uint8_t* src, uint64_t src_bytes, float* dst, uint64_t n_elements,
                  std::string_view what, int n_threads) {
  const RowFn fn = RowFnFor(type_id);
  if (!fn) {
    return Status::Unsupported("tensor '" + std::string(what) + "' has type " + GgmlTypeName(type_id) +
                               ", which this build cannot convert (supported: " + SupportedDequantTypes() + ")");
  }
  auto size = GgmlByteSize(type_id, n_elements);
  if (!size.ok()) return size.status().WithContext("tensor '" + std::string(what) + "'");
  if (*size > src_bytes) {
    return Status::Corruption("tensor '" + std::string(what) + "': " + std::to_string(n_elements) + " elements of " +
                              GgmlTypeName(type_id) + " need " + std::to_string(*size) + " bytes, only " +
                              std::to_string(src_bytes) + " given");
  }
  if (n_elements == 0) return Status::Ok();  // an empty tensor (a zero dim): nothing to convert, dst may be null
  const GgmlTypeTraits* t = GgmlTypeInfo(type_id);
  const uint64_t n_blocks = n_elements / t->block_size;
  // F16/BF16/F32 functions take element counts; block size 1 makes blocks == elements.
  constexpr uint64_t kMinPerThread = uint64_t(1) << 18;  // elements; below this a thread costs more than it saves
  uint64_t n_parts = n_threads > 1 ? uint64_t(n_threads) : 1;
  if (n_elements / kMinPerThread < n_parts) n_parts = n_elements / kMinPerThread > 0 ? n_elements / kMinPerThread : 1;
  if (n_parts <= 1) {
    fn(src, dst, n_blocks);
    return Status::Ok();
  }
  std::vector<std::thread> workers;
  workers.reserve(n_parts - 1);
  auto part = [&](uint64_t ip) {
    const uint64_t b0 = n_blocks * ip / n_parts, b1 = n_blocks * (ip + 1) / n_parts;
    fn(src + b0 * t->type_size, dst + b0 * t->block_size, b1 - b0);
  };
  for (uint64_t ip = 1; ip < n_parts; ++ip) workers.emplace_back(part, ip);
  part(0);
  for (auto& w : workers) w.join();
  return Status::Ok();
}

Result<std::vector<float>> TensorValues(const Tensor& t) {
  if (!t.stored()) return t.data;
  if (!quant::IsSupportedWeightType(t.ggml_type))
    return Status::Unsupported("tensor of type " + GgmlTypeName(t.ggml_type) +
                               " cannot be decoded (supported: " + quant::SupportedWeightTypes() + ")");
  const auto type = static_cast<quant::WeightType>(t.ggml_type);
  const int64_t cols = t.cols(), rows = t.numel() / std::max<int64_t>(cols, 1);
  const quant::WeightMatrix w{type, t.stored_bytes(), rows, cols};
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) quant::DequantizeRow(type, w.data + r * w.RowBytes(), out.data() + r * cols, cols);
  return out;
}

uint64_t TensorBytes(const Tensor& t) {
  if (!t.stored()) return uint64_t(t.data.size()) * sizeof(float);
  const GgmlTypeTraits* info = GgmlTypeInfo(t.ggml_type);
  if (!info) return 0;
  return uint64_t(t.numel()) / info->block_size * info->type_size;
}

Result<Model> DequantizedCopy(const Model& model) {
  Model m = model;
  auto expand = [](Tensor& t) -> Status {
    if (!t.stored()) return Status::Ok();
    IMPRESS_ASSIGN_OR_RETURN(t.data, TensorValues(t));
    t.view = nullptr;
    t.owned_bytes.clear();
    t.ggml_type = 0;
    return Status::Ok();
  };
  ModelWeights& w = m.weights;
  for (Tensor* t : {&w.tok_embd, &w.pos_embd, &w.project_in, &w.project_out, &w.output})
    IMPRESS_RETURN_IF_ERROR(expand(*t));
  for (LayerWeights& l : w.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) IMPRESS_RETURN_IF_ERROR(expand(*t));
  m.storage.reset();
  m.mapped_files.clear();
  return m;
}

}  // namespace impress
