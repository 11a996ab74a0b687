// kiln.Attention, prefill (compiler/ops/kiln_ops.md): Y = softmax(scale·Q·Kᵀ + mask) · V with
// causal / key-padding exclusion, GQA, online softmax in fp32. Q, K, V and Y are strided views
// (a base pointer already offset, strides for batch, head, sequence and head dim), so the
// lowering can read a fused QKV GEMM output and write the merged-heads [B, S, H·Dv] buffer in
// place. Two kernels:
//  - attention_prefill_simt: any head dims, any strides, f32/f16/bf16; a warp per query row.
//  - attention_prefill_mma: f16/bf16, D = Dv in {64, 80, 96, 128}, unit head-dim stride and
//    16-byte aligned rows; FlashAttention-2 style tiles on mma.sync m16n8k16 with ldmatrix and
//    double-buffered cp.async K/V tiles.
// Grid: x over query tiles, y over B·Hq. A row whose keys are all excluded yields zeros.
#pragma once
#include "common.cuh"
#include "dtype.cuh"

namespace kiln {

// Every pointer is already offset to element [0, 0, 0, 0] of its view; strides in elements.
// mask: additive, broadcast strides (0 on broadcast dims); kpad: [B, Skv] with batch stride.
template <typename T, typename TM, typename TK>
struct AttnParams {
  const T* q;
  const T* k;
  const T* v;
  T* o;
  const TM* mask;  // nullptr: none
  const TK* kpad;  // nullptr: none
  i64 q_sb, q_sh, q_ss, q_sd;
  i64 k_sb, k_sh, k_ss, k_sd;
  i64 v_sb, v_sh, v_ss, v_sd;
  i64 o_sb, o_sh, o_ss, o_sd;
  i64 m_sb, m_sh, m_sq, m_sk;
  i64 kp_sb;
  i64 B, Hq, Hkv, Sq, Skv;
  int D, Dv;
  float scale;
  bool causal;  // query i sees key j only when j <= i + (Skv - Sq)
};

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x; 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- generic path -------------------------------------------------------------------------------

// WARPS query rows per block (one per warp); each lane owns output dims lane + 32·t, t < DVL
// (DVL = ceil(Dv / 32)). Shared memory: WARPS·D floats (the scaled query rows).
template <typename T, typename TM, typename TK, int WARPS, int DVL>
__device__ void attention_prefill_simt(const AttnParams<T, TM, TK>& p) {
  extern __shared__ float attn_smem_f[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 bh = blockIdx.y;
  const i64 b = bh / p.Hq, h = bh % p.Hq, hk = h / (p.Hq / p.Hkv);
  const i64 i = static_cast<i64>(blockIdx.x) * WARPS + warp;
  if (i >= p.Sq) return;  // no block-wide barrier below
  float* qs = attn_smem_f + warp * p.D;
  const T* qrow = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
  for (int d = lane; d < p.D; d += 32) qs[d] = to_f32(qrow[d * p.q_sd]);
  __syncwarp();
  const T* kbase = p.k + b * p.k_sb + hk * p.k_sh;
  const T* vbase = p.v + b * p.v_sb + hk * p.v_sh;
  i64 jend = p.Skv;
  if (p.causal) {
    const i64 last = i + (p.Skv - p.Sq) + 1;
    jend = last < jend ? last : jend;
  }
  float m = neg_inf(), l = 0.0f;
  float acc[DVL];
#pragma unroll
  for (int t = 0; t < DVL; ++t) acc[t] = 0.0f;
  for (i64 j0 = 0; j0 < jend; j0 += 32) {
    const i64 j = j0 + lane;
    float s = neg_inf();
    if (j < jend && (p.kpad == nullptr || to_f32(p.kpad[b * p.kp_sb + j]) != 0.0f)) {
      const T* kr = kbase + j * p.k_ss;
      float dot = 0.0f;
      for (int d = 0; d < p.D; ++d) dot += qs[d] * to_f32(kr[d * p.k_sd]);
      s = dot * p.scale;
      if (p.mask != nullptr)
        s += to_f32(p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk]);
    }
    const float m_new = fmaxf(m, warp_reduce_max(s));
    if (m_new == neg_inf()) continue;  // every key so far excluded
    const float corr = expf(m - m_new);
    const float pj = s == neg_inf() ? 0.0f : expf(s - m_new);
    l = l * corr + warp_reduce_sum(pj);
#pragma unroll
    for (int t = 0; t < DVL; ++t) acc[t] *= corr;
    const int n = jend - j0 < 32 ? static_cast<int>(jend - j0) : 32;
    for (int jj = 0; jj < n; ++jj) {
      const float pjj = __shfl_sync(0xffffffffu, pj, jj);
      if (pjj == 0.0f) continue;  // excluded key (uniform across the warp)
      const T* vr = vbase + (j0 + jj) * p.v_ss;
#pragma unroll
      for (int t = 0; t < DVL; ++t) {
        const int d = lane + 32 * t;
        if (d < p.Dv) acc[t] += pjj * to_f32(vr[d * p.v_sd]);
      }
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* orow = p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss;
#pragma unroll
  for (int t = 0; t < DVL; ++t) {
    const int d = lane + 32 * t;
    if (d < p.Dv) orow[d * p.o_sd] = from_f32<T>(acc[t] * inv);
  }
}

// ---- tensor-core path ---------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// 16 bytes global → shared; bytes = 0 fills zeros (rows past the end).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a·b, m16n8k16, fp32 accumulate.
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1, f16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1, bf16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats → packed 16-bit pair, `lo` in the low half.
__device__ __forceinline__ unsigned pack2(float lo, float hi, f16) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned pack2(float lo, float hi, bf16) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// ROWS rows of D 16-bit elements from `src` (row stride `ss`, rows >= `limit` zero-filled)
// into shared memory at `dst` (row pitch D + 8 elements: ldmatrix rows hit distinct banks).
template <int ROWS, int D, int NT>
__device__ __forceinline__ void attn_load_tile(unsigned dst, const unsigned short* src, i64 ss,
                                               i64 row0, i64 limit) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += NT) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const i64 row = row0 + r;
    const bool in = row < limit;
    const unsigned short* g = in ? src + row * ss + col : src;
    cp_async16(dst + (r * (D + 8) + col) * 2, g, in ? 16 : 0);
  }
}

// BM = 16·WARPS query rows per block, BN keys per tile. Shared memory (16-bit elements):
// Q BM·(D+8), then K and V, two buffers each of BN·(D+8).
template <typename T, typename TM, typename TK, int D, int WARPS, int BN, bool CAUSAL,
          bool HAS_MASK, bool HAS_KPAD>
__device__ void attention_prefill_mma(const AttnParams<T, TM, TK>& p) {
  constexpr int BM = 16 * WARPS, NT = 32 * WARPS, P = D + 8;
  constexpr int KC = D / 16;   // k-steps of Q·Kᵀ
  constexpr int NB = BN / 8;   // 8-key blocks of a tile
  constexpr int DB = D / 8;    // 8-wide output blocks
  extern __shared__ __align__(16) unsigned short attn_smem_h[];
  unsigned short* sQ = attn_smem_h;
  const unsigned sQa = smem_addr(sQ);
  const unsigned sKa = sQa + BM * P * 2;
  const unsigned sVa = sKa + 2 * BN * P * 2;
  constexpr unsigned kTileBytes = BN * P * 2;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const i64 bh = blockIdx.y;
  const i64 b = bh / p.Hq, h = bh % p.Hq, hk = h / (p.Hq / p.Hkv);
  // Heaviest (latest, under a causal mask) query tiles first.
  const i64 m0 = static_cast<i64>(gridDim.x - 1 - blockIdx.x) * BM;
  const i64 off = p.Skv - p.Sq;
  i64 n_end = p.Skv;
  if (CAUSAL) {
    const i64 last = m0 + BM + off;
    n_end = last < n_end ? last : n_end;
  }
  const int n_tiles = n_end > 0 ? static_cast<int>((n_end + BN - 1) / BN) : 0;

  const unsigned short* qg =
      reinterpret_cast<const unsigned short*>(p.q + b * p.q_sb + h * p.q_sh);
  const unsigned short* kg =
      reinterpret_cast<const unsigned short*>(p.k + b * p.k_sb + hk * p.k_sh);
  const unsigned short* vg =
      reinterpret_cast<const unsigned short*>(p.v + b * p.v_sb + hk * p.v_sh);

  attn_load_tile<BM, D, NT>(sQa, qg, p.q_ss, m0, p.Sq);
  if (n_tiles > 0) {
    attn_load_tile<BN, D, NT>(sKa, kg, p.k_ss, 0, p.Skv);
    attn_load_tile<BN, D, NT>(sVa, vg, p.v_ss, 0, p.Skv);
  }
  cp_async_commit();

  const float sl2 = p.scale * kLog2e;
  const i64 row_a = m0 + warp * 16 + g, row_b = row_a + 8;  // this thread's two query rows
  unsigned qf[KC][4];
  float o[DB][4];
#pragma unroll
  for (int d = 0; d < DB; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float mx_a = neg_inf(), mx_b = neg_inf(), l_a = 0.0f, l_b = 0.0f;

  for (int t = 0; t < n_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < n_tiles) {
      const unsigned nb = (buf ^ 1) * kTileBytes;
      attn_load_tile<BN, D, NT>(sKa + nb, kg, p.k_ss, static_cast<i64>(t + 1) * BN, p.Skv);
      attn_load_tile<BN, D, NT>(sVa + nb, vg, p.v_ss, static_cast<i64>(t + 1) * BN, p.Skv);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == 0) {
      const int mi = lane >> 3, r = lane & 7;
#pragma unroll
      for (int kc = 0; kc < KC; ++kc)
        ldmatrix_x4(qf[kc],
                    sQa + ((warp * 16 + (mi & 1) * 8 + r) * P + kc * 16 + (mi >> 1) * 8) * 2);
    }
    const unsigned sK = sKa + buf * kTileBytes, sV = sVa + buf * kTileBytes;
    const i64 n0 = static_cast<i64>(t) * BN;

    // S = Q·Kᵀ for this warp's 16 rows and BN keys.
    float s[NB][4];
#pragma unroll
    for (int n = 0; n < NB; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    {
      const int mi = lane >> 3, r = lane & 7;
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
          unsigned kb[4];
          ldmatrix_x4(kb, sK + ((np * 16 + (mi >> 1) * 8 + r) * P + kc * 16 + (mi & 1) * 8) * 2);
          mma16816(s[2 * np], qf[kc], kb[0], kb[1], T());
          mma16816(s[2 * np + 1], qf[kc], kb[2], kb[3], T());
        }
      }
    }

    // Scale into the log2 domain, apply exclusions and the additive mask.
    const bool edge = n0 + BN > p.Skv || (CAUSAL && n0 + BN - 1 > m0 + off);
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * sl2;
        if (edge || HAS_MASK || HAS_KPAD) {
          const i64 j = n0 + n * 8 + 2 * tq + (e & 1);
          const i64 i = e < 2 ? row_a : row_b;
          bool keep = j < p.Skv;
          if (CAUSAL) keep = keep && j <= i + off;
          if (HAS_KPAD && keep) keep = to_f32(p.kpad[b * p.kp_sb + j]) != 0.0f;
          if (HAS_MASK && keep && i < p.Sq)
            x += to_f32(p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk]) * kLog2e;
          if (!keep) x = neg_inf();
        }
        s[n][e] = x;
      }

    // Online softmax: each row's max over the quad (4 lanes share a row).
    float ta = neg_inf(), tb = neg_inf();
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      ta = fmaxf(ta, fmaxf(s[n][0], s[n][1]));
      tb = fmaxf(tb, fmaxf(s[n][2], s[n][3]));
    }
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 1));
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 2));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 1));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 2));
    const float na = fmaxf(mx_a, ta), nbm = fmaxf(mx_b, tb);
    // A row with nothing visible yet keeps max -inf; subtract 0 so exp2(-inf) stays 0.
    const float ua = na == neg_inf() ? 0.0f : na, ub = nbm == neg_inf() ? 0.0f : nbm;
    const float ca = fast_exp2(mx_a - ua), cb = fast_exp2(mx_b - ub);
    mx_a = na;
    mx_b = nbm;
    float ra = 0.0f, rb = 0.0f;
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      s[n][0] = fast_exp2(s[n][0] - ua);
      s[n][1] = fast_exp2(s[n][1] - ua);
      s[n][2] = fast_exp2(s[n][2] - ub);
      s[n][3] = fast_exp2(s[n][3] - ub);
      ra += s[n][0] + s[n][1];
      rb += s[n][2] + s[n][3];
    }
    l_a = l_a * ca + ra;  // per-lane partial; the quad is summed at the end
    l_b = l_b * cb + rb;
#pragma unroll
    for (int d = 0; d < DB; ++d) {
      o[d][0] *= ca;
      o[d][1] *= ca;
      o[d][2] *= cb;
      o[d][3] *= cb;
    }

    // O += P·V: the S accumulators of two 8-key blocks are the A fragment of one k-step.
    {
      const int mi = lane >> 3, r = lane & 7;
#pragma unroll
      for (int kc = 0; kc < BN / 16; ++kc) {
        const unsigned a[4] = {pack2(s[2 * kc][0], s[2 * kc][1], T()),
                               pack2(s[2 * kc][2], s[2 * kc][3], T()),
                               pack2(s[2 * kc + 1][0], s[2 * kc + 1][1], T()),
                               pack2(s[2 * kc + 1][2], s[2 * kc + 1][3], T())};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          unsigned vb[4];
          ldmatrix_x4_trans(vb,
                            sV + ((kc * 16 + (mi & 1) * 8 + r) * P + dp * 16 + (mi >> 1) * 8) * 2);
          mma16816(o[2 * dp], a, vb[0], vb[1], T());
          mma16816(o[2 * dp + 1], a, vb[2], vb[3], T());
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite the other buffer
  }
  cp_async_wait<0>();
  __syncthreads();

  // Normalise, stage this warp's 16 rows in its own rows of sQ, then 16-byte stores.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float ia = l_a > 0.0f ? 1.0f / l_a : 0.0f, ib = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  unsigned* sw = reinterpret_cast<unsigned*>(sQ);
#pragma unroll
  for (int d = 0; d < DB; ++d) {
    sw[((warp * 16 + g) * P + d * 8 + 2 * tq) / 2] = pack2(o[d][0] * ia, o[d][1] * ia, T());
    sw[((warp * 16 + g + 8) * P + d * 8 + 2 * tq) / 2] = pack2(o[d][2] * ib, o[d][3] * ib, T());
  }
  __syncwarp();
  unsigned short* og = reinterpret_cast<unsigned short*>(p.o + b * p.o_sb + h * p.o_sh);
  constexpr int kChunks = D / 8;
  for (int c = lane; c < 16 * kChunks; c += 32) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const i64 row = m0 + warp * 16 + r;
    if (row < p.Sq)
      *reinterpret_cast<Vec<unsigned, 4>*>(og + row * p.o_ss + col) =
          *reinterpret_cast<const Vec<unsigned, 4>*>(sQ + (warp * 16 + r) * P + col);
  }
}

}  // namespace kiln
