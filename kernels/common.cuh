// Shared helpers for kiln's generated kernels. NVRTC compiles these with no system headers.
#pragma once

namespace kiln {

typedef long long i64;

// Index of this thread in a 1-D grid, and the grid's total thread count (grid-stride loops).
__device__ __forceinline__ i64 global_thread_index() {
  return static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ i64 global_thread_count() {
  return static_cast<i64>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace kiln
