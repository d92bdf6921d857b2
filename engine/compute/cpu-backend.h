// CpuBackend: the Backend interface on the host CPU (OpenBLAS sgemm + a ThreadPool, AVX2/FMA/
// F16C kernels). Device memory is ordinary host memory; MapConstant is zero-copy; every op is
// synchronous.
//
// Thread contract: as Backend (external synchronization). OpenBLAS's thread count is a process
// global; creating a CpuBackend sets it to n_threads.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "engine/compute/backend.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

struct CpuBackendOptions {
  int n_threads = 2;  // OpenBLAS threads and pool threads (they never run at the same time)
  // Prefill (many rows) on quantized weights: the int8 GEMM (activation rows quantized to int8
  // blocks, as decode does; ~2.5x sgemm's rate) where the type and CPU allow; false: weight
  // tiles decoded to fp32 and sgemm (exact in the weights, for accuracy comparisons).
  bool int8_prefill = true;
  // Q8_0 matrices (decode GEMV and int8 GEMM) multiply activations carried as two int8 sets, the
  // row and what its int8 blocks leave of it (~16-bit precision, two integer dots summed): int8
  // activations alone cost Q8_0 most of its accuracy. false: one int8 set, as the other types.
  // The environment's IMPRESS_PRECISE_Q8_0=0 makes false the default, for comparisons.
  bool precise_q8_0 = quant::PreciseQ8_0Default();
  // Attention of a few dozen query rows over a prefix (a question, the probe) in blocked tiles
  // (engine/compute/tile-attention.h); false: the per-head sgemm path, for comparisons. The
  // environment's IMPRESS_ATTENTION_TILES=0 turns it off for a whole process.
  bool tile_attention = true;
  // Scores-only attention (ScoreKeys: the probe, the all-heads fallback, the H2O baselines) from
  // int8 queries and keys where the CPU has AVX-512 VNNI (engine/quant/key-scores.h): a quarter
  // of the fp32 multiply-adds, but the tokens chosen at the k-th place differ and greedy answers
  // match full KV a few points less often, so it is off by default. The environment's
  // IMPRESS_INT8_SCORES=1 (or 0) decides for a whole process.
  bool int8_key_scores = false;
  // The kernel path for int8 key scores even where it is not the fast one, regardless of the
  // above (tests run the scalar reference through the whole op); nullopt: as above.
  std::optional<quant::KernelPath> key_score_path = std::nullopt;
  // Scores-only attention over int4 probe-key records (the probe's default) from their codes as
  // stored, with int8 queries (engine/quant/code-scores.h: the error is bounded by half a query
  // step, max |q| / 254, far below the int4 keys' own rounding), on the active kernel path; false:
  // the records are decoded to fp32 first. The environment's IMPRESS_INT4_CODE_SCORES=0 turns it
  // off for a whole process.
  bool int4_code_scores = true;
  // The kernel path for those scores regardless of the CPU's best (tests run the scalar reference
  // and the AVX2 path through the whole op); nullopt: the active path.
  std::optional<quant::KernelPath> code_score_path = std::nullopt;
};

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options = {});

// Sets OpenBLAS's (process-global) thread count; used by benchmarks to time sgemm alone.
void SetBlasThreads(int n_threads);
// A plain sgemm on host memory, C (m,n) = A (m,k) * B^T (n,k): the benchmark's reference rate.
void HostSgemmNT(int m, int n, int k, const float* a, const float* b, float* c);

// OpenBLAS (sgemm for the weight types the int8 GEMM lacks: F16, BF16, Q2_K, Q3_K, ...) picks its
// kernels once, when the library is loaded, from the CPU it recognises; an OpenBLAS older than the
// CPU (Debian 12's 0.3.21 on a Sapphire Rapids Xeon) falls back to its generic SSE3 kernels
// ("Prescott"), 3-4x slower than its AVX-512 ones there. BlasCoreOverride is the kernel set to
// ask for instead (the value for OPENBLAS_CORETYPE, which takes effect only in a process that
// loads the library afterwards), or nullptr when OpenBLAS's choice stands or OPENBLAS_CORETYPE is
// already set. BlasCoreName is the library's own choice.
const char* BlasCoreOverride();
const char* BlasCoreName();
// OpenBLAS's worker threads, started when the library is loaded and after each call, wait for
// work spinning (sched_yield) for about 2^28 cycles, a tenth of a second, before they sleep: at
// start that takes a core from the model's load and the tokenizer on a two-core machine (about 30
// ms of a 300 ms `impress generate`). The spin is read from OPENBLAS_THREAD_TIMEOUT (log2 of the
// cycles) when the library loads. BlasThreadTimeoutToSet is the value to set (the shortest,
// kBlasThreadTimeout: the workers sleep as soon as a call is done, and a call wakes them), or
// nullptr when OPENBLAS_THREAD_TIMEOUT or GOTO_THREAD_TIMEOUT is already set. `impress` restarts
// itself once (app/main.cpp) when either this or BlasCoreOverride asks for a change.
inline constexpr const char* kBlasThreadTimeout = "4";
const char* BlasThreadTimeoutToSet();
// The rule: for OpenBLAS's choice `chosen`, "SkylakeX" where the CPU has AVX-512 F/CD/BW/DQ/VL,
// "Haswell" where it has AVX2 and FMA, when `chosen` is one of the cores before AVX2 (a fallback
// on such a CPU); nullptr otherwise.
const char* PickBlasCore(std::string_view chosen, bool avx512, bool avx2_fma);

}  // namespace impress
