// Layout family: the pieces that generated data-movement kernels share (strided copies,
// transposes, concat/split, gathers, rotary). Codegen (compiler/backend/lower/layout_codegen.cc) writes
// the index arithmetic of each kernel; these helpers do the parts that do not depend on shapes.
#pragma once

#include "common.cuh"
#include "dtype.cuh"

namespace kiln {

// An ONNX index (negative counts from the end) on an axis of n > 0 elements, clamped into
// range: padded rows of a request carry arbitrary indices, and they must never fault.
__device__ __forceinline__ i64 layout_index(i64 k, i64 n) {
  if (k < 0) k += n;
  return k < 0 ? 0 : (k >= n ? n - 1 : k);
}

// One 32x32 tile of a transpose: element (a, b) is in[b * in_stride_b + a] and goes to
// out[a * out_stride_a + b], so reads are coalesced along a and writes along b. Needs
// blockDim.x == 32 * kWarps (kWarps of 4, 8, 16 or 32: 32 / kWarps rows each) and must be
// reached by the whole block.
template <typename T, int kWarps = 8>
__device__ __forceinline__ void layout_transpose_tile(const T* __restrict__ in, T* __restrict__ out,
                                                      i64 a0, i64 b0, i64 na, i64 nb,
                                                      i64 in_stride_b, i64 out_stride_a,
                                                      T (*tile)[33]) {
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  for (int k = ty; k < 32; k += kWarps) {
    const i64 a = a0 + tx, b = b0 + k;
    if (a < na && b < nb) tile[k][tx] = in[b * in_stride_b + a];
  }
  __syncthreads();
  for (int k = ty; k < 32; k += kWarps) {
    const i64 b = b0 + tx, a = a0 + k;
    if (a < na && b < nb) out[a * out_stride_a + b] = tile[tx][k];
  }
  __syncthreads();
}

// Rotary embedding of element j of a row (kiln.Rotary, compiler/ops/kiln_ops.md). `x` is the
// row, `cs`/`sn` the table row (R/2 entries, or R when `full`); j < R.
template <typename T, typename C>
__device__ __forceinline__ float layout_rotary(const T* __restrict__ x, const C* __restrict__ cs,
                                               const C* __restrict__ sn, i64 j, i64 R,
                                               bool interleaved, bool full) {
  const i64 half = R / 2;
  const float v = to_f32(x[j]);
  if (full) {
    const float r = j < half ? -to_f32(x[j + half]) : to_f32(x[j - half]);
    return v * to_f32(cs[j]) + r * to_f32(sn[j]);
  }
  if (interleaved) {
    const i64 i = j >> 1;
    const float c = to_f32(cs[i]), s = to_f32(sn[i]);
    return (j & 1) ? v * c + to_f32(x[j - 1]) * s : v * c - to_f32(x[j + 1]) * s;
  }
  if (j < half) return v * to_f32(cs[j]) - to_f32(x[j + half]) * to_f32(sn[j]);
  const i64 i = j - half;
  return v * to_f32(cs[i]) + to_f32(x[i]) * to_f32(sn[i]);
}

}  // namespace kiln
