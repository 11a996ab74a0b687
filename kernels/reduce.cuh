// Row reductions: LayerNormalization / RMSNormalization (optionally with a fused residual add),
// softmax and sum/mean/max over the last axis. Every row is COLS contiguous elements; G threads
// share a row: a warp (G == 32, blockDim.x / 32 rows per block) or the whole block
// (G == blockDim.x, one row per block). Each thread takes vectors of N elements (16 bytes where
// COLS allows; any power of two that divides COLS works) and keeps its part of the row in
// registers, so a row is read from memory once. Everything accumulates in fp32. The default
// geometry and the launch candidates (other G, rows per block and N) are chosen in
// compiler/backend/lower/reduce_codegen.cc.
#pragma once

#include "common.cuh"
#include "dtype.cuh"

namespace kiln {

template <int G>
__device__ __forceinline__ i64 row_index() {
  static_assert(G >= 32 && G <= 1024 && G % 32 == 0, "a row group is whole warps of one block");
  if constexpr (G == 32)
    return static_cast<i64>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  else
    return static_cast<i64>(blockIdx.x);
}

template <int G>
__device__ __forceinline__ int row_thread() {
  if constexpr (G == 32)
    return static_cast<int>(threadIdx.x & 31);
  else
    return static_cast<int>(threadIdx.x);
}

// Sum / max over the G threads of a row. The leading barrier lets one call follow another
// without a warp overwriting partials that a slower warp still reads.
template <int G>
__device__ __forceinline__ float row_sum(float v) {
  v = warp_reduce_sum(v);
  if constexpr (G > 32) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = warp_reduce_sum(lane < G / 32 ? part[lane] : 0.0f);
  }
  return v;
}

template <int G>
__device__ __forceinline__ float row_max(float v) {
  v = warp_reduce_max(v);
  if constexpr (G > 32) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = warp_reduce_max(lane < G / 32 ? part[lane] : __int_as_float(0xff800000));
  }
  return v;
}

template <typename T, int N>
__device__ __forceinline__ void row_load(const T* p, float (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = to_f32(*p);
  } else {
    const Vec<T, N> v = load_vec<T, N>(p);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_f32(v.v[k]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void row_store(T* p, const float (&in)[N]) {
  if constexpr (N == 1) {
    *p = from_f32<T>(in[0]);
  } else {
    Vec<T, N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] = from_f32<T>(in[k]);
    store_vec<T, N>(p, v);
  }
}

// LayerNormalization (RMS false): y = (h - mean) / sqrt(var + eps) * scale (+ bias);
// RMSNormalization (RMS true): y = h / sqrt(mean(h^2) + eps) * scale; where h = x, or x + r
// with a residual (RESID), and h is also stored to sum_out when STORE_SUM.
template <typename T, int COLS, int N, int G, bool RMS, bool RESID, bool STORE_SUM, bool BIAS>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ r,
                                          T* __restrict__ sum_out, const T* __restrict__ scale,
                                          const T* __restrict__ bias, T* __restrict__ y, i64 rows,
                                          float eps) {
  constexpr int V = COLS / N;         // vectors per row
  constexpr int K = (V + G - 1) / G;  // vectors per thread
  const i64 row = row_index<G>();
  if (row >= rows) return;  // a whole warp (G == 32) or a whole block leaves together
  const int t = row_thread<G>();
  const i64 base = row * COLS;
  float v[K][N];
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * G + t) * N;
    if (j < COLS) {
      row_load<T, N>(x + base + j, v[k]);
      if constexpr (RESID) {
        float w[N];
        row_load<T, N>(r + base + j, w);
#pragma unroll
        for (int e = 0; e < N; ++e) v[k][e] += w[e];
        if constexpr (STORE_SUM) row_store<T, N>(sum_out + base + j, v[k]);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) acc += RMS ? v[k][e] * v[k][e] : v[k][e];
    }
  }
  acc = row_sum<G>(acc);
  float mean = 0.0f, inv;
  if constexpr (RMS) {
    inv = 1.0f / sqrtf(acc / static_cast<float>(COLS) + eps);
  } else {
    mean = acc / static_cast<float>(COLS);
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if ((k * G + t) * N >= COLS) continue;
#pragma unroll
      for (int e = 0; e < N; ++e) var += (v[k][e] - mean) * (v[k][e] - mean);
    }
    var = row_sum<G>(var);
    inv = 1.0f / sqrtf(var / static_cast<float>(COLS) + eps);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * G + t) * N;
    if (j < COLS) {
      float s[N], o[N];
      row_load<T, N>(scale + j, s);
      if constexpr (BIAS) {
        float b[N];
        row_load<T, N>(bias + j, b);
#pragma unroll
        for (int e = 0; e < N; ++e) o[e] = (v[k][e] - mean) * inv * s[e] + b[e];
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) o[e] = (v[k][e] - mean) * inv * s[e];
      }
      row_store<T, N>(y + base + j, o);
    }
  }
}

// Softmax over each row, max-subtracted so large logits do not overflow.
template <typename T, int COLS, int N, int G>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y,
                                             i64 rows) {
  constexpr int V = COLS / N;
  constexpr int K = (V + G - 1) / G;
  const i64 row = row_index<G>();
  if (row >= rows) return;
  const int t = row_thread<G>();
  const i64 base = row * COLS;
  float v[K][N];
  float m = __int_as_float(0xff800000);  // -inf
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * G + t) * N;
    if (j < COLS) {
      row_load<T, N>(x + base + j, v[k]);
#pragma unroll
      for (int e = 0; e < N; ++e) m = fmaxf(m, v[k][e]);
    }
  }
  m = row_max<G>(m);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if ((k * G + t) * N >= COLS) continue;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      v[k][e] = expf(v[k][e] - m);
      s += v[k][e];
    }
  }
  s = row_sum<G>(s);
  const float inv = 1.0f / s;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = (k * G + t) * N;
    if (j < COLS) {
#pragma unroll
      for (int e = 0; e < N; ++e) v[k][e] *= inv;
      row_store<T, N>(y + base + j, v[k]);
    }
  }
}

// ReduceSum (KIND 0), ReduceMean (1), ReduceMax (2) of each row into one element of y.
template <typename TI, typename TO, int COLS, int N, int G, int KIND>
__device__ __forceinline__ void reduce_rows(const TI* __restrict__ x, TO* __restrict__ y,
                                            i64 rows) {
  constexpr int V = COLS / N;
  constexpr int K = (V + G - 1) / G;
  const i64 row = row_index<G>();
  if (row >= rows) return;
  const int t = row_thread<G>();
  const i64 base = row * COLS;
  float acc = KIND == 2 ? __int_as_float(0xff800000) : 0.0f;
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    const int j = (k * G + t) * N;
    if (j < COLS) {
      float v[N];
      row_load<TI, N>(x + base + j, v);
#pragma unroll
      for (int e = 0; e < N; ++e) acc = KIND == 2 ? fmaxf(acc, v[e]) : acc + v[e];
    }
  }
  acc = KIND == 2 ? row_max<G>(acc) : row_sum<G>(acc);
  if (t == 0) y[row] = from_f32<TO>(KIND == 1 ? acc / static_cast<float>(COLS) : acc);
}

}  // namespace kiln
