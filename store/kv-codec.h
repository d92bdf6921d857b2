// How K/V records are encoded at rest (docs/design.md section 4): the bytes of one token's K (or
// V, or probe keys) for n_heads heads of head_dim values, in the chunk files and in the device
// and host tiers, and the conversion to and from the fp16 the compute expects.
//
//   kF16:  (n_heads, head_dim) fp16, as computed.
//   kInt8: n_heads fp16 scales, then (n_heads, head_dim) int8: value = q * scale, one scale per
//          token and head (absmax / 127, rounded up to the next fp16 so no q leaves [-127, 127]).
//          Half the bytes of fp16 plus 2 per head; each decoded element is within scale / 2 of
//          the fp16 input (plus the fp16 rounding of q * scale).
//   kInt4: as kInt8 with q in [-7, 7], two per byte (the even element in the low nibble, stored
//          as q + 8): a quarter of fp16's bytes plus 2 per head; within scale / 2 = absmax / 14.
//          For probe keys only (PrefixStoreOptions::probe_encoding): they rank tokens, they do
//          not enter attention.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/fp16.h"

namespace impress::store {

enum class KVEncoding : uint16_t { kF16 = 0, kInt8 = 1, kInt4 = 2 };

const char* KVEncodingName(KVEncoding e);  // "fp16", "int8", "int4"
std::optional<KVEncoding> ParseKVEncoding(const std::string& name);

// Bits per code of a quantized encoding (8 or 4; 0 for fp16), as base/kv-codes.h takes them.
inline int CodeBits(KVEncoding e) { return e == KVEncoding::kInt8 ? 8 : e == KVEncoding::kInt4 ? 4 : 0; }

// Bytes of one token's record of n_heads heads.
uint32_t RecordBytes(KVEncoding e, int n_heads, int head_dim);

// n_tokens records from fp16 rows src (n_tokens, src_stride elements apart); each record takes
// the heads listed in `heads` (n_heads of them; nullptr: heads 0..n_heads-1) of its row.
// dst receives n_tokens * RecordBytes(e, n_heads, head_dim) bytes.
void EncodeRecords(KVEncoding e, const f16_t* src, size_t src_stride, size_t n_tokens, int n_heads, int head_dim,
                   const int* heads, uint8_t* dst);

// One record back to fp16 (n_heads * head_dim values).
void DecodeRecord(KVEncoding e, const uint8_t* rec, int n_heads, int head_dim, f16_t* dst);

}  // namespace impress::store
