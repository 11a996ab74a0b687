// Prefix sums (CumSum) along one axis. The tensor is seen as [outer, len, inner]; a line is the
// `len` elements of one (outer, inner) pair, `inner` apart, scanned forward or (REVERSE) from its
// end, inclusive or (EXCLUSIVE) leaving out the element itself. Two shapes:
// - scan_lines: G threads scan a line in chunks of G elements and carry the running total from
//   one chunk to the next, so a line may be any length. G is a warp (G == 32, blockDim.x / 32
//   lines per block) or the whole block (G == blockDim.x, one line per block), as in reduce.cuh.
// - scan_columns: one thread per line, serial, for lines whose elements lie >= 32 apart:
//   neighbouring threads read neighbouring elements, so every step is one coalesced access.
// Floats accumulate in fp32, integers in 64 bits (exact; a narrower result wraps as a cast does).
// The geometry is chosen in compiler/backend/lower/scan_codegen.cc.
#pragma once

#include "common.cuh"
#include "dtype.cuh"
#include "reduce.cuh"

namespace kiln {

// Storage type T to and from the accumulator: float for float storage, i64 for integers.
template <typename A>
struct ScanAcc;
template <>
struct ScanAcc<float> {
  template <typename T>
  static __device__ __forceinline__ float load(T x) { return to_f32(x); }
  template <typename T>
  static __device__ __forceinline__ T store(float a) { return from_f32<T>(a); }
};
template <>
struct ScanAcc<i64> {
  template <typename T>
  static __device__ __forceinline__ i64 load(T x) { return static_cast<i64>(x); }
  template <typename T>
  static __device__ __forceinline__ T store(i64 a) { return static_cast<T>(a); }
};

// Inclusive scan over the 32 lanes of a warp.
template <typename A>
__device__ __forceinline__ A warp_scan(A v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const A u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Scan of one value per thread over the G threads of a line: this thread's inclusive (or
// exclusive) prefix; *total gets the sum over all G. The exclusive prefix is shifted, not
// inclusive minus v, so float results do not lose the small terms.
template <typename A, int G, bool EXCLUSIVE>
__device__ __forceinline__ A group_scan(A v, A* total) {
  const int lane = threadIdx.x & 31;
  A incl = warp_scan(v);
  A excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = A(0);
  if constexpr (G > 32) {
    __shared__ A part[G / 32];
    const int warp = threadIdx.x >> 5;
    if (lane == 31) part[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      A p = lane < G / 32 ? part[lane] : A(0);
      p = warp_scan(p);
      if (lane < G / 32) part[lane] = p;
    }
    __syncthreads();
    if (warp > 0) {
      incl += part[warp - 1];
      excl += part[warp - 1];
    }
    *total = part[G / 32 - 1];
    __syncthreads();  // the next chunk rewrites part
  } else {
    *total = __shfl_sync(0xffffffffu, incl, 31);
  }
  return EXCLUSIVE ? excl : incl;
}

template <typename T, typename A, int G, bool EXCLUSIVE, bool REVERSE>
__device__ __forceinline__ void scan_lines(const T* __restrict__ x, T* __restrict__ y, i64 lines,
                                           i64 len, i64 inner) {
  const i64 line = row_index<G>();
  if (line >= lines) return;  // a whole warp (G == 32) or a whole block leaves together
  const int t = row_thread<G>();
  const i64 o = line / inner, c = line - o * inner;
  const i64 base = o * len * inner + c;
  A carry = A(0);
  for (i64 start = 0; start < len; start += G) {
    const i64 k = start + t;
    const i64 at = base + (REVERSE ? len - 1 - k : k) * inner;
    const A v = k < len ? ScanAcc<A>::load(x[at]) : A(0);
    A total;
    const A s = group_scan<A, G, EXCLUSIVE>(v, &total);
    if (k < len) y[at] = ScanAcc<A>::template store<T>(carry + s);
    carry += total;
  }
}

template <typename T, typename A, bool EXCLUSIVE, bool REVERSE>
__device__ __forceinline__ void scan_columns(const T* __restrict__ x, T* __restrict__ y,
                                             i64 lines, i64 len, i64 inner) {
  for (i64 line = global_thread_index(); line < lines; line += global_thread_count()) {
    const i64 o = line / inner, c = line - o * inner;
    const i64 base = o * len * inner + c;
    A sum = A(0);
    for (i64 k = 0; k < len; ++k) {
      const i64 at = base + (REVERSE ? len - 1 - k : k) * inner;
      const A v = ScanAcc<A>::load(x[at]);
      if constexpr (EXCLUSIVE) y[at] = ScanAcc<A>::template store<T>(sum);
      sum += v;
      if constexpr (!EXCLUSIVE) y[at] = ScanAcc<A>::template store<T>(sum);
    }
  }
}

}  // namespace kiln
