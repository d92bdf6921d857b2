// CudaBackend: see cuda-backend.h. Host code (compiled by the C++ compiler); the kernels are in
// cuda-kernels.cu, the attention plan in cuda-plan.h.
#include "engine/compute/cuda/cuda-backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <vector>

#include "engine/compute/cuda/cuda-kernels.h"
#include "engine/compute/cuda/cuda-plan.h"
#include "engine/compute/cuda/cuda-util.h"

namespace impress {

using cuda::BlasError;
using cuda::CudaError;

bool CudaBuildEnabled() { return true; }

Result<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return Status::NotFound(
        fmt::format("no CUDA device found (cudaGetDeviceCount: {}: {})", cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  if (n <= 0) return Status::NotFound("no CUDA device found (cudaGetDeviceCount: 0 devices)");
  return n;
}

Result<std::string> CudaDeviceDescription(int device) {
  IMPRESS_ASSIGN_OR_RETURN(int n, CudaDeviceCount());
  if (device < 0 || device >= n)
    return Status::InvalidArgument(fmt::format("CUDA device {} does not exist ({} found)", device, n));
  cudaDeviceProp p{};
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"));
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     double(p.totalGlobalMem) / double(1ull << 30));
}

namespace {

constexpr size_t kMinBlock = 512;

// Pool size classes: 4 per power of two (<= 25% slack), 2 MiB granularity above 64 MiB.
size_t RoundBlock(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes >= (size_t(64) << 20)) return (bytes + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
  int lg = 0;
  while ((size_t(1) << (lg + 1)) <= bytes) ++lg;
  const size_t step = size_t(1) << (lg - 2);
  return (bytes + step - 1) / step * step;
}

// Runs the attention plan's bodies as kernels on one stream.
struct DeviceRunner {
  cudaStream_t st;
  int RowPass(const cuda::RowPassBody& b, int n_row_tiles, int n_groups) {
    return int(cuda::LaunchRowPass(st, b, n_row_tiles, n_groups));
  }
  int Combine(const cuda::CombineBody& b, int64_t n) { return int(cuda::LaunchCombine(st, b, n)); }
  int Importance(const cuda::ImportanceBody& b, int n_heads) { return int(cuda::LaunchImportance(st, b, n_heads)); }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, CudaGemmPrecision gemm) : device_(device), gemm_(gemm) {}
  ~CudaBackend() override;

  Status Init();
  const Status& status() const { return status_; }

  std::string Name() const override {
    return fmt::format("cuda ({}, GEMM {})", description_, CudaGemmPrecisionName(gemm_));
  }

  Result<DevPtr<void>> Alloc(size_t bytes) override;
  void Free(DevPtr<void> p) override;
  Result<DevPtr<const float>> MapConstant(const float* host, size_t n) override;
  void ReleaseConstant(DevPtr<const float> p) override;
  void CopyToDevice(DevPtr<void> dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, DevPtr<const void> src, size_t bytes) override;
  void CopyDevice(DevPtr<void> dst, DevPtr<const void> src, size_t bytes) override;
  void Synchronize() override;

  void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, DevPtr<const float> a, int lda, DevPtr<const float> b,
            int ldb, float beta, DevPtr<float> c, int ldc) override;
  void RmsNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, int n_rows, int n_cols,
               float eps) override {
    if (!Enter() || n_rows <= 0) return;
    Check(cuda::LaunchRmsNorm(stream_, out.raw(), x.raw(), w.raw(), n_rows, n_cols, eps), "RmsNorm kernel");
  }
  void LayerNorm(DevPtr<float> out, DevPtr<const float> x, DevPtr<const float> w, DevPtr<const float> b, int n_rows,
                 int n_cols, float eps) override {
    if (!Enter() || n_rows <= 0) return;
    Check(cuda::LaunchLayerNorm(stream_, out.raw(), x.raw(), w.raw(), b.raw(), n_rows, n_cols, eps),
          "LayerNorm kernel");
  }
  void Rope(const RopeArgs& a) override {
    if (!Enter() || a.n_tok <= 0) return;
    Check(cuda::LaunchRope(
              stream_, cuda::RopeBody{a.x.raw(), a.positions.raw(), a.inv_freq.raw(), a.n_tok, a.n_heads, a.head_dim}),
          "Rope kernel");
  }
  void SwiGlu(DevPtr<float> out, DevPtr<const float> gate, DevPtr<const float> up, int n_rows, int n_cols,
              int ld) override {
    if (!Enter()) return;
    Check(cuda::LaunchSwiGlu(stream_, cuda::SwiGluBody{out.raw(), gate.raw(), up.raw(), n_cols, ld},
                             int64_t(n_rows) * n_cols),
          "SwiGlu kernel");
  }
  void Relu(DevPtr<float> x, size_t n) override {
    if (!Enter()) return;
    Check(cuda::LaunchRelu(stream_, x.raw(), int64_t(n)), "Relu kernel");
  }
  void Add(DevPtr<float> x, DevPtr<const float> y, size_t n) override {
    if (!Enter()) return;
    Check(cuda::LaunchAdd(stream_, x.raw(), y.raw(), int64_t(n)), "Add kernel");
  }
  void AddBias(DevPtr<float> x, DevPtr<const float> bias, int n_rows, int n_cols, int ld) override {
    if (!Enter()) return;
    Check(cuda::LaunchAddBias(stream_, cuda::AddBiasBody{x.raw(), bias.raw(), n_cols, ld}, int64_t(n_rows) * n_cols),
          "AddBias kernel");
  }
  void GetRows(DevPtr<float> out, DevPtr<const float> table, DevPtr<const int32_t> ids, int n_rows,
               int n_cols) override {
    if (!Enter()) return;
    Check(cuda::LaunchGetRows(stream_, cuda::GetRowsBody{out.raw(), table.raw(), ids.raw(), n_cols},
                              int64_t(n_rows) * n_cols),
          "GetRows kernel");
  }
  void ToF16(DevPtr<f16_t> dst, int ld_dst, DevPtr<const float> src, int ld_src, int n_rows, int n_cols) override {
    if (!Enter()) return;
    Check(cuda::LaunchToHalf(stream_, cuda::ToHalfBody{dst.raw(), src.raw(), n_cols, ld_dst, ld_src, false},
                             int64_t(n_rows) * n_cols),
          "ToF16 kernel");
  }

  Status Attention(const AttentionArgs& a) override;
  Status ScoreKeys(const ScoreKeysArgs& a) override;

  double Flops() const override { return flops_; }
  void ResetFlops() override { flops_ = 0; }

 private:
  // Makes the device current on this thread; false when the backend has failed.
  bool Enter() {
    if (!status_.ok()) return false;
    if (device_ != 0) return Check(cudaSetDevice(device_), "cudaSetDevice");
    return true;
  }
  // Records the first failure (sticky) and logs it; true when e is success.
  bool Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    Fail(CudaError(e, what));
    return false;
  }
  bool CheckBlas(cublasStatus_t e, const char* what) {
    if (e == CUBLAS_STATUS_SUCCESS) return true;
    Fail(BlasError(e, what));
    return false;
  }
  void Fail(Status st) {
    if (!status_.ok()) return;
    spdlog::error("cuda backend failed: {}", st.ToString());
    status_ = Status(st.code(), "cuda backend: " + st.message());
  }

  // Grows a scratch buffer (pool memory, stream-ordered reuse) to at least `bytes`.
  template <class T>
  Result<T*> Scratch(DevPtr<void>& buf, size_t& cap, size_t count) {
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    if (cap < bytes) {
      if (buf) Free(buf);
      buf = DevPtr<void>();
      cap = 0;
      IMPRESS_ASSIGN_OR_RETURN(buf, Alloc(bytes + bytes / 2));
      cap = bytes + bytes / 2;
    }
    return static_cast<T*>(buf.raw());
  }
  Result<const int*> UploadInts(const std::vector<int>& v);
  void ReleaseCache();

  // A mapped constant: fp32 copy, plus a half copy for GEMMs made on first use.
  struct Constant {
    size_t n = 0;
    void* low = nullptr;
  };
  // The half copy of the constant containing [p, p + extent) floats, or null.
  const void* LowCopyOf(const float* p, size_t extent);
  // op(X) of a GEMM in half precision: the weight's copy or the activation converted into
  // `scratch`; ld_out gets its leading dimension.
  const void* LowOperand(const float* p, int rows, int cols, int ld, int slot, int* ld_out);

  const int device_;
  const CudaGemmPrecision gemm_;
  std::string description_;
  int n_sm_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Status status_;
  double flops_ = 0;

  std::unordered_map<void*, size_t> live_;                 // pool blocks in use -> size
  std::unordered_map<size_t, std::vector<void*>> cached_;  // free pool blocks by size
  size_t cached_bytes_ = 0;
  std::map<const float*, Constant> constants_;  // fp32 device address -> constant

  DevPtr<void> f32_scratch_, int_scratch_, low_scratch_[2];
  size_t f32_cap_ = 0, int_cap_ = 0, low_cap_[2] = {0, 0};
};

Status CudaBackend::Init() {
  IMPRESS_ASSIGN_OR_RETURN(int n, CudaDeviceCount());
  if (device_ < 0 || device_ >= n)
    return Status::InvalidArgument(fmt::format("CUDA device {} does not exist ({} found)", device_, n));
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaSetDevice(device_), "cudaSetDevice"));
  IMPRESS_ASSIGN_OR_RETURN(description_, CudaDeviceDescription(device_));
  IMPRESS_RETURN_IF_ERROR(
      CudaError(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute"));
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  IMPRESS_RETURN_IF_ERROR(BlasError(cublasCreate(&blas_), "cublasCreate"));
  IMPRESS_RETURN_IF_ERROR(BlasError(cublasSetStream(blas_, stream_), "cublasSetStream"));
  IMPRESS_RETURN_IF_ERROR(BlasError(
      cublasSetMathMode(blas_, gemm_ == CudaGemmPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
      "cublasSetMathMode"));
  spdlog::info("cuda backend: {}, GEMM {}", description_, CudaGemmPrecisionName(gemm_));
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  if (device_ != 0) cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [p, c] : constants_) {
    cudaFree(const_cast<float*>(p));
    if (c.low) cudaFree(c.low);
  }
  for (auto& [p, n] : live_) cudaFree(p);
  ReleaseCache();
  if (blas_) cublasDestroy(blas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::ReleaseCache() {
  for (auto& [size, blocks] : cached_)
    for (void* p : blocks) cudaFree(p);
  cached_.clear();
  cached_bytes_ = 0;
}

Result<DevPtr<void>> CudaBackend::Alloc(size_t bytes) {
  if (!Enter()) return status_;
  const size_t size = RoundBlock(bytes);
  auto it = cached_.find(size);
  if (it != cached_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
    live_[p] = size;
    return DevPtr<void>(p);
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it, drop the cache and retry once
    ReleaseCache();
    e = cudaMalloc(&p, size);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status::ResourceExhausted(
        fmt::format("cuda backend: cudaMalloc({} bytes): out of memory ({:.0f} of {:.0f} MiB free)", size,
                    free_b / 1048576.0, total_b / 1048576.0));
  }
  if (!Check(e, "cudaMalloc")) return status_;
  live_[p] = size;
  return DevPtr<void>(p);
}

void CudaBackend::Free(DevPtr<void> p) {
  if (!p) return;
  auto it = live_.find(p.raw());
  if (it == live_.end()) {
    spdlog::error("cuda backend: Free of an address it did not allocate ({})", p.raw());
    return;
  }
  // Later ops reuse the block in stream order, after the ops issued before this Free.
  cached_[it->second].push_back(it->first);
  cached_bytes_ += it->second;
  live_.erase(it);
}

Result<DevPtr<const float>> CudaBackend::MapConstant(const float* host, size_t n) {
  if (!Enter()) return status_;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ReleaseCache();
    e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return Status::ResourceExhausted(
        fmt::format("cuda backend: cudaMalloc for a weight of {} floats: out of memory", n));
  }
  if (!Check(e, "cudaMalloc")) return status_;
  if (n && !Check(cudaMemcpyAsync(p, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_),
                  "cudaMemcpyAsync (weight upload)"))
    return status_;
  constants_[static_cast<const float*>(p)] = Constant{n, nullptr};
  return DevPtr<const float>(static_cast<const float*>(p));
}

void CudaBackend::ReleaseConstant(DevPtr<const float> p) {
  auto it = constants_.find(p.raw());
  if (it == constants_.end()) {
    if (p) spdlog::error("cuda backend: ReleaseConstant of an unknown address ({})", static_cast<const void*>(p.raw()));
    return;
  }
  if (device_ != 0) cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);  // cudaFree would wait anyway; make the order explicit
  cudaFree(const_cast<float*>(it->first));
  if (it->second.low) cudaFree(it->second.low);
  constants_.erase(it);
}

void CudaBackend::CopyToDevice(DevPtr<void> dst, const void* src, size_t bytes) {
  if (!Enter() || bytes == 0) return;
  // From pageable memory the source is staged before this returns, so callers may reuse it.
  Check(cudaMemcpyAsync(dst.raw(), src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (to device)");
}

void CudaBackend::CopyToHost(void* dst, DevPtr<const void> src, size_t bytes) {
  if (!Enter() || bytes == 0) return;
  if (Check(cudaMemcpyAsync(dst, src.raw(), bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (to host)"))
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (after a copy to host)");
}

void CudaBackend::CopyDevice(DevPtr<void> dst, DevPtr<const void> src, size_t bytes) {
  if (!Enter() || bytes == 0) return;
  Check(cudaMemcpyAsync(dst.raw(), src.raw(), bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (device)");
}

void CudaBackend::Synchronize() {
  if (!Enter()) return;
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

const void* CudaBackend::LowCopyOf(const float* p, size_t extent) {
  auto it = constants_.upper_bound(p);
  if (it == constants_.begin()) return nullptr;
  --it;
  const size_t off = size_t(p - it->first);
  Constant& c = it->second;
  if (p < it->first || off >= c.n || extent > c.n - off) return nullptr;
  if (!c.low) {
    void* low = nullptr;
    const cudaError_t e = cudaMalloc(&low, c.n * sizeof(uint16_t));
    if (e != cudaSuccess) {
      cudaGetLastError();
      spdlog::warn("cuda backend: no memory for a half copy of a weight ({} values); using fp32 GEMM", c.n);
      return nullptr;
    }
    const bool bf16 = gemm_ == CudaGemmPrecision::kBf16;
    if (!Check(cuda::LaunchToHalf(stream_, cuda::ToHalfBody{static_cast<uint16_t*>(low), it->first, 1, 1, 1, bf16},
                                  int64_t(c.n)),
               "ToHalf kernel (weight copy)")) {
      cudaFree(low);
      return nullptr;
    }
    c.low = low;
  }
  return static_cast<const uint16_t*>(c.low) + off;
}

const void* CudaBackend::LowOperand(const float* p, int rows, int cols, int ld, int slot, int* ld_out) {
  *ld_out = ld;
  const size_t extent = size_t(rows - 1) * ld + cols;
  if (const void* w = LowCopyOf(p, extent)) return w;
  auto buf = Scratch<uint16_t>(low_scratch_[slot], low_cap_[slot], size_t(rows) * cols);
  if (!buf.ok()) {
    Fail(buf.status());
    return nullptr;
  }
  const bool bf16 = gemm_ == CudaGemmPrecision::kBf16;
  if (!Check(cuda::LaunchToHalf(stream_, cuda::ToHalfBody{*buf, p, cols, cols, ld, bf16}, int64_t(rows) * cols),
             "ToHalf kernel (GEMM operand)"))
    return nullptr;
  *ld_out = cols;
  return *buf;
}

void CudaBackend::Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, DevPtr<const float> a, int lda,
                       DevPtr<const float> b, int ldb, float beta, DevPtr<float> c, int ldc) {
  if (!Enter() || m <= 0 || n <= 0) return;
  flops_ += 2.0 * m * n * k;
  const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
  const cuda::ColMajorGemm g = cuda::MapRowMajorGemm(at, bt, m, n, k, lda, ldb, ldc);
  const cublasOperation_t op_first = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool low = gemm_ == CudaGemmPrecision::kF16 || gemm_ == CudaGemmPrecision::kBf16;
  if (low && k > 0) {
    // Stored shapes (row-major): A is (at ? k : m, at ? m : k), B is (bt ? n : k, bt ? k : n).
    const size_t a_extent = size_t((at ? k : m) - 1) * lda + (at ? m : k);
    const size_t b_extent = size_t((bt ? n : k) - 1) * ldb + (bt ? k : n);
    if (LowCopyOf(a.raw(), a_extent) || LowCopyOf(b.raw(), b_extent)) {
      int lda_low = 0, ldb_low = 0;
      const void* b_low = LowOperand(b.raw(), bt ? n : k, bt ? k : n, ldb, 0, &ldb_low);
      const void* a_low = b_low ? LowOperand(a.raw(), at ? k : m, at ? m : k, lda, 1, &lda_low) : nullptr;
      if (!status_.ok()) return;
      if (a_low && b_low) {
        const cudaDataType_t t = gemm_ == CudaGemmPrecision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
        CheckBlas(cublasGemmEx(blas_, op_first, op_second, g.m, g.n, g.k, &alpha, b_low, t, ldb_low, a_low, t, lda_low,
                               &beta, c.raw(), CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
        return;
      }
    }
  }
  CheckBlas(cublasSgemm(blas_, op_first, op_second, g.m, g.n, g.k, &alpha, b.raw(), g.ld_first, a.raw(), g.ld_second,
                        &beta, c.raw(), g.ldc),
            "cublasSgemm");
}

Result<const int*> CudaBackend::UploadInts(const std::vector<int>& v) {
  IMPRESS_ASSIGN_OR_RETURN(int* p, Scratch<int>(int_scratch_, int_cap_, v.size()));
  if (!v.empty() && !Check(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpyAsync (head lists)"))
    return status_;
  return static_cast<const int*>(p);
}

Status CudaBackend::Attention(const AttentionArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckAttentionArgs(a));
  if (a.prefix_arrivals && !a.prefix_arrivals->WaitAll()) return PrefixRowsMissing();
  if (!Enter()) return status_;
  if (a.head_dim > cuda::kMaxHeadDim)
    return Status::Unsupported(
        fmt::format("cuda backend: attention with head_dim {} (at most {})", a.head_dim, cuda::kMaxHeadDim));
  const int hd = a.head_dim, group = a.n_head / a.n_head_kv, n_keys = a.n_prefix + a.n_new;
  const int n_split = cuda::ChooseSplit(cuda::RowTiles(a.n_new * group) * a.n_head_kv, n_keys, hd, n_sm_);
  const cuda::AttnScratchSize z = cuda::ScratchFor(a.n_head, a.n_new, hd, n_split, true);
  IMPRESS_ASSIGN_OR_RETURN(float* f,
                           Scratch<float>(f32_scratch_, f32_cap_, 2 * z.row_floats + 2 * z.part_floats + z.o_floats));
  const cuda::AttnScratch sc{f, f + z.row_floats, f + 2 * z.row_floats, f + 2 * z.row_floats + z.part_floats,
                             f + 2 * z.row_floats + 2 * z.part_floats};
  const std::vector<int> heads(a.importance_heads.begin(), a.importance_heads.end());
  IMPRESS_ASSIGN_OR_RETURN(const int* heads_dev, UploadInts(heads));
  const cuda::AttnShape s{a.n_new,       a.n_head,      a.n_head_kv, hd,          a.scale,          a.q.raw(),
                          a.k_new.raw(), a.v_new.raw(), a.n_prefix,  a.n_head_kv, a.k_prefix.raw(), a.v_prefix.raw()};
  DeviceRunner run{stream_};
  const int e = cuda::RunAttention(run, s, a.out.raw(), heads_dev, int(heads.size()), a.importance_include_new,
                                   a.importance.raw(), sc, n_split);
  if (!Check(cudaError_t(e), "attention kernels")) return status_;
  // Exact causal work: sum over rows of the keys they see; importance recomputes QK for its heads.
  const double visible = double(a.n_new) * a.n_prefix + 0.5 * a.n_new * (a.n_new + 1.0);
  flops_ += 4.0 * a.n_head * hd * visible + 2.0 * double(heads.size()) * hd * visible;
  return Status::Ok();
}

Status CudaBackend::ScoreKeys(const ScoreKeysArgs& a) {
  IMPRESS_RETURN_IF_ERROR(CheckScoreKeysArgs(a));
  if (!Enter()) return status_;
  const int n_q = int(a.query_heads.size());
  if (n_q == 0 || a.n_prefix == 0) return Status::Ok();
  if (a.code_bits) return Status::Unsupported("cuda backend: key scoring from integer codes (upload fp16 keys)");
  if (a.head_dim > cuda::kMaxHeadDim)
    return Status::Unsupported(
        fmt::format("cuda backend: key scoring with head_dim {} (at most {})", a.head_dim, cuda::kMaxHeadDim));
  const int hd = a.head_dim, n_keys = a.n_prefix + a.n_new;
  const int n_split = cuda::ChooseSplit(cuda::RowTiles(a.n_new) * n_q, n_keys, hd, n_sm_);
  const cuda::AttnScratchSize z = cuda::ScratchFor(a.n_head, a.n_new, hd, n_split, false);
  IMPRESS_ASSIGN_OR_RETURN(float* f, Scratch<float>(f32_scratch_, f32_cap_, 2 * z.row_floats + 2 * z.part_floats));
  const cuda::AttnScratch sc{f, f + z.row_floats, f + 2 * z.row_floats, f + 2 * z.row_floats + z.part_floats, nullptr};
  // One upload: the query heads, then the slot of each kv head (-1: keys not supplied).
  std::vector<int> ints(a.query_heads.begin(), a.query_heads.end());
  ints.resize(size_t(n_q) + a.n_head_kv, -1);
  for (size_t sl = 0; sl < a.prefix_kv_heads.size(); ++sl) ints[size_t(n_q) + a.prefix_kv_heads[sl]] = int(sl);
  IMPRESS_ASSIGN_OR_RETURN(const int* ints_dev, UploadInts(ints));
  const cuda::AttnShape s{a.n_new,          a.n_head,      a.n_head_kv, hd,         a.scale,
                          a.q.raw(),        a.k_new.raw(), nullptr,     a.n_prefix, int(a.prefix_kv_heads.size()),
                          a.k_prefix.raw(), nullptr};
  DeviceRunner run{stream_};
  const int e = cuda::RunScoreKeys(run, s, ints_dev, ints_dev + n_q, n_q, a.importance.raw(), sc, n_split);
  if (!Check(cudaError_t(e), "key scoring kernels")) return status_;
  const double visible = double(a.n_new) * a.n_prefix + 0.5 * a.n_new * (a.n_new + 1.0);
  flops_ += 2.0 * n_q * hd * visible + 2.0 * n_q * hd * double(a.n_new) * a.n_prefix;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  CudaGemmPrecision gemm = options.gemm;
  if (const char* env = std::getenv("IMPRESS_CUDA_GEMM"); env && *env) {
    IMPRESS_ASSIGN_OR_RETURN(gemm, ParseCudaGemmPrecision(env));
  }
  auto be = std::make_unique<CudaBackend>(options.device, gemm);
  IMPRESS_RETURN_IF_ERROR(be->Init().WithContext("cuda backend"));
  return std::unique_ptr<Backend>(std::move(be));
}

Status CudaBackendStatus(const Backend& backend) {
  if (const auto* cb = dynamic_cast<const CudaBackend*>(&backend)) return cb->status();
  return Status::Ok();
}

Result<double> MeasureCublasTflops(int device, CudaGemmPrecision precision, int size) {
  IMPRESS_ASSIGN_OR_RETURN(int n_dev, CudaDeviceCount());
  if (device < 0 || device >= n_dev)
    return Status::InvalidArgument(fmt::format("CUDA device {} does not exist", device));
  if (size < 256 || size > 32768) return Status::InvalidArgument("MeasureCublasTflops: size out of [256, 32768]");
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaSetDevice(device), "cudaSetDevice"));
  const bool low = precision == CudaGemmPrecision::kF16 || precision == CudaGemmPrecision::kBf16;
  const size_t elem = low ? 2 : 4, n = size_t(size) * size;
  cuda::DeviceBuffer a, b, c;
  IMPRESS_RETURN_IF_ERROR(a.Allocate(n * elem));
  IMPRESS_RETURN_IF_ERROR(b.Allocate(n * elem));
  IMPRESS_RETURN_IF_ERROR(c.Allocate(n * 4));
  // Inputs of small values (the rate does not depend on them, but NaN or denormals could).
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaMemset(a.get(), 0x11, n * elem), "cudaMemset"));
  IMPRESS_RETURN_IF_ERROR(CudaError(cudaMemset(b.get(), 0x11, n * elem), "cudaMemset"));
  cuda::BlasHandle h;
  IMPRESS_RETURN_IF_ERROR(h.Create());
  IMPRESS_RETURN_IF_ERROR(
      BlasError(cublasSetMathMode(
                    h.get(), precision == CudaGemmPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                "cublasSetMathMode"));
  cuda::EventPair ev;
  IMPRESS_RETURN_IF_ERROR(ev.Create());
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = precision == CudaGemmPrecision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  auto run = [&]() -> Status {
    if (low)
      return BlasError(
          cublasGemmEx(h.get(), CUBLAS_OP_T, CUBLAS_OP_N, size, size, size, &alpha, a.get(), t, size, b.get(), t, size,
                       &beta, c.get(), CUDA_R_32F, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    return BlasError(
        cublasSgemm(h.get(), CUBLAS_OP_T, CUBLAS_OP_N, size, size, size, &alpha, static_cast<const float*>(a.get()),
                    size, static_cast<const float*>(b.get()), size, &beta, static_cast<float*>(c.get()), size),
        "cublasSgemm");
  };
  IMPRESS_RETURN_IF_ERROR(run());  // warm-up (heuristics, clocks)
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const int n_iter = 5;
    IMPRESS_RETURN_IF_ERROR(CudaError(cudaEventRecord(ev.start, nullptr), "cudaEventRecord"));
    for (int i = 0; i < n_iter; ++i) IMPRESS_RETURN_IF_ERROR(run());
    IMPRESS_RETURN_IF_ERROR(CudaError(cudaEventRecord(ev.stop, nullptr), "cudaEventRecord"));
    IMPRESS_RETURN_IF_ERROR(CudaError(cudaEventSynchronize(ev.stop), "cudaEventSynchronize"));
    float ms = 0;
    IMPRESS_RETURN_IF_ERROR(CudaError(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime"));
    best = std::max(best, 2.0 * double(size) * size * size * n_iter / (ms * 1e-3) / 1e12);
  }
  return best;
}

}  // namespace impress
