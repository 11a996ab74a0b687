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
// vector is widened once and used for every row of the pass. They are reduced across the warp
// with shuffles, across the group through shared memory, and the group's first warp applies the
// epilogue. No second launch, no workspace. The tensor-core form is in skinny_gemm_mma.cuh.
//
// Programmatic dependent launch: the generated kernel does not start with kernel_enter
// (KernelDef::enters_itself). Each thread issues its first weight loads, then waits for the
// kernels before it, then reads A, C and bias and writes D. The weights are constants no kernel
// writes (the lowering gives only a constant W a skinny kernel), so their reads may overlap the
// previous kernel (a norm, attention) under PDL, where most of a decode GEMM's time is that
// read; launched plainly, nothing changes. Everything else is read through pointers that are not
// __restrict__, so with plain (coherent) loads: through a `const __restrict__` pointer the
// compiler reads with ld.global.nc, which is only valid for data nothing writes while the kernel
// lives, and under PDL the kernel before still writes A while this one starts. Seen on an H200
// with A read that way: gated fp32 kernels whose K loop takes two or more chunks (kernel_enter in
// the first) returned NaN, the poison of a debug run's arena, where the Gather before them writes
// A: with PDL only, and more or fewer rows from run to run.
//
// Gated form (GATED = true; no bias, no C): W's rows come in pairs, row 2j the gate and row
// 2j + 1 the up projection of output column j, and the epilogue writes
//   D[m, j] = act(alpha * sum of row 2j) * (alpha * sum of row 2j + 1),   D: [M, N / 2]
// (the MLP of Llama-style models: SiLU(x·Wg) · (x·Wu) in one launch). At sizes where cuBLASLt
// computes the product instead, gated_pairs (the end of the file) applies the same epilogue to
// its [M, N] result.
//
// Norm prologue (NORM != kSkinnyNormNone): A is the input x of a LayerNorm or RMSNorm over its
// rows (K elements, all of a row in the group's sums), and the kernel multiplies W by the
// normalised rows instead:
//   RMSNorm:   A'[m, k] = x[m, k] * r[m] * scale[k],            r[m] = 1 / sqrt(mean_k x² + eps)
//   LayerNorm: A'[m, k] = (x[m, k] - mu[m]) * r[m] * scale[k] + bias[k]   (r of the centred x)
// r[m] is a per-row factor, so a lane sums x·scale·W (and the squares of x) as it reads them,
// and scales its partial sums by r once the group has added up the squares; the LayerNorm's
// bias contributes sum_k bias[k] W[n, k], summed from the same weight vectors. mu[m] comes from
// a first read of the rows (centred sums, as the norm kernel computes them). A' is never rounded
// to T. The tensor-core form does the same with A's fragments: it feeds (x - mu) * scale,
// rounded to T, to the products, and its bias · W is one more product whose activation column 0
// holds the bias (see there). Where cuBLASLt computes the GEMM, the norm runs as a kernel of its
// own (KernelStep.before_cublaslt).
#pragma once

namespace kiln {

enum SkinnyAct {
  kSkinnyActNone = 0,
  kSkinnyActRelu = 1,
  kSkinnyActGeluTanh = 2,
  kSkinnyActSilu = 3,  // x * sigmoid(x)
  kSkinnyActGelu = 4,  // the erf form
};

enum SkinnyNormKind {
  kSkinnyNormNone = 0,
  kSkinnyNormRms = 1,
  kSkinnyNormLayer = 2,      // LayerNorm without a bias
  kSkinnyNormLayerBias = 3,  // LayerNorm with a bias
};

// The norm prologue's parameters (unused with kSkinnyNormNone): scale and bias are [K].
template <typename T>
struct SkinnyNorm {
  const T* scale;
  const T* bias;
  float eps;
};

template <int ACT>
__device__ __forceinline__ float skinny_act(float x) {
  if (ACT == kSkinnyActRelu) return op_relu(x);  // NaN stays NaN, as in the graph
  if (ACT == kSkinnyActGeluTanh) return op_gelu_tanh(x);
  if (ACT == kSkinnyActSilu) return x * op_sigmoid(x);
  if (ACT == kSkinnyActGelu) return op_gelu(x);
  return x;
}

// 16 bytes as four 32-bit words.
struct SkinnyWords {
  unsigned u[4];
};

// 16 bytes of W, read once: through the non-coherent path, not kept in L1. Volatile, so the
// compiler keeps it before kernel_enter where the code puts it there.
__device__ __forceinline__ SkinnyWords skinny_load_words_nc(const void* p) {
  SkinnyWords r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3])
      : "l"(p));
  return r;
}

// A VEC-element vector of W, loaded once: 16-byte vectors as skinny_load_words_nc, narrower
// ones with a plain load.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> skinny_load_weight(const T* p) {
  if constexpr (sizeof(Vec<T, VEC>) == 16) {
    union {
      Vec<T, VEC> v;
      SkinnyWords w;
    } r;
    r.w = skinny_load_words_nc(p);
    return r.v;
  } else {
    return load_vec<T, VEC>(p);
  }
}

// v[c] summed over the KSPLIT warps of this thread's group (KSPLIT warps in a row), every warp
// of the group getting the same totals (the same order of sums). LANES = 32: lane by lane (each
// lane's own sums); LANES = 1: each warp's v, which all its lanes hold alike. Called by the whole
// block (it synchronises); `scratch` holds WARPS * CNT * LANES floats.
template <int CNT, int KSPLIT, int LANES>
__device__ __forceinline__ void skinny_warps_sum(float* v, float* scratch) {
  static_assert(LANES == 1 || LANES == 32, "LANES: 1 or 32");
  if (KSPLIT == 1) return;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int slot = lane % LANES;
  if (LANES == 32 || lane == 0)
#pragma unroll
    for (int c = 0; c < CNT; ++c) scratch[(warp * CNT + c) * LANES + slot] = v[c];
  __syncthreads();
  const int first = warp - warp % KSPLIT;
#pragma unroll
  for (int c = 0; c < CNT; ++c) {
    float t = 0.0f;
#pragma unroll
    for (int q = 0; q < KSPLIT; ++q) t += scratch[((first + q) * CNT + c) * LANES + slot];
    v[c] = t;
  }
  __syncthreads();
}

// Sums v[c] over the warps of this thread's group; every lane of the group gets the same totals.
// Called by the whole block (it synchronises).
template <int CNT, int KSPLIT>
__device__ __forceinline__ void skinny_group_sum(float (&v)[CNT], float* scratch) {
#pragma unroll
  for (int c = 0; c < CNT; ++c) v[c] = warp_reduce_sum(v[c]);
  skinny_warps_sum<CNT, KSPLIT, 1>(v, scratch);
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
          int ACT, bool BIAS, bool HAS_C, bool GATED, int NORM>
__device__ __forceinline__ void skinny_pass(const T* a, const T* const (&wrow)[ROWS],
                                            const T* bias, const T* c, T* d,
                                            long long n0, long long m0, int m_rows, float alpha,
                                            float beta, const SkinnyNorm<T>& nrm, float* partial) {
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
  // Norm prologue (header comment): row means (LayerNorm), sums of squares, bias · W.
  float mean[MB], squares[MB], bias_w[ROWS];
#pragma unroll
  for (int m = 0; m < MB; ++m) mean[m] = squares[m] = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) bias_w[r] = 0.0f;

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
    // The first weights are in flight: now wait for the kernels before (header comment).
    if (it0 == 0) {
      kernel_enter();
      if constexpr (NORM >= kSkinnyNormLayer) {  // the row means, from a first read of the rows
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
          const int v = it * kStride + part * 32 + lane;
#pragma unroll
          for (int m = 0; m < MB; ++m) {
            if (m >= m_rows || v >= kVectors) continue;
            const Vec<T, VEC> av = load_vec<T, VEC>(a + (m0 + m) * K + v * VEC);
#pragma unroll
            for (int i = 0; i < VEC; ++i) mean[m] += to_f32(av.v[i]);
          }
        }
        skinny_group_sum<MB, KSPLIT>(mean, partial);
#pragma unroll
        for (int m = 0; m < MB; ++m) mean[m] /= static_cast<float>(K);
      }
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
      float scale[VEC];
      if constexpr (NORM != kSkinnyNormNone) {
        const Vec<T, VEC> sv = load_vec<T, VEC>(nrm.scale + v * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i) scale[i] = to_f32(sv.v[i]);
      }
      if constexpr (NORM == kSkinnyNormLayerBias) {
        const Vec<T, VEC> bv = load_vec<T, VEC>(nrm.bias + v * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) bias_w[r] = fmaf(to_f32(bv.v[i]), wf[r][i], bias_w[r]);
      }
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        if (m >= m_rows) continue;
        const Vec<T, VEC> av = load_vec<T, VEC>(a + (m0 + m) * K + v * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float x = to_f32(av.v[i]);
          if constexpr (NORM != kSkinnyNormNone) {
            x -= mean[m];  // 0 for RMSNorm
            squares[m] = fmaf(x, x, squares[m]);
            x *= scale[i];
          }
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(x, wf[r][i], acc[m][r]);
        }
      }
    }
  }

  if constexpr (NORM != kSkinnyNormNone) {
    // Each lane's sums times its row's 1 / sqrt(mean square + eps), plus its share of bias · W:
    // the group's totals are then the normalised rows' sums.
    skinny_group_sum<MB, KSPLIT>(squares, partial);
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float r = 1.0f / sqrtf(squares[m] / static_cast<float>(K) + nrm.eps);
#pragma unroll
      for (int q = 0; q < ROWS; ++q) acc[m][q] = fmaf(acc[m][q], r, bias_w[q]);
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
    if (GATED) {
      // ROWS is even: a gate row's sum (j even) and its up row's (j + 1) are in neighbour lanes.
      const float up = __shfl_down_sync(0xffffffffu, mine, 1);
      if (part == 0 && j < kOut && j / ROWS < m_rows && n < N && j % 2 == 0)
        d[m * (N / 2) + n / 2] = from_f32<T>(skinny_act<ACT>(alpha * mine) * (alpha * up));
      continue;
    }
    if (part == 0 && j < kOut && j / ROWS < m_rows && n < N) {
      float x = alpha * mine;
      if (HAS_C) x += beta * to_f32(c[m * N + n]);
      if (BIAS) x += to_f32(bias[n]);
      d[m * N + n] = from_f32<T>(skinny_act<ACT>(x));
    }
  }
}

template <typename T, int K, int N, int VEC, int ROWS, int KSPLIT, int WARPS, int CHUNK, int MAXM,
          int ACT, bool BIAS, bool HAS_C, bool GATED, int NORM = kSkinnyNormNone>
__device__ __forceinline__ void skinny_gemm(const T* a, const T* __restrict__ w,
                                            const T* bias, const T* c, T* d,
                                            long long m_total, float alpha, float beta,
                                            SkinnyNorm<T> nrm = {}) {
  static_assert(K % VEC == 0, "K must be a multiple of the vector width");
  static_assert(!GATED || (ROWS % 2 == 0 && N % 2 == 0 && !BIAS && !HAS_C),
                "the gated form: pairs of rows in a group, no bias, no C");
  static_assert(WARPS % KSPLIT == 0, "a block holds whole groups");
  static_assert(MAXM >= 1 && MAXM <= 16 && (MAXM & (MAXM - 1)) == 0, "MAXM: 1, 2, 4, 8 or 16");
  constexpr int kGroups = WARPS / KSPLIT;
  // The group's sums meet here, and the norm prologue's row statistics (MAXM a warp) before.
  __shared__ float partial[KSPLIT > 1 ? WARPS * MAXM * ROWS : 1];

  const int group = static_cast<int>(threadIdx.x) / 32 / KSPLIT;
  const long long n0 = (static_cast<long long>(blockIdx.x) * kGroups + group) * ROWS;
  const T* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + (n0 + r < N ? n0 + r : 0) * K;

#define KILN_SKINNY_PASS(MB)                                                                  \
  skinny_pass<T, K, N, VEC, ROWS, KSPLIT, WARPS, CHUNK, MB, ACT, BIAS, HAS_C, GATED, NORM>(  \
      a, wrow, bias, c, d, n0, m0, m_rows, alpha, beta, nrm, partial)
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

// The gated form's epilogue where cuBLASLt computed the product: t is [M, N] with gate and up
// columns interleaved (column 2j the gate of output column j, 2j + 1 its up projection), out is
// [M, N / 2]; out[i] = act(t[2i]) * t[2i + 1] for i < count = M * N / 2. VEC outputs a thread
// (one load of 2·VEC elements, one store of VEC): count and N / 2 are multiples of VEC.
template <typename T, int ACT, int VEC = 1>
__device__ __forceinline__ void gated_pairs(const T* __restrict__ t, T* __restrict__ out,
                                            long long count) {
  const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (i >= count) return;
  const Vec<T, 2 * VEC> v = load_vec<T, 2 * VEC>(t + 2 * i);
  Vec<T, VEC> r;
#pragma unroll
  for (int k = 0; k < VEC; ++k)
    r.v[k] = from_f32<T>(skinny_act<ACT>(to_f32(v.v[2 * k])) * to_f32(v.v[2 * k + 1]));
  store_vec<T, VEC>(out + i, r);
}

}  // namespace kiln
