// CPU backend: OpenBLAS for GEMMs, a ThreadPool for everything else. See cpu-backend.h.
#include "engine/compute/cpu-backend.h"

#include <cblas.h>
#include <immintrin.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "base/host-alloc.h"
#include "base/kv-codes.h"
#include "engine/compute/decode-attention.h"
#include "engine/compute/rope-angles.h"
#include "engine/compute/simd-math.h"
#include "engine/compute/thread-pool.h"
#include "engine/compute/tile-attention.h"
#include "engine/compute/typed-gemv.h"
#include "engine/quant/gemm.h"
#include "engine/quant/key-scores.h"
#include "engine/quant/quant-kernels.h"

namespace impress {

namespace {

// ---- vector math -------------------------------------------------------------------------

// In place: row[0..n_valid) = softmax(row[0..n_valid)), row[n_valid..n) = 0.
void SoftmaxRow(float* row, int n_valid, int n) {
  float sum = 0;
  ExpShift(row, n_valid, &sum);
  const float inv = 1.0f / sum;
  const __m256 vinv = _mm256_set1_ps(inv);
  int j = 0;
  for (; j + 8 <= n_valid; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vinv));
  for (; j < n_valid; ++j) row[j] *= inv;
  if (n > n_valid) std::memset(row + n_valid, 0, sizeof(float) * size_t(n - n_valid));
}

// ---- the backend ---------------------------------------------------------------------------

// Work (in values touched) below which an op runs on the calling thread: waking the pool costs
// more than it saves.
constexpr int64_t kParallelMin = 131072;
// Attention with at most this many query rows per kv head reads fp16 K/V directly.
constexpr int kDirectRows = 8;
// Keys and values the sgemm attention (RunGroup) holds as fp32 at a time.
constexpr int kGatherKeys = 4096;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o) :
      pool_(o.n_threads), int8_prefill_(o.int8_prefill), precise_q8_0_(o.precise_q8_0), tiles_(o.tile_attention) {
    SetBlasThreads(o.n_threads);
    const char* env = std::getenv("IMPRESS_ATTENTION_TILES");
    if (env && std::string(env) == "0") tiles_ = false;
    const char* int8_env = std::getenv("IMPRESS_INT8_SCORES");
    const bool int8 = int8_env && *int8_env ? std::string(int8_env) == "1" : o.int8_key_scores;
    const quant::KernelPath path = quant::ActiveKernelPath();
    if (o.key_score_path) int8_scores_ = o.key_score_path;
    else if (int8 && quant::HasFastKeyScores(path)) int8_scores_ = path;
    const char* code_env = std::getenv("IMPRESS_INT4_CODE_SCORES");
    if (o.code_score_path) code_scores_ = o.code_score_path;
    else if (o.int4_code_scores && !(code_env && std::string(code_env) == "0")) code_scores_ = path;
  }

  // Benchmarks print this next to their numbers: it says when scores were int8.
  bool HostAddressable() const override { return true; }
  std::string Name() const override {
    return "cpu (OpenBLAS, " + std::to_string(pool_.n_threads()) + " threads" +
           (int8_scores_ ? std::string(", int8 key scores (") + quant::KernelPathName(*int8_scores_) + ")" : "") + ")";
  }

  Result<DevPtr<void>> Alloc(size_t bytes) override {
    void* p = AllocHostBuffer(bytes);
    if (!p) return Status::ResourceExhausted("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    return DevPtr<void>(p);
  }
  void Free(DevPtr<void> p) override { std::free(p.raw()); }
  Result<DevPtr<const float>> MapConstant(const float* host, size_t) override { return DevPtr<const float>(host); }
  void ReleaseConstant(DevPtr<const float>) override {}
  void CopyToDevice(DevPtr<void> dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst.raw(), src, bytes);
  }
  void CopyToHost(void* dst, DevPtr<const void> src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src.raw(), bytes);
  }
  void CopyDevice(DevPtr<void> dst, DevPtr<const void> src, size_t bytes) override {
    if (bytes) std::memmove(dst.raw(), src.raw(), bytes);
  }
  void Synchronize() override {}

  static constexpr int kGemvRows = 2;
  void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, DevPtr<const float> a, int lda, DevPtr<const float> b,
            int ldb, float beta, DevPtr<float> c, int ldc) override {
    if (m <= 0 || n <= 0) return;
    if (m <= kGemvRows && ta == Trans::kNo) {
      // A few rows (decode): sgemm would pack the whole weight matrix on every call, which
      // dominated decode time; a GEMV per row streams the weights once per row instead.
      // Row i: c_i (n) = alpha * op(B) a_i + beta * c_i, op(B) = B (n, k) when tb, else B^T.
      for (int i = 0; i < m; ++i) {
        cblas_sgemv(CblasRowMajor, tb == Trans::kYes ? CblasNoTrans : CblasTrans, tb == Trans::kYes ? n : k,
                    tb == Trans::kYes ? k : n, alpha, b.raw(), ldb, a.raw() + int64_t(i) * lda, 1, beta,
                    c.raw() + int64_t(i) * ldc, 1);
      }
      flops_ += 2.0 * m * n * k;
      return;
    }
    cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
                tb == Trans::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a.raw(), lda, b.raw(), ldb, beta,
                c.raw(), ldc);
    flops_ += 2.0 * m * n * k;
  }

  // Typed weights are views of the stored bytes (the model's file mapping): no copy.
  Result<WeightRef> MapWeight(const Tensor& t) override {
    WeightRef w;
    if (t.empty()) return w;
    w.n_rows = t.rows();
    w.n_cols = t.cols();
    if (!t.stored()) {
      w.data = DevPtr<const void>(t.ptr());
      return w;
    }
    if (!quant::IsSupportedWeightType(t.ggml_type))
      return Status::Unsupported("cpu backend: weights of type " + std::to_string(t.ggml_type) +
                                 " cannot be computed on (supported: " + quant::SupportedWeightTypes() + ")");
    w.ggml_type = t.ggml_type;
    w.data = DevPtr<const void>(t.stored_bytes());
    return w;
  }
  void ReleaseWeight(const WeightRef&) override {}

  void MatMul(int m, const WeightRef& w, DevPtr<const float> x, int ldx, float beta, DevPtr<float> y, int ldy) override;
  void MatMuls(int m, DevPtr<const float> x, int ldx, std::span<const MatMulOut> outs) override;
  void GetWeightRows(DevPtr<float> out, const WeightRef& w, DevPtr<const int32_t> ids, int n_rows) override;
  std::string KernelPath() const override { return quant::KernelPathName(path_); }

  void RmsNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, int n_rows, int n_cols,
               float eps) override {
    const float* ws = w.raw();
    ForRowsOf(out, x, n_rows, n_cols, [=](const float* xr, float* orow) {
      double ss = 0;
      for (int c = 0; c < n_cols; ++c) ss += double(xr[c]) * xr[c];
      const float scale = float(1.0 / std::sqrt(ss / n_cols + eps));
      for (int c = 0; c < n_cols; ++c) orow[c] = xr[c] * scale * ws[c];
    });
  }

  void LayerNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, DevPtr<const float> b, int n_rows,
                 int n_cols, float eps) override {
    const float* ws = w.raw();
    const float* bs = b.raw();
    ForRowsOf(out, x, n_rows, n_cols, [=](const float* xr, float* orow) {
      double sum = 0;
      for (int c = 0; c < n_cols; ++c) sum += xr[c];
      const double mean = sum / n_cols;
      double var = 0;
      for (int c = 0; c < n_cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
      const float inv = float(1.0 / std::sqrt(var / n_cols + eps));
      const float m = float(mean);
      for (int c = 0; c < n_cols; ++c) orow[c] = (xr[c] - m) * inv * ws[c] + (bs ? bs[c] : 0.0f);
    });
  }

  void Rope(const RopeArgs& a) override {
    const int half = a.head_dim / 2;
    float* x = a.x.raw();
    const int32_t* pos = a.positions.raw();
    const float* inv_freq = a.inv_freq.raw();
    const int n_heads = a.n_heads, hd = a.head_dim;
    if (a.n_tok == 1) {  // decode: the angles of the one position, shared by every layer's q and k
      decode_angles_.Prepare(pos, 1, inv_freq, half, [](int64_t, int64_t, auto fn) { fn(0); });
      const float *cs = decode_angles_.cs(), *sn = decode_angles_.sn();
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + int64_t(h) * hd;
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
      }
      return;
    }
    batch_angles_.Prepare(pos, a.n_tok, inv_freq, half,
                          [this](int64_t n, int64_t cost, auto fn) { ForRows(n, cost, fn); });
    const float *all_cs = batch_angles_.cs(), *all_sn = batch_angles_.sn();
    ForRows(a.n_tok, int64_t(n_heads) * hd, [=](int64_t t) {
      const float* cs = all_cs + t * half;
      const float* sn = all_sn + t * half;
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * hd;
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cs[i] - x1 * sn[i];
          v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
      }
    });
  }

  void SwiGlu(DevPtr<float> out, DevPtr<const float> gate, DevPtr<const float> up, int n_rows, int n_cols,
              int ld) override {
    float* o = out.raw();
    const float* g = gate.raw();
    const float* u = up.raw();
    ForRows(n_rows, n_cols * 8, [=](int64_t r) {
      const float* gr = g + r * ld;
      const float* ur = u + r * ld;
      float* orow = o + r * n_cols;
      int c = 0;
      const __m256 one = _mm256_set1_ps(1.0f);
      for (; c + 8 <= n_cols; c += 8) {
        const __m256 gv = _mm256_loadu_ps(gr + c);
        const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(orow + c, _mm256_mul_ps(s, _mm256_loadu_ps(ur + c)));
      }
      for (; c < n_cols; ++c) orow[c] = gr[c] / (1.0f + std::exp(-gr[c])) * ur[c];
    });
  }

  void Relu(DevPtr<float> x, size_t n) override {
    float* p = x.raw();
    ForRange(n, [=](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) p[i] = p[i] > 0 ? p[i] : 0.0f;
    });
  }

  void Add(DevPtr<float> x, DevPtr<const float> y, size_t n) override {
    float* p = x.raw();
    const float* q = y.raw();
    ForRange(n, [=](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) p[i] += q[i];
    });
  }

  void AddBias(DevPtr<float> x, DevPtr<const float> bias, int n_rows, int n_cols, int ld) override {
    float* p = x.raw();
    const float* bs = bias.raw();
    ForRows(n_rows, n_cols, [=](int64_t r) {
      float* row = p + r * ld;
      for (int c = 0; c < n_cols; ++c) row[c] += bs[c];
    });
  }

  void GetRows(DevPtr<float> out, DevPtr<const float> table, DevPtr<const int32_t> ids, int n_rows,
               int n_cols) override {
    for (int r = 0; r < n_rows; ++r)
      std::memcpy(out.raw() + int64_t(r) * n_cols, table.raw() + int64_t(ids.raw()[r]) * n_cols,
                  sizeof(float) * size_t(n_cols));
  }

  void ToF16(DevPtr<f16_t> dst, int ld_dst, DevPtr<const float> src, int ld_src, int n_rows, int n_cols) override {
    f16_t* d = dst.raw();
    const float* s = src.raw();
    ForRows(n_rows, n_cols, [=](int64_t r) { Fp32ToFp16Row(s + r * ld_src, d + r * ld_dst, size_t(n_cols)); });
  }

  Status Attention(const AttentionArgs& a) override;
  Status ScoreKeys(const ScoreKeysArgs& a) override;

  double Flops() const override { return flops_; }
  void ResetFlops() override { flops_ = 0; }

 private:
  // Attention (out != nullptr) or scores only for the heads of one kv head (grp: its fp16 keys
  // and values, prefix rows first, and its query heads with their importance rows), on fp32
  // copies of the keys and values (kf_, vf_) and sgemm.
  void RunGroup(const float* q, int ldq, int n_new, int head_dim, float scale, const TileGroup& grp, int n_prefix,
                float* out, int ldo, bool imp_include_new);

  // Few query rows (decode): scores straight from fp16 K/V, no fp32 copies or GEMMs, split
  // across the pool by kv head and by blocks of keys. imp_row[h]: head h's importance row or null.
  void DirectAttention(const AttentionArgs& a, const std::vector<float*>& imp_row);

  // The tiled attention's query side and its parallel-for over the pool.
  static TileAttentionArgs TileArgs(const AttentionQuery& a, float* out) {
    TileAttentionArgs t;
    t.q = a.q.raw();
    t.ldq = t.ldo = a.n_head * a.head_dim;
    t.n_new = a.n_new;
    t.head_dim = a.head_dim;
    t.scale = a.scale;
    t.out = out;
    return t;
  }
  TileParallelFor TileParallel() {
    return [this](int64_t n, const std::function<void(int64_t)>& fn) {
      if (pool_.n_threads() == 1 || n < 2) {
        for (int64_t i = 0; i < n; ++i) fn(i);
      } else {
        pool_.ParallelFor(n, fn);
      }
    };
  }

  // Rows [j0, j1) of a group's keys (values with v) into fp32 (j1 - j0, head_dim): rows below
  // n_prefix from the prefix, the rest from the new tokens.
  void GatherRows(float* dst, const TileGroup& g, bool v, int n_prefix, int j0, int j1, int head_dim) {
    const f16_t* prefix = v ? g.v_prefix : g.k_prefix;
    const f16_t* news = v ? g.v_new : g.k_new;
    ForRows(j1 - j0, head_dim, [=, &g](int64_t t) {
      const int64_t j = j0 + t;
      const f16_t* src = j < n_prefix ? prefix + j * g.prefix_stride : news + (j - n_prefix) * g.new_stride;
      Fp16ToFp32Row(src, dst + t * head_dim, size_t(head_dim));
    });
  }

  // ForRows over the rows of x and out, both (n_rows, n_cols) row-major: fn(x_row, out_row).
  template <class Fn>
  void ForRowsOf(DevPtr<float> out, DevPtr<const float> x, int n_rows, int n_cols, Fn fn) {
    float* o = out.raw();
    const float* xs = x.raw();
    ForRows(n_rows, n_cols, [=](int64_t r) { fn(xs + r * n_cols, o + r * n_cols); });
  }

  // Runs fn(row) for rows in parallel when the work is big enough to pay for the wake-up.
  template <class Fn>
  void ForRows(int64_t n_rows, int64_t cost_per_row, Fn fn) {
    const int64_t total = n_rows * std::max<int64_t>(cost_per_row, 1);
    if (pool_.n_threads() == 1 || total < kParallelMin || n_rows < 2) {
      for (int64_t r = 0; r < n_rows; ++r) fn(r);
      return;
    }
    const int64_t n_chunks = std::min<int64_t>(n_rows, pool_.n_threads() * 4);
    const std::function<void(int64_t)> task = [&](int64_t c) {
      const int64_t b = n_rows * c / n_chunks, e = n_rows * (c + 1) / n_chunks;
      for (int64_t r = b; r < e; ++r) fn(r);
    };
    pool_.ParallelFor(n_chunks, task);
  }
  template <class Fn>
  void ForRange(size_t n, Fn fn) {
    if (pool_.n_threads() == 1 || n < size_t(kParallelMin)) {
      fn(size_t(0), n);
      return;
    }
    const int64_t n_chunks = pool_.n_threads();
    const std::function<void(int64_t)> task = [&](int64_t c) { fn(n * c / n_chunks, n * (c + 1) / n_chunks); };
    pool_.ParallelFor(n_chunks, task);
  }

  // Typed MatMul for many rows: the int8 GEMM where it has the type and path (activation rows
  // quantized once, panels of weight rows split across the pool), else tiles of W decoded to
  // fp32 and sgemm.
  void TypedGemm(int m, const quant::WeightMatrix& w, const float* x, int ldx, float beta, float* y, int ldy);
  void Int8Gemm(int m, const quant::WeightMatrix& w, const float* x, int ldx, float beta, float* y, int ldy);

  ThreadPool pool_;
  const quant::KernelPath path_ = quant::ActiveKernelPath();
  const bool int8_prefill_;
  const bool precise_q8_0_;  // CpuBackendOptions::precise_q8_0
  double flops_ = 0;
  std::vector<float> kf_, vf_, scores_;  // attention scratch (RunGroup), grown on demand
  // Decode attention: per (kv head, key block, query row) partial max, sum and value sum; the
  // raw scores when importance is wanted.
  std::vector<float> part_max_, part_sum_, part_acc_, raw_scores_;
  TileScratch tile_scratch_;                      // the tiled attention's buffers, kept between calls
  bool tiles_ = true;                             // CpuBackendOptions::tile_attention
  std::optional<quant::KernelPath> code_scores_;  // int4 records' scores' path (CpuBackendOptions); nullopt: decoded
  std::optional<quant::KernelPath> int8_scores_;  // int8 key scores' path (CpuBackendOptions); nullopt: fp32
  RopeAngleTable decode_angles_;                  // the last decode position's rotation
  RopeAngleTable batch_angles_;                   // the last batch's rotations
  TypedGemvs gemv_;                               // typed GEMV jobs (decode): their activation rows and staging
  std::vector<float> tile_;                       // decoded weight tile
  quant::GemmActivations gemm_acts_;              // int8 GEMM: the quantized activation rows
  // What gemm_acts_ holds, valid within one MatMuls call (acts_ready_).
  struct PreparedActs {
    const float* x = nullptr;
    int ldx = 0, m = 0;
    int64_t k = 0;
    bool residual = false;
    bool operator==(const PreparedActs&) const = default;
  };
  PreparedActs prepared_;
  bool acts_ready_ = false;
};

// Activation rows up to which a typed MatMul runs as GEMV (decode and small batches); beyond,
// decoding tiles to fp32 and running sgemm is faster (the decode is amortised over the rows).
constexpr int kTypedGemvRows = 4;

void CpuBackend::MatMul(int m, const WeightRef& w, DevPtr<const float> x, int ldx, float beta, DevPtr<float> y,
                        int ldy) {
  const MatMulOut o{&w, beta, y, ldy};
  MatMuls(m, x, ldx, std::span<const MatMulOut>(&o, 1));
}

void CpuBackend::MatMuls(int m, DevPtr<const float> x, int ldx, std::span<const MatMulOut> outs) {
  if (m <= 0) return;
  acts_ready_ = false;  // x may have changed since the last call
  struct Done {
    bool& ready;
    ~Done() { ready = false; }
  } done{acts_ready_};
  // Typed matrices of a few rows go to one GEMV job; the rest (fp32, or many rows) one by one.
  GemvOut gemv[TypedGemvs::kMaxOuts];
  size_t n_gemv = 0;
  for (const MatMulOut& o : outs) {
    const WeightRef& w = *o.w;
    if (w.n_rows <= 0) continue;
    if (w.ggml_type == 0) {
      Gemm(Trans::kNo, Trans::kYes, m, int(w.n_rows), int(w.n_cols), 1.0f, x, ldx,
           DevPtr<const float>(static_cast<const float*>(w.data.raw())), int(w.n_cols), o.beta, o.y, o.ldy);
      continue;
    }
    const quant::WeightMatrix wm{static_cast<quant::WeightType>(w.ggml_type), static_cast<const uint8_t*>(w.data.raw()),
                                 w.n_rows, w.n_cols};
    flops_ += 2.0 * m * double(w.n_rows) * double(w.n_cols);
    if (m <= kTypedGemvRows) {
      gemv[n_gemv++] = GemvOut{wm, o.beta, o.y.raw(), o.ldy};
      if (n_gemv == TypedGemvs::kMaxOuts) {
        gemv_.Run(pool_, path_, m, x.raw(), ldx, std::span<const GemvOut>(gemv, n_gemv), precise_q8_0_);
        n_gemv = 0;
      }
    } else {
      TypedGemm(m, wm, x.raw(), ldx, o.beta, o.y.raw(), o.ldy);
    }
  }
  if (n_gemv) gemv_.Run(pool_, path_, m, x.raw(), ldx, std::span<const GemvOut>(gemv, n_gemv), precise_q8_0_);
}

void CpuBackend::Int8Gemm(int m, const quant::WeightMatrix& w, const float* x, int ldx, float beta, float* y, int ldy) {
  const bool residual = precise_q8_0_ && w.type == quant::WeightType::kQ8_0;
  const PreparedActs want{x, ldx, m, w.n_cols, residual};
  if (!(acts_ready_ && prepared_ == want)) {  // the outputs of one MatMuls call share their input's blocks
    const Status reset = gemm_acts_.Reset(m, w.n_cols, residual, quant::GemmUsesLanes(m, path_));
    if (!reset.ok()) {  // unreachable: ValidateModel checks that rows are whole blocks
      spdlog::error("cpu backend: {}", reset.ToString());
      return;
    }
    ForRows(gemm_acts_.n_lane_groups(), 16 * w.n_cols, [&](int64_t v) { gemm_acts_.QuantizeLaneGroup(x, ldx, v); });
    prepared_ = want;
    acts_ready_ = true;
  }
  // Whole panels per task (each task packs its own panels once), a few tasks per thread.
  const int64_t n = w.n_rows, n_panels = (n + quant::kGemmPanel - 1) / quant::kGemmPanel;
  const int64_t n_chunks = pool_.n_threads() == 1 ? 1 : std::min<int64_t>(n_panels, pool_.n_threads() * 4);
  const std::function<void(int64_t)> task = [&](int64_t c) {
    const int64_t r0 = std::min(n, n_panels * c / n_chunks * quant::kGemmPanel);
    const int64_t r1 = std::min(n, n_panels * (c + 1) / n_chunks * quant::kGemmPanel);
    const Status st = quant::GemmRows(w, gemm_acts_, r0, r1, beta, y, ldy, path_);
    if (!st.ok()) spdlog::error("cpu backend: {}", st.ToString());
  };
  if (n_chunks <= 1) {
    task(0);
  } else {
    pool_.ParallelFor(n_chunks, task);
  }
}

void CpuBackend::TypedGemm(int m, const quant::WeightMatrix& w, const float* x, int ldx, float beta, float* y,
                           int ldy) {
  // The scalar GEMM is the reference, slower than decoding to fp32 for sgemm.
  if (int8_prefill_ && path_ != quant::KernelPath::kScalar && quant::GemmSupports(w.type, path_)) {
    Int8Gemm(m, w, x, ldx, beta, y, ldy);
    return;
  }
  const int64_t n = w.n_rows, k = w.n_cols, row_bytes = w.RowBytes();
  // About 4 MiB of fp32 weights a tile: large enough that sgemm runs at full rate, small
  // enough that the tile stays in the last-level cache between its decode and its use.
  const int64_t tile = std::clamp<int64_t>(((int64_t(4) << 20) / (k * 4)) / 16 * 16, 16, n);
  tile_.resize(size_t(tile * k));
  float* t = tile_.data();
  for (int64_t r0 = 0; r0 < n; r0 += tile) {
    const int64_t nr = std::min(tile, n - r0);
    ForRows(nr, k, [&](int64_t r) { quant::DequantizeRow(w.type, w.data + (r0 + r) * row_bytes, t + r * k, k); });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, int(nr), int(k), 1.0f, x, ldx, t, int(k), beta, y + r0,
                ldy);
  }
}

void CpuBackend::GetWeightRows(DevPtr<float> out, const WeightRef& w, DevPtr<const int32_t> ids, int n_rows) {
  const int64_t k = w.n_cols;
  const int32_t* id = ids.raw();
  if (w.ggml_type == 0) {
    GetRows(out, DevPtr<const float>(static_cast<const float*>(w.data.raw())), ids, n_rows, int(k));
    return;
  }
  const quant::WeightMatrix wm{static_cast<quant::WeightType>(w.ggml_type), static_cast<const uint8_t*>(w.data.raw()),
                               w.n_rows, w.n_cols};
  const int64_t row_bytes = wm.RowBytes();
  float* o = out.raw();
  ForRows(n_rows, k, [&](int64_t r) { quant::DequantizeRow(wm.type, wm.data + id[r] * row_bytes, o + r * k, k); });
}

// Flash-decoding: for each key block b and kv head g, a task keeps, per query row of g's heads,
// the block's largest score, its sum of exp(score - max) and the value sum weighted by those;
// the merge rescales every block to the row's global max. Exact softmax, any split. A task is
// one key block for every kv head: the rows of all heads of a token sit together, so each task
// streams one contiguous stretch of the cache.
void CpuBackend::DirectAttention(const AttentionArgs& a, const std::vector<float*>& imp_row) {
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv, n_new = a.n_new, n_prefix = a.n_prefix;
  const int n_keys = n_prefix + n_new, n_kv = a.n_head_kv;
  // Blocks of at most kMaxBlock keys (the per-task score buffer), at least kMinBlock when split.
  constexpr int kMaxBlock = 1024, kMinBlock = 256;
  const int64_t work = int64_t(n_keys) * a.n_head * hd * n_new;
  const int want_tasks = (pool_.n_threads() == 1 || work < 200000) ? 1 : pool_.n_threads() * 4;
  const int n_blocks =
      std::max({1, (n_keys + kMaxBlock - 1) / kMaxBlock, std::min(want_tasks, (n_keys + kMinBlock - 1) / kMinBlock)});
  const int rows = group * n_new;  // query rows per kv head: x * n_new + i
  const size_t n_part = size_t(n_kv) * n_blocks * rows;
  part_max_.resize(n_part);
  part_sum_.resize(n_part);
  part_acc_.resize(n_part * size_t(hd));
  bool any_importance = false;
  for (float* p : imp_row) any_importance |= p != nullptr;
  if (any_importance) raw_scores_.resize(size_t(a.n_head) * n_new * n_keys);
  const int ld_q = a.n_head * hd;
  const int64_t stride = int64_t(n_kv) * hd;
  const std::function<void(int64_t)> task = [&](int64_t b) {
    const int j0 = int(int64_t(n_keys) * b / n_blocks), j1 = int(int64_t(n_keys) * (b + 1) / n_blocks);
    // Scores of every head of the group (x * kLd + j). The row stride is not a multiple of
    // 4 KiB, so the heads' stores do not alias in the caches.
    constexpr int kLd = kMaxBlock + 16;
    alignas(32) float s[kDirectRows * kLd];
    for (int g = 0; g < n_kv; ++g) {
      const size_t t = size_t(g) * n_blocks + size_t(b);
      // Keys [j0, j0 + n) as runs of equal stride: the prefix part, then the new tokens.
      auto for_runs = [&](int n, const f16_t* prefix, const f16_t* fresh, auto&& fn) {
        const int n_pre = std::clamp(n_prefix - j0, 0, n);
        if (n_pre > 0) fn(0, prefix + (int64_t(j0) * n_kv + g) * hd, n_pre);
        if (n > n_pre) fn(n_pre, fresh + (int64_t(j0 + n_pre - n_prefix) * n_kv + g) * hd, n - n_pre);
      };
      for (int i = 0; i < n_new; ++i) {
        const int jend = std::min(j1, n_prefix + i + 1);  // causal among the new tokens
        const int n = std::max(0, jend - j0);
        const float* q0 = a.q.raw() + int64_t(i) * ld_q + int64_t(g) * group * hd;  // the group's heads, adjacent
        for_runs(n, a.k_prefix.raw(), a.k_new.raw(), [&](int off, const f16_t* k, int len) {
          DecodeScores(q0, group, hd, a.scale, k, stride, len, s + off, kLd);
        });
        float* accs[kDirectRows];
        for (int x = 0; x < group; ++x) {
          const int h = g * group + x;
          const size_t idx = t * rows + size_t(x) * n_new + i;
          accs[x] = part_acc_.data() + idx * hd;
          std::fill(accs[x], accs[x] + hd, 0.0f);
          if (n == 0) {
            part_max_[idx] = -INFINITY;
            part_sum_[idx] = 0;
            continue;
          }
          float* sx = s + x * kLd;
          if (any_importance && imp_row[h])
            std::memcpy(raw_scores_.data() + (size_t(h) * n_new + i) * n_keys + j0, sx, sizeof(float) * n);
          float sum = 0;
          part_max_[idx] = TileExpShift(sx, n, sx, &sum);
          part_sum_[idx] = sum;
        }
        for_runs(n, a.v_prefix.raw(), a.v_new.raw(), [&](int off, const f16_t* v, int len) {
          DecodeWeightedValues(accs, group, hd, s + off, kLd, v, stride, len);
        });
      }
    }
  };
  if (n_blocks == 1) {
    task(0);
  } else {
    pool_.ParallelFor(n_blocks, task);
  }
  // Merge the blocks of each (head, row); importance from the kept raw scores.
  for (int g = 0; g < n_kv; ++g) {
    for (int r = 0; r < rows; ++r) {
      const int x = r / n_new, i = r % n_new, h = g * group + x;
      float mx = -INFINITY;
      for (int b = 0; b < n_blocks; ++b) mx = std::max(mx, part_max_[(size_t(g) * n_blocks + b) * rows + r]);
      float total = 0;
      float* out = a.out.raw() + int64_t(i) * ld_q + int64_t(h) * hd;
      std::fill(out, out + hd, 0.0f);
      for (int b = 0; b < n_blocks; ++b) {
        const size_t idx = (size_t(g) * n_blocks + b) * rows + r;
        if (part_sum_[idx] == 0) continue;
        const float w = std::exp(part_max_[idx] - mx);
        total += part_sum_[idx] * w;
        const float* acc = part_acc_.data() + idx * hd;
        for (int c = 0; c < hd; ++c) out[c] += w * acc[c];
      }
      const float inv = 1.0f / total;
      for (int c = 0; c < hd; ++c) out[c] *= inv;
      if (float* imp = imp_row[h]) {
        const int n_valid = n_prefix + i + 1;
        const int n_cols = a.importance_include_new ? n_valid : std::min(n_valid, n_prefix);
        const float* raw = raw_scores_.data() + (size_t(h) * n_new + i) * n_keys;
        for (int j = 0; j < n_cols; ++j) imp[j] += std::exp(raw[j] - mx) * inv;
      }
    }
  }
}

void CpuBackend::RunGroup(const float* q, int ldq, int n_new, int hd, float scale, const TileGroup& grp, int n_prefix,
                          float* out, int ldo, bool imp_include_new) {
  const int n_keys = n_prefix + n_new;
  const std::vector<TileHead>& heads = grp.heads;
  const int n_heads = static_cast<int>(heads.size());
  // Token blocks bound the score matrix (4 MiB, a long prefill's peak RSS) and skip masked columns.
  const int64_t budget = int64_t(1) << 20;
  const int tb = static_cast<int>(std::clamp<int64_t>(budget / (int64_t(n_heads) * n_keys), 1, 128));
  scores_.resize(size_t(std::min(tb, n_new)) * n_heads * n_keys);
  bool any_importance = false;
  for (const auto& h : heads) any_importance |= h.importance != nullptr;
  // fp32 keys and values: all, converted once, up to kGatherKeys; beyond, chunks of that many
  // rows, converted again for each block of query rows (an 8K context: 1 MiB each, not 2).
  const bool whole = n_keys <= kGatherKeys;
  const int chunk = whole ? n_keys : kGatherKeys;
  kf_.resize(size_t(chunk) * hd);
  if (out) vf_.resize(size_t(chunk) * hd);
  if (whole) {
    GatherRows(kf_.data(), grp, false, n_prefix, 0, n_keys, hd);
    if (out) GatherRows(vf_.data(), grp, true, n_prefix, 0, n_keys, hd);
  }

  for (int i0 = 0; i0 < n_new; i0 += tb) {
    const int i1 = std::min(n_new, i0 + tb), nb = i1 - i0;
    const int n_eff = n_prefix + i1;  // keys any row of this block may see
    // S_h (nb, n_eff) = scale * Q_h K^T, a chunk of keys (columns) at a time
    for (int c0 = 0; c0 < n_eff; c0 += chunk) {
      const int nc = std::min(n_eff - c0, chunk);
      if (!whole) GatherRows(kf_.data(), grp, false, n_prefix, c0, c0 + nc, hd);
      for (int x = 0; x < n_heads; ++x) {
        float* s = scores_.data() + size_t(x) * nb * n_eff + c0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nc, hd, scale,
                    q + int64_t(i0) * ldq + int64_t(heads[x].head) * hd, ldq, kf_.data(), hd, 0.0f, s, n_eff);
      }
    }
    flops_ += 2.0 * n_heads * nb * n_eff * hd;
    // Row softmax; row (x, r) sees the prefix and new tokens 0..i0+r.
    float* sbase = scores_.data();
    ForRows(int64_t(n_heads) * nb, n_eff * 4, [=](int64_t row) {
      const int r = static_cast<int>(row % nb);
      SoftmaxRow(sbase + row * n_eff, n_prefix + i0 + r + 1, n_eff);
    });
    // Importance: column sums over the block's rows.
    if (any_importance) {
      const int n_cols = imp_include_new ? n_eff : n_prefix;
      const int64_t n_col_chunks = (n_cols + 255) / 256;
      ForRows(n_col_chunks, int64_t(nb) * 256 * n_heads, [&](int64_t cc) {
        const int c0 = static_cast<int>(cc * 256), c1 = std::min(n_cols, c0 + 256);
        for (int x = 0; x < n_heads; ++x) {
          float* imp = heads[x].importance;
          if (!imp) continue;
          const float* s = sbase + size_t(x) * nb * n_eff;
          for (int r = 0; r < nb; ++r) {
            const float* srow = s + int64_t(r) * n_eff;
            for (int c = c0; c < c1; ++c) imp[c] += srow[c];
          }
        }
      });
    }
    // O_h (nb, hd) = P_h V, summed over the chunks of values
    if (out) {
      for (int c0 = 0; c0 < n_eff; c0 += chunk) {
        const int nc = std::min(n_eff - c0, chunk);
        if (!whole) GatherRows(vf_.data(), grp, true, n_prefix, c0, c0 + nc, hd);
        for (int x = 0; x < n_heads; ++x) {
          const float* p = scores_.data() + size_t(x) * nb * n_eff + c0;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, hd, nc, 1.0f, p, n_eff, vf_.data(), hd,
                      c0 ? 1.0f : 0.0f, out + int64_t(i0) * ldo + int64_t(heads[x].head) * hd, ldo);
        }
      }
      flops_ += 2.0 * n_heads * nb * n_eff * hd;
    }
  }
}

Status CpuBackend::Attention(const AttentionArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckAttentionArgs(a));
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int n_keys = a.n_prefix + a.n_new;
  const int n_imp = static_cast<int>(a.importance_heads.size());
  const int ld_imp = a.importance_include_new ? n_keys : a.n_prefix;
  std::vector<float*> imp_row(a.n_head, nullptr);
  if (n_imp > 0 && ld_imp > 0) {
    std::memset(a.importance.raw(), 0, sizeof(float) * size_t(n_imp) * ld_imp);
    for (int x = 0; x < n_imp; ++x) imp_row[a.importance_heads[x]] = a.importance.raw() + int64_t(x) * ld_imp;
  }
  const bool tiled_question = tiles_ && a.n_new * group > kDirectRows && TileAttentionFits(a.n_new * group, hd);
  if (!AwaitPrefixRows(a.prefix_arrivals, tiled_question, a.n_head_kv * TileBlocks(n_keys), pool_.n_threads()))
    return PrefixRowsMissing();
  if (a.n_new * group <= kDirectRows) {
    DirectAttention(a, imp_row);
    flops_ += 4.0 * a.n_head * a.n_new * n_keys * hd;
    return Status::Ok();
  }
  TileAttentionArgs t = TileArgs(a, a.out.raw());
  t.n_prefix = a.n_prefix;
  const int64_t stride = int64_t(a.n_head_kv) * hd;
  for (int g = 0; g < a.n_head_kv; ++g) {
    TileGroup grp;
    grp.k_prefix = a.n_prefix > 0 ? a.k_prefix.raw() + g * hd : nullptr;
    grp.v_prefix = a.n_prefix > 0 ? a.v_prefix.raw() + g * hd : nullptr;
    grp.prefix_stride = stride;
    grp.k_new = a.k_new.raw() + g * hd;
    grp.v_new = a.v_new.raw() + g * hd;
    grp.new_stride = stride;
    for (int h = g * group; h < (g + 1) * group; ++h) grp.heads.push_back({h, imp_row[h]});
    t.groups.push_back(std::move(grp));
  }
  t.importance_include_new = a.importance_include_new;
  t.importance_from = a.importance_from;
  if (tiled_question) {
    // A question over a prefix: blocked tiles, fp16 K/V converted once per block.
    t.prefix_arrivals = a.prefix_arrivals;
    if (!TileAttention(t, tile_scratch_, TileParallel())) return PrefixRowsMissing();
    flops_ += 4.0 * a.n_head * a.n_new * n_keys * hd;
    return Status::Ok();
  }
  if (tiles_ && TileAttentionFits(group, hd)) {
    // A prefill: slices of query rows, each the tiled attention over all the keys it may see
    // (flash attention), so memory stays at a slice's parts however long the context. Faster
    // than sgemm over fp32 copies at every length measured (SmolLM2, 512 and 4,096 tokens: 1.4x
    // and 1.5x on AVX-512, 1.3x and 1.2x on AVX2).
    const int slice = std::max(1, kTileMaxRows / group);
    for (int i0 = 0; i0 < a.n_new; i0 += slice) {
      TileAttentionArgs s = t;
      s.q_first = i0;
      s.n_new = std::min(slice, a.n_new - i0);
      s.q = t.q + int64_t(i0) * t.ldq;
      s.out = t.out + int64_t(i0) * t.ldo;
      TileAttention(s, tile_scratch_, TileParallel());
      flops_ += 4.0 * a.n_head * s.n_new * (a.n_prefix + i0 + s.n_new) * hd;
    }
    return Status::Ok();
  }
  for (const TileGroup& grp : t.groups)
    RunGroup(t.q, t.ldq, a.n_new, hd, a.scale, grp, a.n_prefix, t.out, t.ldo, a.importance_include_new);
  return Status::Ok();
}

Status CpuBackend::ScoreKeys(const ScoreKeysArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckScoreKeysArgs(a));
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv;
  const int n_keys = a.n_prefix + a.n_new;
  const int n_q = static_cast<int>(a.query_heads.size());
  const int n_slots = static_cast<int>(a.prefix_kv_heads.size());
  if (n_q == 0 || a.n_prefix == 0) return Status::Ok();
  std::memset(a.importance.raw(), 0, sizeof(float) * size_t(n_q) * a.n_prefix);
  // The tiled path when every slot's heads fit (the probe: a few heads, a question's tokens).
  TileAttentionArgs t = TileArgs(a, nullptr);
  t.n_prefix = a.n_prefix;
  bool fits = true;
  for (int s = 0; s < n_slots; ++s) {
    const int g = a.prefix_kv_heads[s];
    TileGroup grp;
    if (a.code_bits) {
      grp.k_codes = a.key_codes;
      grp.code_bits = a.code_bits;
      grp.code_head = s;
      grp.code_heads = n_slots;
      grp.code_record_bytes = int64_t(CodedRecordBytes(a.code_bits, n_slots, hd));
    } else {
      grp.k_prefix = a.k_prefix.raw() + s * hd;
    }
    grp.prefix_stride = int64_t(n_slots) * hd;
    grp.k_new = a.k_new.raw() + g * hd;
    grp.new_stride = int64_t(a.n_head_kv) * hd;
    for (int x = 0; x < n_q; ++x)
      if (a.query_heads[x] / group == g)
        grp.heads.push_back({a.query_heads[x], a.importance.raw() + int64_t(x) * a.n_prefix});
    fits = fits && TileAttentionFits(int(grp.heads.size()) * a.n_new, hd);
    if (!grp.heads.empty()) t.groups.push_back(std::move(grp));
  }
  if (tiles_ && fits) {
    t.int8_scores = int8_scores_;
    if (a.code_bits == 4) t.int4_code_scores = code_scores_;
    TileAttention(t, tile_scratch_, TileParallel());
    flops_ += 2.0 * n_q * a.n_new * n_keys * hd;
    return Status::Ok();
  }
  // The untiled path reads fp16 keys: codes are decoded for it first.
  std::vector<f16_t> decoded;
  if (a.code_bits) {
    const size_t rec = CodedRecordBytes(a.code_bits, n_slots, hd);
    decoded.resize(size_t(a.n_prefix) * n_slots * hd);
    for (int j = 0; j < a.n_prefix; ++j)
      for (int s = 0; s < n_slots; ++s)
        DecodeRecordHead(a.code_bits, a.key_codes + size_t(j) * rec, n_slots, hd, s,
                         decoded.data() + (size_t(j) * n_slots + s) * hd);
    for (size_t x = 0; x < t.groups.size(); ++x) {
      t.groups[x].k_prefix = decoded.data() + int64_t(t.groups[x].code_head) * hd;
      t.groups[x].k_codes = nullptr;
    }
  }
  for (const TileGroup& grp : t.groups) RunGroup(t.q, t.ldq, a.n_new, hd, a.scale, grp, a.n_prefix, nullptr, 0, false);
  return Status::Ok();
}

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace impress
