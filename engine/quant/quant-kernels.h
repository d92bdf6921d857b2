// Quantized CPU kernels that compute on GGUF weight blocks in place: block decoding, activation
// quantization, weight-row dot products and GEMV, for F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K and Q6_K.
//
// A decode step quantizes its fp32 activation row once into int8 blocks (ActivationRow) and every
// weight row is then multiplied with it in integer SIMD; F16/BF16 rows multiply the fp32 row.
// Three code paths compute the same thing: a portable scalar one (the reference), AVX2 (+FMA,
// F16C) and AVX-512 (F/BW/VL/DQ + VNNI). The path is chosen once per process from CPUID, or by
// the environment variable IMPRESS_KERNEL_PATH = scalar | avx2 | avx512. Integer parts of every
// dot are identical on all paths; the fp32 results differ only by rounding (accumulation order).
//
// Thread contract: every function is pure apart from the one-time path choice (thread-safe
// static initialisation); an ActivationRow is written by Prepare and may then be read by any
// number of threads. Callers split GEMV rows across threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/quant/block-formats.h"

namespace impress::quant {

// ---- Types ----------------------------------------------------------------------------------

// True when `ggml_type` is one of the WeightType ids.
bool IsSupportedWeightType(uint32_t ggml_type);
// "Q4_K"; "unsupported" for an id that is not a WeightType.
const char* WeightTypeName(WeightType type);
// "F16, BF16, Q8_0, ...": for error messages.
const char* SupportedWeightTypes();
int64_t BlockElements(WeightType type);  // 1 for F16/BF16, 32 or 256 for the quantized types
int64_t BlockBytes(WeightType type);     // 2 for F16/BF16

// How an activation row is prepared for a weight type.
enum class ActFormat { kF32, kQ8x32, kQ8x256 };
ActFormat ActivationFormatFor(WeightType type);

// ---- Block decoding -------------------------------------------------------------------------

// Decodes n elements (a whole number of blocks) of `src` to fp32, bit for bit as the gguf Python
// package's dequantize (each multiply and add rounded on its own, in the format's order).
void DequantizeRow(WeightType type, const uint8_t* src, float* dst, int64_t n);

// ---- Activations ----------------------------------------------------------------------------

// fp32 -> int8 blocks: d = amax / 127, qs = round-to-nearest-even(x * (127 / amax)), clamped to
// [-127, 127]; an all-zero block has d = 0. n must be a multiple of the block size.
void QuantizeRow32(const float* x, int64_t n, ActBlock32* out);
void QuantizeRow256(const float* x, int64_t n, ActBlock256* out);
// What int8 blocks `q` (quantized from x by QuantizeRow32) leave of x: r[i] = fma(-d, qs[i], x[i]),
// one rounding, so every caller gets the same bits. QuantizeRow32 of r is the second set of a
// precise (residual) activation: x ~ d1 * q1 + d2 * q2 within d2 / 2 <= amax / 64,516 (~16 bits).
void ResidualRow32(const float* x, int64_t n, const ActBlock32* q, float* r);

// One activation row in the form one family of weight types multiplies: done once per row and
// reused by every weight row (and by every matrix whose type has the same ActFormat).
class ActivationRow {
 public:
  // Copies (kF32) or quantizes x[0..n). With `residual` (kQ8x32 only) the row also keeps the
  // int8 blocks of what the first set leaves (ResidualRow32), and every dot with it is the sum of
  // two integer dots, one per set: int8 speed with ~16-bit activations. Errors: kInvalidArgument
  // when n is negative or not a multiple of the format's block size, or `residual` with a format
  // other than kQ8x32. Reuses its buffers across calls.
  Status Prepare(ActFormat format, const float* x, int64_t n, bool residual = false);

  ActFormat format() const { return format_; }
  int64_t n() const { return n_; }
  // The float row (kF32), ActBlock32[n / 32] (kQ8x32) or ActBlock256[n / 256] (kQ8x256).
  const void* data() const;
  // The residual blocks, ActBlock32[n / 32]; nullptr unless prepared with `residual`.
  const ActBlock32* residual() const { return residual_ ? lo32_.data() : nullptr; }

 private:
  ActFormat format_ = ActFormat::kF32;
  int64_t n_ = 0;
  bool residual_ = false;
  std::vector<float> f32_;
  std::vector<ActBlock32> b32_, lo32_;
  std::vector<ActBlock256> b256_;
};

// Whether Q8_0 matrices should take residual activations by default: true unless the
// environment's IMPRESS_PRECISE_Q8_0 is "0" (for before/after comparisons). Decided once.
bool PreciseQ8_0Default();

// ---- Code paths -----------------------------------------------------------------------------

enum class KernelPath { kScalar, kAvx2, kAvx512 };

const char* KernelPathName(KernelPath path);  // "scalar", "avx2", "avx512"
// nullptr when this CPU runs `path`; otherwise the first CPU feature it lacks ("avx512vnni").
// IMPRESS_CPU_HIDE (comma-separated feature names, e.g. "avx512f") makes features count as
// absent, so a machine can run the suite as a CPU without them would (read once per process).
const char* MissingCpuFeature(KernelPath path);
// Parses "scalar" | "avx2" | "avx512". Errors: kInvalidArgument naming the text.
Result<KernelPath> ParseKernelPath(std::string_view text);
// The path GEMV uses by default: IMPRESS_KERNEL_PATH when set and runnable (an unknown or
// unrunnable value logs a warning and falls back), else the best path the CPU runs. Decided once.
KernelPath ActiveKernelPath();
// The rule ActiveKernelPath applies to the variable's value (null or empty: not set).
KernelPath ResolveKernelPath(const char* requested);

// ---- Dot products and GEMV ------------------------------------------------------------------

// A weight matrix stored as n_rows consecutive rows of n_cols elements in its GGUF type
// (row r starts at data + r * RowBytes()). Non-owning; data is typically a file mapping.
struct WeightMatrix {
  WeightType type = WeightType::kF16;
  const uint8_t* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  int64_t RowBytes() const { return n_cols / BlockElements(type) * BlockBytes(type); }
};

// W[row, :] . x for one weight row of `type` (x.n() elements, x prepared for the type) on a path
// the CPU runs; with a residual, dot(first set) + dot(residual set), as Gemv. Unchecked: Gemv is
// the checked entry point.
float DotRow(KernelPath path, WeightType type, const uint8_t* w_row, const ActivationRow& x);

// y[r] = W[r, :] . x for r in [r0, r1) (y indexed by absolute row). Errors: kInvalidArgument for
// a type/activation mismatch, n_cols not whole blocks or != x.n(), rows out of range;
// kUnsupported for a path this CPU cannot run.
Status Gemv(const WeightMatrix& w, const ActivationRow& x, int64_t r0, int64_t r1, float* y,
            KernelPath path = ActiveKernelPath());

// Batched decode: y[k * w.n_rows + r] = W[r, :] . xs[k] for k < n_x, r in [r0, r1). Each weight
// row is read once from memory and multiplied by every activation while it sits in L1.
Status GemvBatch(const WeightMatrix& w, const ActivationRow* xs, int n_x, int64_t r0, int64_t r1, float* y,
                 KernelPath path = ActiveKernelPath());

// ---- Test hook ------------------------------------------------------------------------------

// Integers per block that a dot combines with the fp32 scales: 0 for F16/BF16; 2 for Q4_K/Q5_K
// (the scale-weighted sum and the min-weighted sum); 1 otherwise.
int IntegerPartsPerBlock(WeightType type);
// Writes the integer parts of every block of one row's dot, computed by `path`'s own SIMD code,
// to parts[n_blocks * IntegerPartsPerBlock(type)]. Used by tests to check paths agree exactly.
void DotIntegerParts(KernelPath path, WeightType type, const uint8_t* w_row, const ActivationRow& x, int32_t* parts);

}  // namespace impress::quant
