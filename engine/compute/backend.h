// Backend: the compute interface the forward pass runs on (docs/design.md section 1).
//
// A Backend owns device memory and runs coarse ops on it: fp32 GEMM, norms, RoPE, activations,
// embedding gather, fp16 conversion and attention-with-importance. The CPU backend
// (cpu-backend.h) implements it with OpenBLAS and a thread pool; a CUDA backend implements the
// same table with cuBLAS and kernels. Nothing above this header may know which one runs.
//
// Memory: device memory is reached only through DevPtr<T>, an opaque typed address. Callers may
// offset it (p + n elements) but never dereference it; host data moves in and out through
// CopyToDevice / CopyToHost. Shapes are row-major, the last dimension fastest.
//
// Ordering: ops run in issue order on one stream; they may be asynchronous. CopyToHost and
// Synchronize wait for everything issued before them. Small control arrays (head lists) are
// passed as host spans; the backend copies them if it needs to.
//
// Thread contract: a Backend requires external synchronization (one thread issues ops at a
// time). Ops return Status only for argument errors the caller could have avoided; a backend
// never aborts on bad input.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/fp16.h"
#include "base/row-arrivals.h"
#include "base/status.h"
#include "engine/model/model.h"

namespace impress {

// A typed device address. Never dereference it above the backend.
template <class T>
class DevPtr {
 public:
  DevPtr() = default;
  explicit DevPtr(T* raw) : p_(raw) {}
  template <class U>                    // DevPtr<float> -> DevPtr<const float>
  DevPtr(DevPtr<U> o) : p_(o.raw()) {}  // NOLINT: implicit like T* -> const T*
  DevPtr operator+(size_t n) const { return DevPtr(p_ + n); }
  explicit operator bool() const { return p_ != nullptr; }
  T* raw() const { return p_; }  // for backends only

 private:
  T* p_ = nullptr;
};

// RoPE, rotate-half convention (Hugging Face Llama): for each head and i < head_dim/2, the pair
// (x[i], x[i + head_dim/2]) is rotated by angle pos * inv_freq[i], the angle taken in double.
// inv_freq already includes any scaling (linear or llama3), see RopeInvFreq in forward.h.
struct RopeArgs {
  DevPtr<float> x;  // (n_tok, n_heads, head_dim), rotated in place
  int n_tok = 0, n_heads = 0, head_dim = 0;
  DevPtr<const int32_t> positions;  // (n_tok)
  DevPtr<const float> inv_freq;     // (head_dim / 2)
};

// Attention of new tokens over a caller-supplied prefix set plus themselves.
//
//   for each query head h (kv head g = h / (n_head / n_head_kv)) and new token i:
//     keys   = [prefix tokens 0..n_prefix) ++ [new tokens 0..i]     (all prefix keys visible,
//                                                                    causal among new tokens)
//     w      = softmax(scale * q[i,h] . k[., g])
//     out[i,h] = sum_j w_j v[j, g]
//
// Keys are post-RoPE, so positions never enter here. The prefix may be any subset of earlier
// tokens in any order. K/V are fp16; Q and the output fp32.
//
// Importance (H2O): for each requested query head r = importance_heads[x], the column sums over
// the n_new rows of w, written to importance[x * ld + j] for prefix columns j < n_prefix, and,
// with importance_include_new, for the new columns too at n_prefix + j (ld = n_prefix or
// n_prefix + n_new). Row sums of w are 1, so a head's full row of importance sums to n_new.
//
// AttentionQuery is the new tokens' side, which Attention and ScoreKeys share.
struct AttentionQuery {
  int n_new = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 0;            // usually 1/sqrt(head_dim)
  DevPtr<const float> q;      // (n_new, n_head, head_dim)
  DevPtr<const f16_t> k_new;  // (n_new, n_head_kv, head_dim): all kv heads
};

// The query side for n_new tokens of the given heads, at the usual scale 1/sqrt(head_dim).
inline AttentionQuery MakeAttentionQuery(int n_new, int n_head, int n_head_kv, int head_dim, DevPtr<const float> q,
                                         DevPtr<const f16_t> k_new) {
  AttentionQuery a;
  a.n_new = n_new;
  a.n_head = n_head;
  a.n_head_kv = n_head_kv;
  a.head_dim = head_dim;
  a.scale = 1.0f / std::sqrt(float(head_dim));
  a.q = q;
  a.k_new = k_new;
  return a;
}

struct AttentionArgs : AttentionQuery {
  DevPtr<const f16_t> v_new;  // (n_new, n_head_kv, head_dim)
  int n_prefix = 0;
  DevPtr<const f16_t> k_prefix, v_prefix;  // (n_prefix, n_head_kv, head_dim); unused if 0
  DevPtr<float> out;                       // (n_new, n_head, head_dim)
  std::span<const int> importance_heads;   // query heads to score; empty = none
  bool importance_include_new = false;
  // Columns below this one are not needed: a backend may leave them zero (the question's ordering
  // of its own new tokens needs only theirs, not the prefix's thousands).
  int importance_from = 0;
  DevPtr<float> importance;  // (importance_heads.size(), ld) as described above
  // Optional: the prefix rows are still arriving (a layer's KV read, base/row-arrivals.h, over
  // rows [0, n_prefix)); a backend waits for the rows it reads (a block at a time where it can)
  // and fails (kIOError, output undefined) when some never arrive.
  RowArrivals* prefix_arrivals = nullptr;
};

// The error of an attention whose prefix rows never arrived (their read failed).
Status PrefixRowsMissing();

// Importance only, from keys alone (the probe step, docs/design.md section 3). The prefix keys hold
// a subset of KV heads: prefix_kv_heads[s] is the kv head stored in slot s. Every query head
// in query_heads must use one of those kv heads. The softmax denominators include the new
// tokens' own keys (causal), so the result equals AttentionArgs' importance for the same heads.
//
// The prefix keys may come as the integer codes they are stored in (base/kv-codes.h) instead of
// fp16: key_codes (host memory) holds n_prefix records of prefix_kv_heads.size() heads with
// code_bits 8 or 4, and k_prefix is unused. The keys are decoded block by block while they are
// scored, to the same halves the store's decoding gives. Only backends whose HostAddressable()
// is true take codes.
struct ScoreKeysArgs : AttentionQuery {
  int n_prefix = 0;
  DevPtr<const f16_t> k_prefix;  // (n_prefix, prefix_kv_heads.size(), head_dim)
  int code_bits = 0;             // 0: k_prefix; 8 or 4: key_codes
  const uint8_t* key_codes = nullptr;
  std::span<const int> prefix_kv_heads;
  std::span<const int> query_heads;
  DevPtr<float> importance;  // (query_heads.size(), n_prefix)
};

enum class Trans { kNo, kYes };

// A weight matrix as the backend holds it: n_rows rows of n_cols values in GGML type ggml_type
// (0 = F32; otherwise a stored type of engine/quant: F16, BF16, Q8_0, Q4_K, ...). Made by
// MapWeight; the backend decides the type it keeps (a backend without typed kernels keeps F32).
struct WeightRef {
  uint32_t ggml_type = 0;
  DevPtr<const void> data;
  int64_t n_rows = 0, n_cols = 0;
  bool allocated = false;  // data was Alloc'ed by MapWeight (ReleaseWeight frees it)
  explicit operator bool() const { return bool(data); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;

  // ---- memory
  // Uninitialised device memory; ResourceExhausted when it cannot be had.
  virtual Result<DevPtr<void>> Alloc(size_t bytes) = 0;
  virtual void Free(DevPtr<void> p) = 0;
  // Makes read-only host data (weights) usable by ops. The host data must outlive every use.
  // CPU: the host pointer itself, no copy. CUDA: an upload, released by Free.
  virtual Result<DevPtr<const float>> MapConstant(const float* host, size_t n) = 0;
  virtual void ReleaseConstant(DevPtr<const float> p) = 0;
  // Makes a model matrix (t.shape = (n_rows, n_cols), fp32 or stored) usable by MatMul and
  // GetWeightRows; an empty tensor gives an empty WeightRef. The tensor must outlive every use.
  // This default decodes stored types to fp32 and maps them as constants (an upload on a
  // device); the CPU backend overrides it with a view of the stored bytes, no copy.
  // Errors: kUnsupported naming the type for a stored type that cannot be decoded.
  virtual Result<WeightRef> MapWeight(const Tensor& t);
  virtual void ReleaseWeight(const WeightRef& w);
  virtual void CopyToDevice(DevPtr<void> dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, DevPtr<const void> src, size_t bytes) = 0;  // waits
  virtual void CopyDevice(DevPtr<void> dst, DevPtr<const void> src, size_t bytes) = 0;
  virtual void Synchronize() = 0;
  // Whether device memory is ordinary host memory (the CPU backend): then a DevPtr's raw pointer
  // may be written by host code directly (e.g. a store read gathers K/V into the buffers).
  virtual bool HostAddressable() const { return false; }

  // ---- typed weights
  // y (m, w.n_rows) = x (m, w.n_cols) W^T + beta * y; x rows ldx apart, y rows ldy apart.
  // beta is 0 (y is overwritten, may hold NaN) or 1 (accumulate: the residual add).
  // The default runs Gemm on the F32 weights the default MapWeight made.
  virtual void MatMul(int m, const WeightRef& w, DevPtr<const float> x, int ldx, float beta, DevPtr<float> y, int ldy);
  // Several matrices over the same input (Q/K/V; gate/up): for each o of outs, in order,
  // MatMul(m, *o.w, x, ldx, o.beta, o.y, o.ldy); no o.y may overlap x. The results are those of
  // the separate calls, bit for bit; a backend may prepare x once and run all rows as one job.
  struct MatMulOut {
    const WeightRef* w = nullptr;
    float beta = 0;
    DevPtr<float> y;
    int ldy = 0;
  };
  virtual void MatMuls(int m, DevPtr<const float> x, int ldx, std::span<const MatMulOut> outs);
  // out[r] = W[ids[r]] as fp32 (rows of w.n_cols): embedding lookup. ids must be valid rows.
  virtual void GetWeightRows(DevPtr<float> out, const WeightRef& w, DevPtr<const int32_t> ids, int n_rows);
  // Which SIMD code path the typed kernels run ("avx512", "avx2", "scalar"; "fp32" without them).
  virtual std::string KernelPath() const { return "fp32"; }

  // ---- dense ops (fp32 unless said)
  // C (m,n) = alpha * op(A) (m,k) * op(B) (k,n) + beta * C; row-major with leading dims.
  virtual void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, DevPtr<const float> a, int lda,
                    DevPtr<const float> b, int ldb, float beta, DevPtr<float> c, int ldc) = 0;
  // out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; rows of n_cols. out may equal x.
  virtual void RmsNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, int n_rows, int n_cols,
                       float eps) = 0;
  // out[r] = (x[r] - mean) / sqrt(var + eps) * w + b. out may equal x.
  virtual void LayerNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, DevPtr<const float> b,
                         int n_rows, int n_cols, float eps) = 0;
  virtual void Rope(const RopeArgs& args) = 0;
  // out[r, i] = silu(gate[r, i]) * up[r, i]; gate and up are rows of width n_cols with row
  // stride ld (so both may live in one (n_rows, 2 * n_cols) GEMM output). out is dense.
  virtual void SwiGlu(DevPtr<float> out, DevPtr<const float> gate, DevPtr<const float> up, int n_rows, int n_cols,
                      int ld) = 0;
  virtual void Relu(DevPtr<float> x, size_t n) = 0;
  // x[i] += y[i]
  virtual void Add(DevPtr<float> x, DevPtr<const float> y, size_t n) = 0;
  // x[r, c] += bias[c] for n_rows rows of n_cols with row stride ld
  virtual void AddBias(DevPtr<float> x, DevPtr<const float> bias, int n_rows, int n_cols, int ld) = 0;
  // out[r] = table[ids[r]] (rows of n_cols). ids must be valid rows; the caller checks.
  virtual void GetRows(DevPtr<float> out, DevPtr<const float> table, DevPtr<const int32_t> ids, int n_rows,
                       int n_cols) = 0;
  // Strided fp32 -> fp16: dst[r * ld_dst + c] = src[r * ld_src + c] for c < n_cols.
  virtual void ToF16(DevPtr<f16_t> dst, int ld_dst, DevPtr<const float> src, int ld_src, int n_rows, int n_cols) = 0;

  // ---- attention
  virtual Status Attention(const AttentionArgs& args) = 0;
  virtual Status ScoreKeys(const ScoreKeysArgs& args) = 0;

  // Floating point operations performed by ops since the last reset (for benchmarks).
  virtual double Flops() const = 0;
  virtual void ResetFlops() = 0;
};

// Convenience for typed allocation.
template <class T>
Result<DevPtr<T>> AllocArray(Backend& be, size_t n) {
  auto r = be.Alloc(n * sizeof(T));
  if (!r.ok()) return r.status();
  return DevPtr<T>(static_cast<T*>(r->raw()));
}

// Validates attention arguments (shared by backends so all reject the same inputs).
Status CheckAttentionArgs(const AttentionArgs& a);
Status CheckScoreKeysArgs(const ScoreKeysArgs& a);

}  // namespace impress
