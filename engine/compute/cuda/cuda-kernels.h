// Launchers of the CUDA backend's kernels (cuda-kernels.cu; bodies in cuda-kernel-bodies.cuh).
// Internal to engine/compute/cuda: the backend and tier memory call these; nothing else should.
//
// Each launcher enqueues on `stream` and returns cudaGetLastError() (or the error of a launch
// setting), never syncs. Pointers are device pointers; shapes as in engine/compute/backend.h.
// Thread contract: stateless apart from a once-per-kernel shared-memory opt-in (thread-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/compute/cuda/cuda-kernel-bodies.cuh"

namespace impress::cuda {

cudaError_t LaunchRmsNorm(cudaStream_t st, float* out, const float* x, const float* w, int n_rows, int n_cols,
                          float eps);
cudaError_t LaunchLayerNorm(cudaStream_t st, float* out, const float* x, const float* w, const float* b, int n_rows,
                            int n_cols, float eps);
cudaError_t LaunchRope(cudaStream_t st, const RopeBody& body);
cudaError_t LaunchSwiGlu(cudaStream_t st, const SwiGluBody& body, int64_t n);
cudaError_t LaunchRelu(cudaStream_t st, float* x, int64_t n);
cudaError_t LaunchAdd(cudaStream_t st, float* x, const float* y, int64_t n);
cudaError_t LaunchAddBias(cudaStream_t st, const AddBiasBody& body, int64_t n);
cudaError_t LaunchGetRows(cudaStream_t st, const GetRowsBody& body, int64_t n);
// n = rows * body.n_cols
cudaError_t LaunchToHalf(cudaStream_t st, const ToHalfBody& body, int64_t n);

// Pass 1 of attention: grid (ceil(rows / kAttnRowTile), n_groups, n_split); see RowPassBody.
cudaError_t LaunchRowPass(cudaStream_t st, const RowPassBody& body, int n_row_tiles, int n_groups);
cudaError_t LaunchCombine(cudaStream_t st, const CombineBody& body, int64_t n);
// Pass 2: grid (ceil(n_cols / key tile), n_heads).
cudaError_t LaunchImportance(cudaStream_t st, const ImportanceBody& body, int n_heads);

}  // namespace impress::cuda
