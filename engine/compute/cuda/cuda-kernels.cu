// Kernels of the CUDA backend: thin __global__ wrappers that run the bodies of
// cuda-kernel-bodies.cuh (shared with the host emulator test). See cuda-kernels.h.
#include "engine/compute/cuda/cuda-kernels.h"

#include <algorithm>

namespace impress::cuda {

namespace {

// One block: phases separated by barriers (see cuda-kernel-bodies.cuh).
struct DeviceExec {
  __device__ int n_threads() const { return blockDim.x; }
  template <class F>
  __device__ void Each(F f) const {
    f(int(threadIdx.x));
    __syncthreads();
  }
};

template <class Body>
__global__ void __launch_bounds__(kElemThreads) ElementwiseKernel(Body body, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) body(i);
}

template <class Body>
__global__ void __launch_bounds__(kBlockThreads) BlockKernel(Body body) {
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned
  body(DeviceExec{}, int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), reinterpret_cast<char*>(smem4));
}

template <class Body>
cudaError_t Elementwise(cudaStream_t st, const Body& body, int64_t n) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + kElemThreads - 1) / kElemThreads, int64_t(1) << 20);
  ElementwiseKernel<Body><<<unsigned(blocks), kElemThreads, 0, st>>>(body, n);
  return cudaGetLastError();
}

// Launches a block body, opting in to more than 48 KiB of shared memory when it needs it.
template <class Body>
cudaError_t Blocks(cudaStream_t st, const Body& body, dim3 grid, int smem_bytes) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  if (smem_bytes > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(BlockKernel<Body>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (e != cudaSuccess) return e;
  }
  BlockKernel<Body><<<grid, kBlockThreads, size_t(smem_bytes), st>>>(body);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNorm(cudaStream_t st, float* out, const float* x, const float* w, int n_rows, int n_cols,
                          float eps) {
  return Blocks(st, RmsNormBody{out, x, w, n_cols, eps}, dim3(unsigned(n_rows)), RmsNormBody::SmemBytes(kBlockThreads));
}

cudaError_t LaunchLayerNorm(cudaStream_t st, float* out, const float* x, const float* w, const float* b, int n_rows,
                            int n_cols, float eps) {
  return Blocks(st, LayerNormBody{out, x, w, b, n_cols, eps}, dim3(unsigned(n_rows)),
                LayerNormBody::SmemBytes(kBlockThreads));
}

cudaError_t LaunchRope(cudaStream_t st, const RopeBody& body) {
  return Elementwise(st, body, int64_t(body.n_tok) * (body.head_dim / 2));
}
cudaError_t LaunchSwiGlu(cudaStream_t st, const SwiGluBody& body, int64_t n) { return Elementwise(st, body, n); }
cudaError_t LaunchRelu(cudaStream_t st, float* x, int64_t n) { return Elementwise(st, ReluBody{x}, n); }
cudaError_t LaunchAdd(cudaStream_t st, float* x, const float* y, int64_t n) {
  return Elementwise(st, AddBody{x, y}, n);
}
cudaError_t LaunchAddBias(cudaStream_t st, const AddBiasBody& body, int64_t n) { return Elementwise(st, body, n); }
cudaError_t LaunchGetRows(cudaStream_t st, const GetRowsBody& body, int64_t n) { return Elementwise(st, body, n); }
cudaError_t LaunchToHalf(cudaStream_t st, const ToHalfBody& body, int64_t n) { return Elementwise(st, body, n); }

cudaError_t LaunchRowPass(cudaStream_t st, const RowPassBody& body, int n_row_tiles, int n_groups) {
  return Blocks(st, body, dim3(unsigned(n_row_tiles), unsigned(n_groups), unsigned(body.n_split)),
                RowPassBody::SmemBytes(body.s.head_dim, body.out != nullptr));
}

cudaError_t LaunchCombine(cudaStream_t st, const CombineBody& body, int64_t n) { return Elementwise(st, body, n); }

cudaError_t LaunchImportance(cudaStream_t st, const ImportanceBody& body, int n_heads) {
  const int bk = AttnKeyTile(body.s.head_dim);
  return Blocks(st, body, dim3(unsigned((body.n_cols + bk - 1) / bk), unsigned(n_heads)),
                ImportanceBody::SmemBytes(body.s.head_dim, kBlockThreads));
}

}  // namespace impress::cuda
