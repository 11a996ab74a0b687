// Shared helpers for kiln's generated kernels. NVRTC compiles these with no system headers.
#pragma once

namespace kiln {

typedef long long i64;

// The first statement of every generated kernel (compiler/backend/kernel_codegen.cc). On sm_90+
// it waits until the kernels this launch depends on have completed and their writes are visible
// (griddepcontrol.wait), then lets the next kernel in the stream start launching
// (griddepcontrol.launch_dependents). When the runtime launches with programmatic dependent
// launch, the next kernel's launch and block scheduling thus overlap this one's run, and it still
// reads and writes nothing before this one is done. Launched normally, both are no-ops.
__device__ __forceinline__ void kernel_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

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
