// Quantization: fp32 rows -> GGML blocks (the inverse of dequant.h), for writing GGUF files
// (engine/model/gguf-writer.h, `impress quantize`).
//
// Each block's parameters are fitted to its own values: Q8_0/Q4_0/Q5_0 and Q6_K are symmetric
// (a scale per block or sub-block, chosen among a few candidates around max|x| / levels for the
// least squared error); Q4_1/Q5_1 and Q4_K/Q5_K are affine (scale and offset; the K-quants keep
// 6-bit sub-block scales and mins under fp16 super-block factors, their offset <= 0 as the format
// requires). The values are then rounded against the scales as stored (fp16-rounded, 6- or 8-bit
// sub-block factors), so decoding reproduces exactly what the error was measured on.
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/model/ggml-type.h"

namespace impress {

// True for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool CanQuantize(uint32_t type_id);

// Encodes n values (a multiple of the type's block size) of `x` into `out` (GgmlByteSize(type,
// n) bytes). Errors: kUnsupported for a type CanQuantize refuses; kInvalidArgument when n is not
// whole blocks. Non-finite inputs are an error (kInvalidArgument naming the index).
Status QuantizeRow(uint32_t type_id, const float* x, int64_t n, uint8_t* out);

}  // namespace impress
