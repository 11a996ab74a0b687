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

// N elements at p, widened to fp32, read L at a time (L divides N; p is aligned to L elements).
template <typename T, int N, int L>
__device__ __forceinline__ void layout_load_f32(const T* __restrict__ p, float (&f)[N]) {
#pragma unroll
  for (int k = 0; k < N; k += L) {
    const Vec<T, L> v = load_vec<T, L>(p + k);
#pragma unroll
    for (int e = 0; e < L; ++e) f[k + e] = to_f32(v.v[e]);
  }
}

// N fp32 values rounded to T and written to p, L at a time (as layout_load_f32).
template <typename T, int N, int L>
__device__ __forceinline__ void layout_store_f32(T* __restrict__ p, const float (&f)[N]) {
#pragma unroll
  for (int k = 0; k < N; k += L) {
    Vec<T, L> v;
#pragma unroll
    for (int e = 0; e < L; ++e) v.v[e] = from_f32<T>(f[k + e]);
    store_vec<T, L>(p + k, v);
  }
}

// N consecutive rotary pairs of one row, from pair p (the vector form of layout_rotary, with the
// same arithmetic per element). MODE 0: pair i is (i, i + half) with half-width tables; 2: the
// same pairs with full-width tables (Hugging Face's rotate_half), entries i and i + half; 1:
// interleaved, pair i is (2i, 2i + 1). x and out are the row's first elements, cs and sn the
// table row's. L is the vector width of the row reads and writes, LC of the table reads.
template <typename T, typename C, int N, int L, int LC, int MODE>
__device__ __forceinline__ void layout_rotary_pairs(const T* __restrict__ x,
                                                    const C* __restrict__ cs,
                                                    const C* __restrict__ sn, T* __restrict__ out,
                                                    i64 p, i64 half) {
  float c[N], s[N];
  layout_load_f32<C, N, LC>(cs + p, c);
  layout_load_f32<C, N, LC>(sn + p, s);
  if (MODE == 1) {
    float a[2 * N];
    layout_load_f32<T, 2 * N, L>(x + 2 * p, a);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float e = a[2 * k], o = a[2 * k + 1];
      a[2 * k] = e * c[k] - o * s[k];
      a[2 * k + 1] = o * c[k] + e * s[k];
    }
    layout_store_f32<T, 2 * N, L>(out + 2 * p, a);
    return;
  }
  float a[N], b[N], c2[N], s2[N];
  layout_load_f32<T, N, L>(x + p, a);
  layout_load_f32<T, N, L>(x + p + half, b);
  if (MODE == 2) {
    layout_load_f32<C, N, LC>(cs + p + half, c2);
    layout_load_f32<C, N, LC>(sn + p + half, s2);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float lo = a[k], hi = b[k];
    if (MODE == 2) {
      a[k] = lo * c[k] + -hi * s[k];
      b[k] = hi * c2[k] + lo * s2[k];
    } else {
      a[k] = lo * c[k] - hi * s[k];
      b[k] = hi * c[k] + lo * s[k];
    }
  }
  layout_store_f32<T, N, L>(out + p, a);
  layout_store_f32<T, N, L>(out + p + half, b);
}

// N elements copied from x to out, L at a time (the part of a row past the rotary dims).
template <typename T, int N, int L>
__device__ __forceinline__ void layout_copy_run(const T* __restrict__ x, T* __restrict__ out) {
#pragma unroll
  for (int k = 0; k < N; k += L) store_vec<T, L>(out + k, load_vec<T, L>(x + k));
}

}  // namespace kiln
