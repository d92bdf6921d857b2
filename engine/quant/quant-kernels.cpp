// Types, activation rows, the run-time choice of code path, and the checked GEMV entry points.
#include "engine/quant/quant-kernels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/quant/kernel-table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace impress::quant {

int SlotOf(WeightType type) {
  switch (type) {
    case WeightType::kF16: return kSlotF16;
    case WeightType::kBF16: return kSlotBF16;
    case WeightType::kQ8_0: return kSlotQ8_0;
    case WeightType::kQ4_0: return kSlotQ4_0;
    case WeightType::kQ4_1: return kSlotQ4_1;
    case WeightType::kQ5_0: return kSlotQ5_0;
    case WeightType::kQ5_1: return kSlotQ5_1;
    case WeightType::kQ4_K: return kSlotQ4_K;
    case WeightType::kQ5_K: return kSlotQ5_K;
    case WeightType::kQ6_K: return kSlotQ6_K;
  }
  return -1;
}

namespace {

struct TypeInfo {
  const char* name;
  int64_t block_elements;
  int64_t block_bytes;
  ActFormat act;
  int int_parts;
};

// Indexed by TypeSlot.
constexpr TypeInfo kTypes[kNumSlots] = {
    {"F16", 1, 2, ActFormat::kF32, 0},
    {"BF16", 1, 2, ActFormat::kF32, 0},
    {"Q8_0", kQK32, sizeof(BlockQ8_0), ActFormat::kQ8x32, 1},
    {"Q4_0", kQK32, sizeof(BlockQ4_0), ActFormat::kQ8x32, 1},
    {"Q4_1", kQK32, sizeof(BlockQ4_1), ActFormat::kQ8x32, 1},
    {"Q5_0", kQK32, sizeof(BlockQ5_0), ActFormat::kQ8x32, 1},
    {"Q5_1", kQK32, sizeof(BlockQ5_1), ActFormat::kQ8x32, 1},
    {"Q4_K", kQK256, sizeof(BlockQ4_K), ActFormat::kQ8x256, 2},
    {"Q5_K", kQK256, sizeof(BlockQ5_K), ActFormat::kQ8x256, 2},
    {"Q6_K", kQK256, sizeof(BlockQ6_K), ActFormat::kQ8x256, 1},
};

// Unknown ids fall back to F16's entry only where callers already checked the type.
const TypeInfo& Info(WeightType type) {
  const int slot = SlotOf(type);
  return kTypes[slot < 0 ? 0 : slot];
}

int64_t ActBlockElements(ActFormat f) { return f == ActFormat::kQ8x32 ? kQK32 : f == ActFormat::kQ8x256 ? kQK256 : 1; }

const KernelTable& TableFor(KernelPath path) {
  switch (path) {
    case KernelPath::kAvx512: return Avx512Kernels();
    case KernelPath::kAvx2: return Avx2Kernels();
    case KernelPath::kScalar: break;
  }
  return ScalarKernels();
}

}  // namespace

KernelPath ResolveKernelPath(const char* env) {
  KernelPath best = KernelPath::kScalar;
  if (!MissingCpuFeature(KernelPath::kAvx512)) {
    best = KernelPath::kAvx512;
  } else if (!MissingCpuFeature(KernelPath::kAvx2)) {
    best = KernelPath::kAvx2;
  }
  if (!env || !*env) return best;
  auto wanted = ParseKernelPath(env);
  if (!wanted.ok()) {
    spdlog::warn("IMPRESS_KERNEL_PATH: {}; using {}", wanted.status().message(), KernelPathName(best));
    return best;
  }
  if (const char* missing = MissingCpuFeature(*wanted)) {
    spdlog::warn("IMPRESS_KERNEL_PATH={}: this CPU lacks {}; using {}", env, missing, KernelPathName(best));
    return best;
  }
  return *wanted;
}

bool IsSupportedWeightType(uint32_t ggml_type) { return SlotOf(static_cast<WeightType>(ggml_type)) >= 0; }

const char* WeightTypeName(WeightType type) { return SlotOf(type) < 0 ? "unsupported" : Info(type).name; }

const char* SupportedWeightTypes() { return "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"; }

int64_t BlockElements(WeightType type) { return Info(type).block_elements; }
int64_t BlockBytes(WeightType type) { return Info(type).block_bytes; }
ActFormat ActivationFormatFor(WeightType type) { return Info(type).act; }
int IntegerPartsPerBlock(WeightType type) { return Info(type).int_parts; }

Status ActivationRow::Prepare(ActFormat format, const float* x, int64_t n, bool residual) {
  const int64_t block = ActBlockElements(format);
  if (n < 0 || n % block != 0) {
    return Status::InvalidArgument("activation row of " + std::to_string(n) + " elements is not a whole number of " +
                                   std::to_string(block) + "-element blocks");
  }
  if (residual && format != ActFormat::kQ8x32) {
    return Status::InvalidArgument("a residual activation set exists for 32-element int8 blocks only");
  }
  format_ = format;
  n_ = n;
  residual_ = residual;
  switch (format) {
    case ActFormat::kF32: f32_.assign(x, x + n); break;
    case ActFormat::kQ8x32:
      b32_.resize(size_t(n / kQK32));
      QuantizeRow32(x, n, b32_.data());
      if (residual) {
        thread_local std::vector<float> r;
        r.resize(size_t(n));
        ResidualRow32(x, n, b32_.data(), r.data());
        lo32_.resize(b32_.size());
        QuantizeRow32(r.data(), n, lo32_.data());
      }
      break;
    case ActFormat::kQ8x256:
      b256_.resize(size_t(n / kQK256));
      QuantizeRow256(x, n, b256_.data());
      break;
  }
  return Status::Ok();
}

const void* ActivationRow::data() const {
  switch (format_) {
    case ActFormat::kF32: return f32_.data();
    case ActFormat::kQ8x32: return b32_.data();
    case ActFormat::kQ8x256: return b256_.data();
  }
  return nullptr;
}

const char* KernelPathName(KernelPath path) {
  switch (path) {
    case KernelPath::kScalar: return "scalar";
    case KernelPath::kAvx2: return "avx2";
    case KernelPath::kAvx512: return "avx512";
  }
  return "unknown";
}

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
static bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

// Whether IMPRESS_CPU_HIDE (a comma-separated list of feature names) hides `feature`.
[[maybe_unused]] static bool HiddenCpuFeature(std::string_view feature) {
  static const std::string hidden = [] {
    const char* e = std::getenv("IMPRESS_CPU_HIDE");
    return std::string(e ? e : "");
  }();
  std::string_view rest = hidden;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == feature) return true;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return false;
}

const char* MissingCpuFeature(KernelPath path) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports needs a string literal, hence a macro rather than a function.
#define IMPRESS_REQUIRE(name, present) \
  if (!(present) || HiddenCpuFeature(name)) return name
  switch (path) {
    case KernelPath::kScalar: return nullptr;
    case KernelPath::kAvx512:
      IMPRESS_REQUIRE("avx512f", __builtin_cpu_supports("avx512f"));
      IMPRESS_REQUIRE("avx512bw", __builtin_cpu_supports("avx512bw"));
      IMPRESS_REQUIRE("avx512vl", __builtin_cpu_supports("avx512vl"));
      IMPRESS_REQUIRE("avx512dq", __builtin_cpu_supports("avx512dq"));
      IMPRESS_REQUIRE("avx512vnni", __builtin_cpu_supports("avx512vnni"));
      [[fallthrough]];
    case KernelPath::kAvx2:
      IMPRESS_REQUIRE("avx2", __builtin_cpu_supports("avx2"));
      IMPRESS_REQUIRE("fma", __builtin_cpu_supports("fma"));
      IMPRESS_REQUIRE("f16c", HasF16c());
      return nullptr;
  }
#undef IMPRESS_REQUIRE
  return "an unknown path";
#else
  return path == KernelPath::kScalar ? nullptr : "an x86-64 CPU";
#endif
}

Result<KernelPath> ParseKernelPath(std::string_view text) {
  for (KernelPath p : {KernelPath::kScalar, KernelPath::kAvx2, KernelPath::kAvx512}) {
    if (text == KernelPathName(p)) return p;
  }
  return Status::InvalidArgument("unknown kernel path '" + std::string(text) + "' (scalar, avx2 or avx512)");
}

bool PreciseQ8_0Default() {
  static const bool precise = [] {
    const char* e = std::getenv("IMPRESS_PRECISE_Q8_0");
    return !e || std::string(e) != "0";
  }();
  return precise;
}

KernelPath ActiveKernelPath() {
  static const KernelPath path = ResolveKernelPath(std::getenv("IMPRESS_KERNEL_PATH"));
  return path;
}

float DotRow(KernelPath path, WeightType type, const uint8_t* w_row, const ActivationRow& x) {
  const KernelTable::DotFn dot = TableFor(path).dot[SlotOf(type)];
  const float hi = dot(w_row, x.data(), x.n());
  return x.residual() ? hi + dot(w_row, x.residual(), x.n()) : hi;
}

void DotIntegerParts(KernelPath path, WeightType type, const uint8_t* w_row, const ActivationRow& x, int32_t* parts) {
  const KernelTable::PartsFn fn = TableFor(path).parts[SlotOf(type)];
  if (fn) fn(w_row, x.data(), x.n(), parts);
}

namespace {

// MissingCpuFeature asked once per path: GEMV checks it on every call, hundreds of times a token.
const char* CachedMissingFeature(KernelPath path) {
  static const char* const missing[] = {MissingCpuFeature(KernelPath::kScalar), MissingCpuFeature(KernelPath::kAvx2),
                                        MissingCpuFeature(KernelPath::kAvx512)};
  const int i = static_cast<int>(path);
  return i >= 0 && i < 3 ? missing[i] : "an unknown path";
}

Status CheckGemv(const WeightMatrix& w, const ActivationRow* xs, int n_x, int64_t r0, int64_t r1, KernelPath path) {
  if (SlotOf(w.type) < 0) {
    return Status::Unsupported("weight type id " + std::to_string(uint32_t(w.type)) +
                               " has no kernels (supported: " + SupportedWeightTypes() + ")");
  }
  if (const char* missing = CachedMissingFeature(path)) {
    return Status::Unsupported(std::string("kernel path ") + KernelPathName(path) + " needs " + missing);
  }
  const char* name = WeightTypeName(w.type);
  if (w.n_cols < 0 || w.n_cols % BlockElements(w.type) != 0) {
    return Status::InvalidArgument(std::to_string(w.n_cols) + " columns are not whole " + name + " blocks");
  }
  if (r0 < 0 || r1 < r0 || r1 > w.n_rows) {
    return Status::InvalidArgument("rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") outside a " +
                                   std::to_string(w.n_rows) + "-row matrix");
  }
  for (int k = 0; k < n_x; ++k) {
    if (xs[k].format() != ActivationFormatFor(w.type) || xs[k].n() != w.n_cols) {
      return Status::InvalidArgument("activation " + std::to_string(k) + " (" + std::to_string(xs[k].n()) +
                                     " elements) was not prepared for a " + name + " matrix of " +
                                     std::to_string(w.n_cols) + " columns");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Gemv(const WeightMatrix& w, const ActivationRow& x, int64_t r0, int64_t r1, float* y, KernelPath path) {
  return GemvBatch(w, &x, 1, r0, r1, y, path);
}

Status GemvBatch(const WeightMatrix& w, const ActivationRow* xs, int n_x, int64_t r0, int64_t r1, float* y,
                 KernelPath path) {
  if (Status st = CheckGemv(w, xs, n_x, r0, r1, path); !st.ok()) return st;
  const KernelTable& table = TableFor(path);
  const KernelTable::DotFn dot = table.dot[SlotOf(w.type)];
  const int64_t row_bytes = w.RowBytes();
  const uint8_t* row = w.data + r0 * row_bytes;
  if (const KernelTable::RowsFn rows = table.rows[SlotOf(w.type)]) {
    // Chunks of rows small enough to stay in L1 while every activation passes over them.
    constexpr int64_t kChunk = 16;
    for (int64_t r = r0; r < r1; r += kChunk, row += kChunk * row_bytes) {
      const int64_t nr = std::min(kChunk, r1 - r);
      for (int k = 0; k < n_x; ++k) {
        float* yk = y + k * w.n_rows + r;
        rows(row, row_bytes, nr, xs[k].data(), w.n_cols, yk);
        if (const ActBlock32* lo = xs[k].residual()) {  // the second set, on rows still in L1
          float t[kChunk];
          rows(row, row_bytes, nr, lo, w.n_cols, t);
          for (int64_t i = 0; i < nr; ++i) yk[i] += t[i];
        }
      }
    }
    return Status::Ok();
  }
  for (int64_t r = r0; r < r1; ++r, row += row_bytes) {
    for (int k = 0; k < n_x; ++k) {
      const float hi = dot(row, xs[k].data(), w.n_cols);
      y[k * w.n_rows + r] = xs[k].residual() ? hi + dot(row, xs[k].residual(), w.n_cols) : hi;
    }
  }
  return Status::Ok();
}

}  // namespace impress::quant
