// Skinny GEMM: a few rows of activations times a weight matrix, at memory bandwidth (decode and
// single-token work, where cuBLASLt's tiles leave most SMs idle).
//
//   D[m, n] = act(alpha * sum_k A[m, k] * W[n, k] + beta * C[m, n] + bias[n])
//
// A is [M, K] row-major with M small and known only at run time; W is [N, K] row-major (K
// contiguous: the compiler transposes a [K, N] weight at compile time); C (optional, may be D
// itself) and D are [M, N]. This is cuBLASLt's epilogue order, so a GEMM step computes the same
// thing on either path.
//
// Work split: a block has WARPS warps in groups of KSPLIT; a group owns ROWS consecutive rows of
// W (ROWS outputs per activation row), and its warps split K between them, lane by lane in
// VEC-element vectors (16-byte loads of W that skip L1: each weight is read once). Every lane
// keeps MB x ROWS fp32 sums; activation rows are taken MB at a time (M > MB loops, re-reading
// W from L2). Sums are reduced across the warp with shuffles, across the group through shared
// memory, and the group's first warp applies the epilogue. No second launch, no workspace.
#pragma once

namespace kiln {

enum SkinnyAct { kSkinnyActNone = 0, kSkinnyActRelu = 1, kSkinnyActGeluTanh = 2 };

template <int ACT>
__device__ __forceinline__ float skinny_act(float x) {
  if (ACT == kSkinnyActRelu) return x < 0.0f ? 0.0f : x;  // NaN stays NaN, as in the graph
  if (ACT == kSkinnyActGeluTanh) {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
  return x;
}

// A VEC-element vector of W, loaded once: 16-byte vectors bypass L1 (ld.global.nc with
// L1::no_allocate), narrower ones use a plain load.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> skinny_load_weight(const T* p) {
  if constexpr (sizeof(Vec<T, VEC>) == 16) {
    union {
      Vec<T, VEC> v;
      unsigned u[4];
    } r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3])
        : "l"(p));
    return r.v;
  } else {
    return load_vec<T, VEC>(p);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ float skinny_dot(const Vec<T, VEC>& a, const Vec<T, VEC>& w, float acc) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc = fmaf(to_f32(a.v[i]), to_f32(w.v[i]), acc);
  return acc;
}

template <typename T, int K, int N, int VEC, int ROWS, int KSPLIT, int WARPS, int MB, int UNROLL,
          int ACT, bool BIAS, bool HAS_C>
__device__ __forceinline__ void skinny_gemm(const T* __restrict__ a, const T* __restrict__ w,
                                            const T* __restrict__ bias, const T* c, T* d,
                                            long long m_total, float alpha, float beta) {
  static_assert(K % VEC == 0, "K must be a multiple of the vector width");
  static_assert(WARPS % KSPLIT == 0, "a block holds whole groups");
  constexpr int kVectors = K / VEC;         // vectors per row of A and W
  constexpr int kStride = 32 * KSPLIT;      // vectors between one lane's consecutive loads
  constexpr int kIters = (kVectors + kStride - 1) / kStride;
  constexpr int kGroups = WARPS / KSPLIT;
  constexpr int kOut = MB * ROWS;           // sums per lane
  __shared__ float partial[KSPLIT > 1 ? WARPS : 1][KSPLIT > 1 ? kOut : 1];

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int group = warp / KSPLIT, part = warp % KSPLIT;
  const long long n0 = (static_cast<long long>(blockIdx.x) * kGroups + group) * ROWS;
  const T* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + (n0 + r < N ? n0 + r : 0) * K;

  for (long long m0 = 0; m0 < m_total; m0 += MB) {
    float acc[MB][ROWS];
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.0f;

    for (int it = 0; it < kIters; it += UNROLL) {
      Vec<T, VEC> wv[UNROLL][ROWS];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int v = (it + u) * kStride + part * 32 + lane;
        // The load is inline assembly the compiler takes to have no side effects, so it may run
        // it before (or without) testing v: the address must be in bounds either way. Lanes past
        // the row re-read its last vector and never use it.
        const int in_row = v < kVectors ? v : kVectors - 1;
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
          if (v < kVectors) wv[u][r] = skinny_load_weight<T, VEC>(wrow[r] + in_row * VEC);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int v = (it + u) * kStride + part * 32 + lane;
        if (v >= kVectors) continue;
#pragma unroll
        for (int m = 0; m < MB; ++m) {
          if (m0 + m >= m_total) continue;
          const Vec<T, VEC> av = load_vec<T, VEC>(a + (m0 + m) * K + v * VEC);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] = skinny_dot<T, VEC>(av, wv[u][r], acc[m][r]);
        }
      }
    }

    // Warp sums; lane j then holds sum j (of round j / 32), as `mine`.
#pragma unroll
    for (int j0 = 0; j0 < kOut; j0 += 32) {
      float mine = 0.0f;
#pragma unroll
      for (int j = j0; j < j0 + 32 && j < kOut; ++j) {
        if (m0 + j / ROWS >= m_total) continue;  // rows past M: nothing to sum (warp-uniform)
        const float s = warp_reduce_sum(acc[j / ROWS][j % ROWS]);
        if (lane == j - j0) mine = s;
      }
      const int j = j0 + lane;
      if (KSPLIT > 1) {
        if (j < kOut) partial[warp][KSPLIT > 1 ? j : 0] = mine;
        __syncthreads();
        if (part == 0 && j < kOut) {
#pragma unroll
          for (int q = 1; q < KSPLIT; ++q) mine += partial[warp + q][KSPLIT > 1 ? j : 0];
        }
        __syncthreads();
      }
      const long long m = m0 + j / ROWS, n = n0 + j % ROWS;
      if (part == 0 && j < kOut && m < m_total && n < N) {
        float x = alpha * mine;
        if (HAS_C) x += beta * to_f32(c[m * N + n]);
        if (BIAS) x += to_f32(bias[n]);
        d[m * N + n] = from_f32<T>(skinny_act<ACT>(x));
      }
    }
  }
}

}  // namespace kiln
