#include "engine/model/ggml-type.h"

namespace impress {
namespace {

constexpr uint32_t kQK_K = 256;

struct Entry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Sizes as in ggml (gguf-py constants.py GGML_QUANT_SIZES).
constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4}},
    {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 2 + 16}},
    {3, {"Q4_1", 32, 2 + 2 + 16}},
    {6, {"Q5_0", 32, 2 + 4 + 16}},
    {7, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {8, {"Q8_0", 32, 2 + 32}},
    {9, {"Q8_1", 32, 4 + 4 + 32}},
    {10, {"Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4}},
    {11, {"Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12}},
    {12, {"Q4_K", kQK_K, 2 + 2 + kQK_K / 2 + 12}},
    {13, {"Q5_K", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 8 + 12}},
    {14, {"Q6_K", kQK_K, 2 + kQK_K / 2 + kQK_K / 4 + kQK_K / 16}},
    {15, {"Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8}},
    {16, {"IQ2_XXS", kQK_K, 2 + kQK_K / 4}},
    {17, {"IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32}},
    {18, {"IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8}},
    {19, {"IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16}},
    {20, {"IQ4_NL", 32, 2 + 16}},
    {21, {"IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4}},
    {22, {"IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16}},
    {23, {"IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64}},
    {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},
    {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},
    {29, {"IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32}},
    {30, {"BF16", 1, 2}},
    {34, {"TQ1_0", kQK_K, 2 + 4 * 13}},
    {35, {"TQ2_0", kQK_K, 2 + 64}},
    {39, {"MXFP4", 32, 1 + 16}},
};

}  // namespace

const GgmlTypeTraits* GgmlTypeInfo(uint32_t type_id) {
  for (const Entry& e : kTypes) {
    if (e.id == type_id) return &e.traits;
  }
  return nullptr;
}

std::string GgmlTypeName(uint32_t type_id) {
  const GgmlTypeTraits* t = GgmlTypeInfo(type_id);
  return t ? std::string(t->name) : "unknown type " + std::to_string(type_id);
}

}  // namespace impress
