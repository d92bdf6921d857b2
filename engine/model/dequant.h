// Dequantization: GGML tensor bytes -> fp32, for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K.
//
// Block layouts and arithmetic follow ggml's dequantize_row_* (and gguf-py's quants.py, the
// reference the tests compare against bit for bit): no fused multiply-adds, the same order of
// float operations. Source bytes may be unaligned. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/model/ggml-type.h"
#include "engine/model/model.h"

namespace impress {

// True when Dequantize() handles `type_id`.
bool CanDequantize(uint32_t type_id);

// "F32, F16, BF16, Q8_0, Q4_0, ...": for error messages.
const char* SupportedDequantTypes();

// Bytes that n_elements of the type occupy. Errors: unknown type, n_elements not a multiple of
// the type's block size, or a size that overflows 64 bits.
Result<uint64_t> GgmlByteSize(uint32_t type_id, uint64_t n_elements);

// Converts n_elements (a multiple of the block size) from `src` (src_bytes readable bytes) to
// fp32 `dst`. `what` names the tensor in errors. Splits the work over up to n_threads threads
// (1 = the calling thread only); small inputs always run on the calling thread.
// Errors: kUnsupported naming the type and `what` for a type it cannot convert; kCorruption
// when src_bytes is smaller than the size n_elements needs; kInvalidArgument for a bad count.
Status Dequantize(uint32_t type_id, const uint8_t* src, uint64_t src_bytes, float* dst, uint64_t n_elements,
                  std::string_view what, int n_threads = 1);

// The fp32 values of a model tensor: a copy of its data, or its stored rows decoded (bit for bit
// as DequantizeRow). Errors: kUnsupported naming the type when it is not a stored type the
// quantized kernels know.
Result<std::vector<float>> TensorValues(const Tensor& t);

// Bytes the tensor's values occupy as held: stored rows in their type, or 4 per fp32 value.
uint64_t TensorBytes(const Tensor& t);

// A copy of the model whose every stored tensor is replaced by its fp32 values (same values the
// quantized kernels decode): the reference a quantized forward pass is compared against.
Result<Model> DequantizedCopy(const Model& model);

}  // namespace impress
