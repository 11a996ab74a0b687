// The launch program interpreter: runs the steps of a range of pieces at padded size P on one
// stream, eagerly or inside a stream capture. Kernel steps launch the specialised kernel for P
// when there is one, else the general kernel; arguments are marshalled per KernelArg (buffer ->
// device pointer, size -> int64 P, i64 -> int64, f32 -> float, real_size_ptr -> the executor's
// device-resident int64 real size s, kv -> a pointer into the paged KV cache) in manifest order.
// Steps gated by size or route (size_gate.h) run where their gating says.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cache/status.h"
#include "runtime/gemm_plan.h"
#include "runtime/model_state.h"

namespace kiln::runtime {

class KvCacheDevice;

struct LaunchContext {
  const ModelState* model = nullptr;
  char* arena = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  // Device int64 holding the request's real size s (<= P), written on `stream` before each run
  // (executor_state.h: real_size_write). Bound to real_size_ptr arguments; a step with such an
  // argument fails to launch when it is null.
  const int64_t* real_size = nullptr;
  // The paged KV cache bound to KernelArg.kv arguments (generation models); a step with such an
  // argument fails to launch when it is null.
  const KvCacheDevice* kv = nullptr;
  // The decode route (generation steps whose every token is its sequence's only new one): route
  // gating (KernelStep.skip_on_decode / decode_only, size_gate.h) picks the steps that run.
  bool decode_route = false;
};

// Pieces [first, last) at size p. `plans` must hold the GEMM plans made for p. A failed launch
// names the kernel symbol, the step's node, grid, block and shared bytes.
Status launch_pieces(const LaunchContext& ctx, const GemmPlanSet& plans, size_t first, size_t last,
                     int64_t p);

// One kernel launch as the interpreter makes it. With `programmatic`, the launch may begin while
// the previous kernel in the stream still runs (programmatic stream serialization): the kernel's
// kiln::kernel_enter waits for it to complete before touching memory. A predecessor that is not
// a kernel, or a kernel that never signals (cuBLASLt's), still completes first. The kernel
// benchmarks launch through it too, so that they time what the runtime does.
cudaError_t launch_kernel(const void* fn, dim3 grid, dim3 block, void** args, uint32_t shared_bytes,
                          cudaStream_t stream, bool programmatic);

// Blocks for `work` at `work_per_block`: 0 when work <= 0; an error above 2^31-1.
Result<int64_t> grid_blocks(int64_t work, uint32_t work_per_block);

}  // namespace kiln::runtime
