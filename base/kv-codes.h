// The integer codes of K/V records at rest (the int8 and int4 encodings of store/kv-codec.h) and
// their decoding back to halves. A record of n_heads heads is n_heads fp16 scales, then each
// head's codes: int8, one byte per element; int4, two per byte, the even element in the low
// nibble, each stored as q + 8. An element is code * scale, clamped to the halves, rounded to the
// nearest half (even on ties).
//
// The store decodes what it read with these, and the engine decodes probe keys with them block
// by block while it scores them, so both see the same halves bit for bit.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/fp16.h"

namespace impress {

// Bytes of one head's codes (bits: 8 or 4).
inline size_t HeadCodeBytes(int bits, int head_dim) {
  return bits == 4 ? (size_t(head_dim) + 1) / 2 : size_t(head_dim);
}

// Bytes of one record of n_heads heads.
inline size_t CodedRecordBytes(int bits, int n_heads, int head_dim) {
  return size_t(n_heads) * (HeadCodeBytes(bits, head_dim) + 2);
}

// One head's codes times scale s, back to halves (head_dim of them).
void DecodeInt8Head(const int8_t* q, float s, int head_dim, f16_t* out);
void DecodeInt4Head(const uint8_t* codes, float s, int head_dim, f16_t* out);

// Head h of a record of n_heads heads (bits: 8 or 4) back to halves.
void DecodeRecordHead(int bits, const uint8_t* rec, int n_heads, int head_dim, int h, f16_t* out);

}  // namespace impress
