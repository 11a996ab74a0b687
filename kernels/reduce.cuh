// Row reductions (starting point: last-axis softmax, a warp per row, fp32 accumulation).
#pragma once

#include "common.cuh"

namespace kiln {

// Rows [warp_id, rows) step (warps in grid); each row has `cols` contiguous elements.
__device__ __forceinline__ void softmax_rows_warp(const float* __restrict__ x,
                                                  float* __restrict__ y, i64 rows, i64 cols) {
  const int lane = threadIdx.x & 31;
  const i64 warp = global_thread_index() >> 5;
  const i64 warps = global_thread_count() >> 5;
  for (i64 row = warp; row < rows; row += warps) {
    const float* in = x + row * cols;
    float* out = y + row * cols;
    float m = __int_as_float(0xff800000);  // -inf
    for (i64 c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    m = warp_reduce_max(m);
    float s = 0.0f;
    for (i64 c = lane; c < cols; c += 32) s += expf(in[c] - m);
    s = warp_reduce_sum(s);
    const float inv = 1.0f / s;
    for (i64 c = lane; c < cols; c += 32) out[c] = expf(in[c] - m) * inv;
  }
}

}  // namespace kiln
