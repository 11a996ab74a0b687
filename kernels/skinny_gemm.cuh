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
// VEC-element vectors (16-byte loads of W that skip L1). A lane loads CHUNK of its vectors of each
// row at once, every load in flight before the first sum (the default geometry makes CHUNK the
// lane's whole share of K). The rows of A are taken MAXM at a time, and W is read once per pass:
// once in all for M <= MAXM. A pass of m rows runs code made for the next power of two (1, 2, 4,
// ... MAXM), so one row costs no registers or loads meant for sixteen. Sums are fp32: a weight
// vector is widened once and used for every row of the pass. They are
// reduced across the warp with shuffles, across the group through shared memory, and the
// group's first warp applies the epilogue. No second launch, no workspace.
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

// The rows of A a pass takes: the least power of two >= m, capped at MAXM.
template <int MAXM>
__device__ __forceinline__ int skinny_pass_rows(long long m) {
  int rows = 1;
  while (rows < MAXM && rows < m) rows *= 2;
  return rows;
}

// One pass: rows [m0, m0 + m_rows) of A (m_rows <= MB) against this group's ROWS rows of W.
template <typename T, int K, int N, int VEC, int ROWS, int KSPLIT, int WARPS, int CHUNK, int MB,
          int ACT, bool BIAS, bool HAS_C>
__device__ __forceinline__ void skinny_pass(const T* __restrict__ a, const T* const (&wrow)[ROWS],
                                            const T* __restrict__ bias, const T* c, T* d,
                                            long long n0, long long m0, int m_rows, float alpha,
                                            float beta, float* partial) {
  constexpr int kVectors = K / VEC;     // vectors per row of A and W
  constexpr int kStride = 32 * KSPLIT;  // vectors between one lane's consecutive loads
  constexpr int kIters = (kVectors + kStride - 1) / kStride;
  constexpr int kOut = MB * ROWS;  // sums per lane
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int part = warp % KSPLIT;

  float acc[MB][ROWS];
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.0f;

  for (int it0 = 0; it0 < kIters; it0 += CHUNK) {
    Vec<T, VEC> wv[CHUNK][ROWS];
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int v = (it0 + u) * kStride + part * 32 + lane;
      // The load is inline assembly the compiler takes to have no side effects, so it may run
      // it before (or without) testing v: the address must be in bounds either way. Lanes past
      // the row re-read its last vector and never use it.
      const int in_row = v < kVectors ? v : kVectors - 1;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        if (it0 + u < kIters) wv[u][r] = skinny_load_weight<T, VEC>(wrow[r] + in_row * VEC);
    }
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int v = (it0 + u) * kStride + part * 32 + lane;
      if (it0 + u >= kIters || v >= kVectors) continue;
      float wf[ROWS][VEC];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int i = 0; i < VEC; ++i) wf[r][i] = to_f32(wv[u][r].v[i]);
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        if (m >= m_rows) continue;
        const Vec<T, VEC> av = load_vec<T, VEC>(a + (m0 + m) * K + v * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float x = to_f32(av.v[i]);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(x, wf[r][i], acc[m][r]);
        }
      }
    }
  }

  // Warp sums; lane j then holds sum j (of round j / 32), as `mine`.
#pragma unroll
  for (int j0 = 0; j0 < kOut; j0 += 32) {
    float mine = 0.0f;
#pragma unroll
    for (int j = j0; j < j0 + 32 && j < kOut; ++j) {
      if (j / ROWS >= m_rows) continue;  // rows past M: nothing to sum (warp-uniform)
      const float s = warp_reduce_sum(acc[j / ROWS][j % ROWS]);
      if (lane == j - j0) mine = s;
    }
    const int j = j0 + lane;
    if (KSPLIT > 1) {
      if (j < kOut) partial[warp * kOut + j] = mine;
      __syncthreads();
      if (part == 0 && j < kOut) {
#pragma unroll
        for (int q = 1; q < KSPLIT; ++q) mine += partial[(warp + q) * kOut + j];
      }
      __syncthreads();
    }
    const long long m = m0 + j / ROWS, n = n0 + j % ROWS;
    if (part == 0 && j < kOut && j / ROWS < m_rows && n < N) {
      float x = alpha * mine;
      if (HAS_C) x += beta * to_f32(c[m * N + n]);
      if (BIAS) x += to_f32(bias[n]);
      d[m * N + n] = from_f32<T>(skinny_act<ACT>(x));
    }
  }
}

template <typename T, int K, int N, int VEC, int ROWS, int KSPLIT, int WARPS, int CHUNK, int MAXM,
          int ACT, bool BIAS, bool HAS_C>
__device__ __forceinline__ void skinny_gemm(const T* __restrict__ a, const T* __restrict__ w,
                                            const T* __restrict__ bias, const T* c, T* d,
                                            long long m_total, float alpha, float beta) {
  static_assert(K % VEC == 0, "K must be a multiple of the vector width");
  static_assert(WARPS % KSPLIT == 0, "a block holds whole groups");
  static_assert(MAXM >= 1 && MAXM <= 16 && (MAXM & (MAXM - 1)) == 0, "MAXM: 1, 2, 4, 8 or 16");
  constexpr int kGroups = WARPS / KSPLIT;
  __shared__ float partial[KSPLIT > 1 ? WARPS * MAXM * ROWS : 1];

  const int group = static_cast<int>(threadIdx.x) / 32 / KSPLIT;
  const long long n0 = (static_cast<long long>(blockIdx.x) * kGroups + group) * ROWS;
  const T* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + (n0 + r < N ? n0 + r : 0) * K;

#define KILN_SKINNY_PASS(MB)                                                                  \
  skinny_pass<T, K, N, VEC, ROWS, KSPLIT, WARPS, CHUNK, MB, ACT, BIAS, HAS_C>(               \
      a, wrow, bias, c, d, n0, m0, m_rows, alpha, beta, partial)
  for (long long m0 = 0; m0 < m_total; m0 += MAXM) {
    const long long left = m_total - m0;
    const int m_rows = static_cast<int>(left < MAXM ? left : MAXM);
    switch (skinny_pass_rows<MAXM>(m_rows)) {  // warp-uniform
      case 1: KILN_SKINNY_PASS(1); break;
      case 2: if constexpr (MAXM >= 2) KILN_SKINNY_PASS(2); break;
      case 4: if constexpr (MAXM >= 4) KILN_SKINNY_PASS(4); break;
      case 8: if constexpr (MAXM >= 8) KILN_SKINNY_PASS(8); break;
      default: if constexpr (MAXM >= 16) KILN_SKINNY_PASS(16); break;
    }
  }
#undef KILN_SKINNY_PASS
}

}  // namespace kiln
