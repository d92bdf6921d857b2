// GGML tensor element types (the ids GGUF files store) and their block geometry.
//
// A GGML type packs `block_size` elements into `type_size` bytes; a row of n elements needs
// n % block_size == 0. The ids and sizes follow ggml (ggml.h / gguf-py constants.py). Pure data
// and pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace impress {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  const char* name;     // "Q4_K"
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
};

// Traits of a type id as stored in a file; nullptr when the id is not a known GGML type.
const GgmlTypeTraits* GgmlTypeInfo(uint32_t type_id);

// "Q4_K", or "unknown type 99" for an id GgmlTypeInfo does not know.
std::string GgmlTypeName(uint32_t type_id);
inline std::string GgmlTypeName(GgmlType t) { return GgmlTypeName(static_cast<uint32_t>(t)); }

}  // namespace impress
