// Skinny GEMM, the tensor-core form (fp16 and bf16): the product of skinny_gemm.cuh (read its
// header comment first: the epilogue, the gated form, the norm prologue and programmatic
// dependent launch are the same here), on tensor cores. It uses that file's helpers
// (SkinnyWords, skinny_warps_sum, skinny_act, SkinnyNorm), which every module includes first.
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
#pragma once

namespace kiln {

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
__device__ __forceinline__ void skinny_mma_pass(const T* a, const T* __restrict__ w,
                                                const T* bias, const T* c, T* d,
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
  // With kAWin, the activations of the window's steps are loaded with their weights (after
  // kernel_enter: the kernel before writes A), so a step's products wait for no load of their
  // own; without, each step loads them when it needs them. Only where the window rolls (a warp
  // has more steps than CHUNK) and the block is small: the extra registers cost blocks per SM.
  // Measured on an H200 (kernels_bench_skinny_gemm, fp16, M = 8, µs, best geometry without ->
  // with): the Llama gate/up 19.4 -> 15.4 (2 K-splits, 16 steps a warp, 4 warps), its LM head
  // 39.1 -> 38.3; in blocks of 16 warps (the down projection) 10.6 -> 11.3. The norm's scale is
  // loaded at use either way (every warp reads the same K values, from L1), not in the window:
  // fewer registers; same H200 run, fp16, M = 8, best geometry, window -> at use: the Llama
  // gate/up with its RMSNorm 20.9 -> 18.9 µs, its QKV with the RMSNorm 7.7 -> 8.2.
  constexpr bool kAWin = kMine > CHUNK && WARPS <= 8;
  constexpr int kWin = kAWin ? CHUNK : 1;
  SkinnyWords aw[kWin][2][NT];
  const auto load_a = [&](int i, SkinnyWords(&da)[2][NT]) {
    const int step = part + i * KSPLIT;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = step * 64 + 32 * h + 8 * t;
      const bool in_k = step < kSteps && k < K;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        da[h][j] = SkinnyWords{{0u, 0u, 0u, 0u}};
        if (in_k && a_ok[j]) da[h][j] = *reinterpret_cast<const SkinnyWords*>(arow[j] + k);
      }
    }
  };
  if constexpr (kAWin)
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) load_a(u, aw[u]);
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
          SkinnyWords av[NT], sv = SkinnyWords{{0u, 0u, 0u, 0u}};
          if constexpr (kAWin) {
#pragma unroll
            for (int j = 0; j < NT; ++j) av[j] = aw[u][h][j];
          } else {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              av[j] = SkinnyWords{{0u, 0u, 0u, 0u}};
              if (in_k && a_ok[j]) av[j] = *reinterpret_cast<const SkinnyWords*>(arow[j] + k);
            }
          }
          if (NORM != kSkinnyNormNone && in_k)
            sv = *reinterpret_cast<const SkinnyWords*>(nrm.scale + k);
          if (!in_k) wv[u][0][h] = wv[u][1][h] = SkinnyWords{{0u, 0u, 0u, 0u}};
          SkinnyWords bw = SkinnyWords{{0u, 0u, 0u, 0u}};
          if constexpr (NORM != kSkinnyNormNone) {
#pragma unroll
            for (int j = 0; j < NT; ++j)
              if (in_k && a_ok[j]) av[j] = skinny_norm_words<T>(av[j], sv, mean[j], squares[j]);
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
      if (i + CHUNK < kMine) {
        load_step(i + CHUNK, wv[u]);
        if constexpr (kAWin) load_a(i + CHUNK, aw[u]);
      }
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
__device__ __forceinline__ void skinny_gemm_mma(const T* a, const T* __restrict__ w,
                                                const T* bias, const T* c, T* d,
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
__device__ __forceinline__ void skinny_gemm_dual(const T* a, const T* __restrict__ w,
                                                 const T* bias, const T* c, T* d,
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

}  // namespace kiln
