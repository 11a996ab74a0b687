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
// epilogue. No second launch, no workspace. The tensor-core form is at the end of the file.
//
// Programmatic dependent launch: the generated kernel does not start with kernel_enter
// (KernelDef::enters_itself). Each thread issues its first weight loads, then waits for the
// kernels before it, then reads A, C and bias and writes D. The weights are constants no kernel
// writes, so their reads may overlap the previous kernel (a norm, attention) under PDL, where
// most of a decode GEMM's time is that read; launched plainly, nothing changes.
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
__device__ __forceinline__ void skinny_pass(const T* __restrict__ a, const T* const (&wrow)[ROWS],
                                            const T* __restrict__ bias, const T* c, T* d,
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
__device__ __forceinline__ void skinny_gemm(const T* __restrict__ a, const T* __restrict__ w,
                                            const T* __restrict__ bias, const T* c, T* d,
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

// --- Tensor-core form (fp16 and bf16) ----------------------------------------------------------
//
// The same product on mma.sync.m16n8k16 with the operands swapped: W is the 16-row operand and
// the rows of A the 8 columns, so a warp owns 16 rows of W (a tile) and takes A's rows 8 (or 16)
// at a time; sums stay fp32. A warp step covers 64 of K: lane (g = lane / 4, t = lane % 4) loads
// elements 8t .. 8t + 7 and 32 + 8t .. 32 + 8t + 7 of W rows g and g + 8 and of A row g (16-byte
// loads: each load instruction reads 64 contiguous bytes of eight rows, whole 32-byte sectors;
// with 16t .. 16t + 15 it read half-sectors: the Llama gate/up GEMM at M = 8 took 23.8 µs on
// one H200, 20.1-22.4 µs with whole sectors on others), and the four k16 products take them in
// an order of K that is the same in both operands, so the sums are the GEMM's. Warps of a group
// split K (steps p, p + KSPLIT, ...); each keeps a rolling window of CHUNK steps of loads in
// flight. Sums meet in shared memory; the group's first warp applies the epilogue.
// Generated kernels call it through skinny_gemm_dual (below), which keeps one row of A on the
// CUDA-core form.

// c += the 16x16 tile a (four words, mma's A fragment) times the 16x8 tile (b0, b1); the first
// argument picks the element type. Not volatile: the compiler may move the activation loads
// ahead of the products (H200, M = 8: GPT-2 QKV 2.76 -> 2.23 us, Llama O 4.35 -> 3.85, the
// Llama gate/up's best geometry 21.5 -> 19.9).
__device__ __forceinline__ void skinny_mma(f16, float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                           unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void skinny_mma(bf16, float (&c)[4], const unsigned (&a)[4],
                                           unsigned b0, unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The norm prologue on eight elements of one row of A (a fragment's 16 bytes): x - mu, whose
// square is added to `squares`, times the norm's scale (eight elements of it), rounded to T.
template <typename T>
__device__ __forceinline__ SkinnyWords skinny_norm_words(SkinnyWords x, SkinnyWords scale,
                                                         float mu, float& squares) {
  union Words {
    SkinnyWords w;
    Vec<T, 8> v;
  };
  Words in, sc, out;
  in.w = x;
  sc.w = scale;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float y = to_f32(in.v.v[e]) - mu;
    squares = fmaf(y, y, squares);
    out.v.v[e] = from_f32<T>(y * to_f32(sc.v.v[e]));
  }
  return out.w;
}

// One pass: rows [m0, m0 + m_rows) of A, m_rows <= 8 * NT. With a norm (NORM), A holds the
// norm's input x: the products take (x - mu) * scale, and the sums are scaled by each row's
// 1 / sqrt(mean square + eps) before the epilogue, the LayerNorm's bias · W added (the header
// comment's "Norm prologue").
template <typename T, int K, int N, int KSPLIT, int WARPS, int CHUNK, int NT, int ACT, bool BIAS,
          bool HAS_C, bool GATED, int NORM>
__device__ __forceinline__ void skinny_mma_pass(const T* __restrict__ a, const T* __restrict__ w,
                                                const T* __restrict__ bias, const T* c, T* d,
                                                long long n0, long long m0, int m_rows,
                                                float alpha, float beta, const SkinnyNorm<T>& nrm,
                                                float* partial) {
  constexpr int kSteps = (K + 63) / 64;  // warp steps of 64 along K
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int part = warp % KSPLIT, g = lane / 4, t = lane % 4;
  const T* w0 = w + (n0 + g < N ? n0 + g : N - 1) * K;
  const T* w8 = w + (n0 + g + 8 < N ? n0 + g + 8 : N - 1) * K;
  const T* arow[NT];
  bool a_ok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    a_ok[j] = g + 8 * j < m_rows;
    arow[j] = a + (m0 + (a_ok[j] ? g + 8 * j : 0)) * K;
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  // Norm prologue: lane (g, t)'s share of row g + 8j's mean and squares; accb: W times the
  // LayerNorm's bias, which lanes g = 0 supply as activation column 0.
  float mean[NT], squares[NT], accb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < NT; ++j) mean[j] = squares[j] = 0.0f;

  // This warp's steps are part + i·KSPLIT, i < kMine (the last may be past K for some warps).
  // A rolling window of CHUNK steps is in flight: step i's registers take step i + CHUNK's
  // loads as soon as step i is summed, so a warp with more steps than CHUNK streams its share
  // of W without a pause.
  constexpr int kMine = (kSteps + KSPLIT - 1) / KSPLIT;
  const auto load_step = [&](int i, SkinnyWords(&dst)[2][2]) {
    const int step = part + i * KSPLIT;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // In bounds either way (the load may run before the test): a vector past K re-reads the
      // row's first and is zeroed or skipped below. K is a multiple of 8.
      const int k = step * 64 + 32 * h + 8 * t;
      const int kk = step < kSteps && k < K ? k : 0;
      dst[0][h] = skinny_load_words_nc(w0 + kk);
      dst[1][h] = skinny_load_words_nc(w8 + kk);
    }
  };
  SkinnyWords wv[CHUNK][2][2];  // [window slot][row g, g + 8][elements 0-31, 32-63 of the step]
#pragma unroll
  for (int u = 0; u < CHUNK; ++u) load_step(u, wv[u]);
  kernel_enter();  // the first weights are in flight (header comment)
  if constexpr (NORM >= kSkinnyNormLayer) {  // row means, from a first read of the warp's steps
    for (int i = 0; i < kMine; ++i) {
      const int step = part + i * KSPLIT;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = step * 64 + 32 * h + 8 * t;
        if (step >= kSteps || k >= K) continue;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (!a_ok[j]) continue;
          const Vec<T, 8> x = load_vec<T, 8>(arow[j] + k);
#pragma unroll
          for (int e = 0; e < 8; ++e) mean[j] += to_f32(x.v[e]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      mean[j] += __shfl_xor_sync(0xffffffffu, mean[j], 1);
      mean[j] += __shfl_xor_sync(0xffffffffu, mean[j], 2);
    }
    skinny_warps_sum<NT, KSPLIT, 32>(mean, partial);
#pragma unroll
    for (int j = 0; j < NT; ++j) mean[j] /= static_cast<float>(K);
  }
  for (int i0 = 0; i0 < kMine; i0 += CHUNK) {
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int i = i0 + u, step = part + i * KSPLIT;
      if (i < kMine && step < kSteps) {  // warp-uniform
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int k = step * 64 + 32 * h + 8 * t;
          const bool in_k = k < K;
          SkinnyWords av[NT];
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            av[j] = SkinnyWords{{0u, 0u, 0u, 0u}};
            if (in_k && a_ok[j]) av[j] = *reinterpret_cast<const SkinnyWords*>(arow[j] + k);
          }
          if (!in_k) wv[u][0][h] = wv[u][1][h] = SkinnyWords{{0u, 0u, 0u, 0u}};
          SkinnyWords bw = SkinnyWords{{0u, 0u, 0u, 0u}};
          if constexpr (NORM != kSkinnyNormNone) {
            SkinnyWords sw = SkinnyWords{{0u, 0u, 0u, 0u}};
            if (in_k) sw = *reinterpret_cast<const SkinnyWords*>(nrm.scale + k);
#pragma unroll
            for (int j = 0; j < NT; ++j)
              if (in_k && a_ok[j]) av[j] = skinny_norm_words<T>(av[j], sw, mean[j], squares[j]);
            if (NORM == kSkinnyNormLayerBias && in_k && g == 0)
              bw = *reinterpret_cast<const SkinnyWords*>(nrm.bias + k);
          }
#pragma unroll
          for (int q = 0; q < 2; ++q) {  // two k16 products per 8 elements of each lane
            const unsigned fa[4] = {wv[u][0][h].u[2 * q], wv[u][1][h].u[2 * q],
                                    wv[u][0][h].u[2 * q + 1], wv[u][1][h].u[2 * q + 1]};
#pragma unroll
            for (int j = 0; j < NT; ++j)
              skinny_mma(T{}, acc[j], fa, av[j].u[2 * q], av[j].u[2 * q + 1]);
            if constexpr (NORM == kSkinnyNormLayerBias)
              skinny_mma(T{}, accb, fa, bw.u[2 * q], bw.u[2 * q + 1]);
          }
        }
      }
      if (i + CHUNK < kMine) load_step(i + CHUNK, wv[u]);
    }
  }

  // acc[j]: rows (g, g, g + 8, g + 8) of the tile, activation rows 8j + 2t + (0, 1, 0, 1).
  skinny_warps_sum<NT * 4, KSPLIT, 32>(&acc[0][0], partial);
  if constexpr (NORM != kSkinnyNormNone) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 1);
      squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 2);
    }
    skinny_warps_sum<NT, KSPLIT, 32>(squares, partial);
    if constexpr (NORM == kSkinnyNormLayerBias) skinny_warps_sum<4, KSPLIT, 32>(accb, partial);
    // Bias · W of rows g and g + 8 is lane (g, 0)'s column 0; activation row 2t (+ 1)'s factor
    // is lane (2t (+ 1), any)'s.
    const float bw0 = NORM == kSkinnyNormLayerBias ? __shfl_sync(0xffffffffu, accb[0], lane & ~3)
                                                   : 0.0f;
    const float bw8 = NORM == kSkinnyNormLayerBias ? __shfl_sync(0xffffffffu, accb[2], lane & ~3)
                                                   : 0.0f;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float r = 1.0f / sqrtf(squares[j] / static_cast<float>(K) + nrm.eps);
      const float r0 = __shfl_sync(0xffffffffu, r, 8 * t);
      const float r1 = __shfl_sync(0xffffffffu, r, 8 * t + 4);
      acc[j][0] = fmaf(acc[j][0], r0, bw0);
      acc[j][1] = fmaf(acc[j][1], r1, bw0);
      acc[j][2] = fmaf(acc[j][2], r0, bw8);
      acc[j][3] = fmaf(acc[j][3], r1, bw8);
    }
  }
  if (part != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int mi = 8 * j + 2 * t + (i & 1);
      const long long n = n0 + g + (i >= 2 ? 8 : 0), m = m0 + mi;
      if (GATED) {
        // Row n + 1 of W (the up row of gate row n, g even) is lane + 4's.
        const float up = __shfl_down_sync(0xffffffffu, acc[j][i], 4);
        if (g % 2 == 0 && mi < m_rows && n < N)
          d[m * (N / 2) + n / 2] = from_f32<T>(skinny_act<ACT>(alpha * acc[j][i]) * (alpha * up));
        continue;
      }
      if (mi >= m_rows || n >= N) continue;
      float x = alpha * acc[j][i];
      if (HAS_C) x += beta * to_f32(c[m * N + n]);
      if (BIAS) x += to_f32(bias[n]);
      d[m * N + n] = from_f32<T>(skinny_act<ACT>(x));
    }
}

template <typename T, int K, int N, int KSPLIT, int WARPS, int CHUNK, int MAXM, int ACT, bool BIAS,
          bool HAS_C, bool GATED, int NORM = kSkinnyNormNone>
__device__ __forceinline__ void skinny_gemm_mma(const T* __restrict__ a, const T* __restrict__ w,
                                                const T* __restrict__ bias, const T* c, T* d,
                                                long long m_total, float alpha, float beta,
                                                SkinnyNorm<T> nrm = {}) {
  static_assert(K % 8 == 0, "K must be a multiple of 8 (16-byte vectors)");
  static_assert(WARPS % KSPLIT == 0, "a block holds whole groups");
  static_assert(MAXM >= 1 && MAXM <= 16, "MAXM: at most 16");
  static_assert(!GATED || (N % 2 == 0 && !BIAS && !HAS_C), "the gated form: no bias, no C");
  constexpr int kGroups = WARPS / KSPLIT;
  constexpr int kMostTiles = MAXM > 8 ? 2 : 1;
  __shared__ float partial[KSPLIT > 1 ? WARPS * kMostTiles * 4 * 32 : 1];
  const int group = static_cast<int>(threadIdx.x) / 32 / KSPLIT;
  const long long n0 = (static_cast<long long>(blockIdx.x) * kGroups + group) * 16;
  constexpr int kPass = 8 * kMostTiles;
  for (long long m0 = 0; m0 < m_total; m0 += kPass) {
    const long long left = m_total - m0;
    const int m_rows = static_cast<int>(left < kPass ? left : kPass);
    if (kMostTiles == 1 || m_rows <= 8)  // block-uniform
      skinny_mma_pass<T, K, N, KSPLIT, WARPS, CHUNK, 1, ACT, BIAS, HAS_C, GATED, NORM>(
          a, w, bias, c, d, n0, m0, m_rows, alpha, beta, nrm, partial);
    else
      skinny_mma_pass<T, K, N, KSPLIT, WARPS, CHUNK, kMostTiles, ACT, BIAS, HAS_C, GATED, NORM>(
          a, w, bias, c, d, n0, m0, m_rows, alpha, beta, nrm, partial);
  }
}

// Both forms in one launch, for GEMMs whose M is 1 at some sizes and more at others: one row
// takes the CUDA-core form (faster there), more rows the tensor-core form. The grid is the
// CUDA-core form's (codegen makes sure it has at least as many blocks as the tensor-core form
// needs); the block has WARPS warps for both.
template <typename T, int K, int N, int VEC, int ROWS, int KSPLIT, int CHUNK, int MKSPLIT,
          int MCHUNK, int WARPS, int MAXM, int ACT, bool BIAS, bool HAS_C, bool GATED,
          int NORM = kSkinnyNormNone>
__device__ __forceinline__ void skinny_gemm_dual(const T* __restrict__ a, const T* __restrict__ w,
                                                 const T* __restrict__ bias, const T* c, T* d,
                                                 long long m_total, float alpha, float beta,
                                                 SkinnyNorm<T> nrm = {}) {
  static_assert((WARPS / KSPLIT) * ROWS <= 16 * (WARPS / MKSPLIT),
                "the CUDA-core grid must cover the tensor-core form's blocks");
  if (m_total <= 1) {  // grid-uniform
    skinny_gemm<T, K, N, VEC, ROWS, KSPLIT, WARPS, CHUNK, 1, ACT, BIAS, HAS_C, GATED, NORM>(
        a, w, bias, c, d, m_total, alpha, beta, nrm);
    return;
  }
  constexpr long long kRowsPerBlock = 16LL * (WARPS / MKSPLIT);
  if (static_cast<long long>(blockIdx.x) * kRowsPerBlock >= N) return;
  skinny_gemm_mma<T, K, N, MKSPLIT, WARPS, MCHUNK, MAXM, ACT, BIAS, HAS_C, GATED, NORM>(
      a, w, bias, c, d, m_total, alpha, beta, nrm);
}

// The gated form's epilogue where cuBLASLt computed the product: t is [M, N] with gate and up
// columns interleaved (column 2j the gate of output column j, 2j + 1 its up projection), out is
// [M, N / 2]; out[i] = act(t[2i]) * t[2i + 1] for i < count = M * N / 2. One thread an output.
template <typename T, int ACT>
__device__ __forceinline__ void gated_pairs(const T* __restrict__ t, T* __restrict__ out,
                                            long long count) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const Vec<T, 2> v = load_vec<T, 2>(t + 2 * i);
  out[i] = from_f32<T>(skinny_act<ACT>(to_f32(v.v[0])) * to_f32(v.v[1]));
}

}  // namespace kiln
