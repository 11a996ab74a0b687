// kiln.Attention, prefill (compiler/ops/kiln_ops.md): Y = softmax(scale·Q·Kᵀ + mask) · V with
// causal / key-padding exclusion, GQA, online softmax in fp32. Q, K, V and Y are strided views
// (a base pointer already offset, strides for batch, head, sequence and head dim), so the
// lowering can read a fused QKV GEMM output and write the merged-heads [B, S, H·Dv] buffer in
// place. Two kernels:
//  - attention_prefill_simt: any head dims, any strides, f32/f16/bf16; a warp per query row.
//  - attention_prefill_mma: f16/bf16, D = Dv in {64, 80, 96, 128}, unit head-dim stride and
//    16-byte aligned rows; FlashAttention-2 style tiles on mma.sync m16n8k16 with ldmatrix and
//    double-buffered cp.async K/V tiles, and optionally several warp groups splitting a block's
//    key tiles ("Key groups" below). The tile shape is a template parameter chosen by
//    compiler/backend/lower/attention_codegen.cc (timed by tests/kernels/bench_attention.cc --sweep).
// Grid: x over query tiles, y over B·Hq (the mma kernel reorders blocks: heaviest tiles first).
// A row whose keys are all excluded yields zeros.
// Padded runs: q_len and kv_len are the request's query and key counts (Sq and Skv unless the
// step reads the real size from the device, see compiler/backend/lower/lower_attention.cc);
// keys at or beyond kv_len are excluded like key-padding (never loaded: their rows of the K/V
// tiles are zero-filled, so poisoned padding cannot reach 0·V), and the causal diagonal is
// j <= i + (kv_len - q_len).
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
  i64 q_len, kv_len;  // real query and key counts: q_len <= Sq, kv_len <= Skv
  int D, Dv;
  float scale;
  bool causal;  // query i sees key j only when j <= i + (kv_len - q_len)
};

constexpr float kLog2e = 1.4426950408889634f;

// The real extent c·s + d of an axis c·S + d at the request's real size s, clamped into [0, n]
// (n: the extent at the padded size), so that no value of s can move a read past the buffers.
__device__ __forceinline__ i64 attn_real_len(i64 c, i64 d, i64 s, i64 n) {
  const i64 x = c * s + d;
  return x < 0 ? 0 : (x < n ? x : n);
}

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
  i64 jend = p.kv_len;
  if (p.causal) {
    const i64 last = i + (p.kv_len - p.q_len) + 1;
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
      if (p.mask != nullptr) s += to_f32(p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk]);
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

// ROWS rows of D 16-bit elements from `src` (row stride `ss`), rows [row0, row0 + ROWS), into
// shared memory at `dst` with row pitch D + 8 elements (the 8 rows an ldmatrix reads then start
// in distinct 16-byte bank groups), by NT threads of which this is number `tid`. Rows >= `limit`
// are zero-filled.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void attn_load_tile(unsigned dst, const unsigned short* src, i64 ss,
                                               i64 row0, i64 limit, int tid) {
  constexpr int kChunks = D / 8, P = D + 8;
  constexpr int kRowsPerPass = NT / kChunks;
  if constexpr (NT % kChunks == 0 && ROWS % kRowsPerPass == 0) {
    // Each thread copies the same column chunk of every kRowsPerPass-th row: one 64-bit
    // multiply per tile instead of one per chunk.
    const int r0 = tid / kChunks, col = (tid % kChunks) * 8;
    const i64 left = limit - row0 - r0;
    const unsigned short* gp = src + (row0 + r0) * ss + col;
    const i64 step = kRowsPerPass * ss;
#pragma unroll
    for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
      const bool in = i * kRowsPerPass < left;
      cp_async16(dst + ((r0 + i * kRowsPerPass) * P + col) * 2, in ? gp : src, in ? 16 : 0);
      gp += step;
    }
  } else {
    for (int c = tid; c < ROWS * kChunks; c += NT) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const i64 row = row0 + r;
      const bool in = row < limit;
      cp_async16(dst + (r * P + col) * 2, in ? src + row * ss + col : src, in ? 16 : 0);
    }
  }
}

// This lane's key-padding flags of the tile of `bn` keys from n0: key n0 + lane + 32·f, 1 (kept)
// for keys past the tile or past kv_len, which the tile's bounds exclude anyway.
template <typename TK, int KF, typename P>
__device__ __forceinline__ void attn_kpad_flags(const P& p, i64 b, i64 n0, int bn, TK (&out)[KF]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int f = 0; f < KF; ++f) {
    const int jt = lane + 32 * f;
    out[f] = jt < bn && n0 + jt < p.kv_len ? p.kpad[b * p.kp_sb + n0 + jt] : TK(1);
  }
}

// A warp's share of one key tile of attention_prefill_mma (below): S = Q·Kᵀ, the online softmax
// update of mx, l and O, then O += P·V. Key jt of the tile exists while jt < key_lim; row it of
// the warp sees it while jt - it <= diag. `edge`: some key of the tile is excluded for some row
// of the warp (the causal diagonal, the end of the keys), so scores are masked one by one.
// `kpad_check`: some key of the tile may be excluded by the key padding (HAS_KPAD and not every
// key below key_lim kept), so each score reads its key's flag. Otherwise, and without a mask,
// the scale is folded into the exponent (one FFMA per score) and into the row max (exact for a
// positive scale). One instantiation serves both: a second copy of this unrolled body, or
// branches around its mma's for keys past the diagonal, measured slower.
template <typename T, typename TM, typename TK, int D, int MT, int BN, bool QREG, bool CAUSAL,
          bool HAS_MASK, bool HAS_KPAD>
__device__ __forceinline__ void attn_tile(const AttnParams<T, TM, TK>& p,
                                          const unsigned (&qf)[QREG ? MT : 1][QREG ? D / 16 : 1][4],
                                          float (&o)[MT][D / 8][4], float (&mx)[MT][2],
                                          float (&l)[MT][2], unsigned sQw, unsigned sK, unsigned sV,
                                          i64 n0, i64 wrow0, i64 b, i64 h, int key_lim, int diag,
                                          bool edge, bool kpad_check, float sl2) {
  constexpr int P = D + 8, KC = D / 16, NB = BN / 8, DB = D / 8;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3, mi = lane >> 3, r8 = lane & 7;
  // S = Q·Kᵀ for this warp's rows and BN keys.
  float s[MT][NB][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < NB; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    unsigned qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (QREG) {
#pragma unroll
        for (int e = 0; e < 4; ++e) qa[mt][e] = qf[QREG ? mt : 0][QREG ? kc : 0][e];
      } else {
        ldmatrix_x4(qa[mt], sQw + (mt * 16 * P + kc * 16) * 2);
      }
    }
#pragma unroll
    for (int np = 0; np < NB / 2; ++np) {
      unsigned kb[4];
      ldmatrix_x4(kb, sK + ((np * 16 + (mi >> 1) * 8 + r8) * P + kc * 16 + (mi & 1) * 8) * 2);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(s[mt][2 * np], qa[mt], kb[0], kb[1], T());
        mma16816(s[mt][2 * np + 1], qa[mt], kb[2], kb[3], T());
      }
    }
  }

  const bool kpad = HAS_KPAD && kpad_check;
  const bool fold = !edge && !HAS_MASK && !kpad && sl2 > 0.0f;
  if (!fold) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][n][e] * sl2;
          if (edge || HAS_MASK || kpad) {
            const int jt = n * 8 + 2 * tq + (e & 1), it = mt * 16 + g + (e < 2 ? 0 : 8);
            bool keep = jt < key_lim && jt - it <= diag;
            const i64 j = n0 + jt, i = wrow0 + it;
            if (kpad && keep) keep = to_f32(p.kpad[b * p.kp_sb + j]) != 0.0f;
            if (HAS_MASK && keep && i < p.Sq)
              x += to_f32(p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk]) * kLog2e;
            if (!keep) x = neg_inf();
          }
          s[mt][n][e] = x;
        }
  }
  const float k2 = fold ? sl2 : 1.0f;

  // Online softmax, two rows per thread per m16 tile; a row's 4 owners are one lane quad.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float ta = neg_inf(), tb = neg_inf();
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      ta = fmaxf(ta, fmaxf(s[mt][n][0], s[mt][n][1]));
      tb = fmaxf(tb, fmaxf(s[mt][n][2], s[mt][n][3]));
    }
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 1));
    ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, 2));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 1));
    tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, 2));
    const float na = fmaxf(mx[mt][0], ta * k2), nb = fmaxf(mx[mt][1], tb * k2);
    // A row with nothing visible yet keeps max -inf; subtract 0 so 2^-inf stays 0.
    const float ua = na == neg_inf() ? 0.0f : na, ub = nb == neg_inf() ? 0.0f : nb;
    const float ca = fast_exp2(mx[mt][0] - ua), cb = fast_exp2(mx[mt][1] - ub);
    mx[mt][0] = na;
    mx[mt][1] = nb;
    float ra = 0.0f, rb = 0.0f;
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      s[mt][n][0] = fast_exp2(fmaf(s[mt][n][0], k2, -ua));
      s[mt][n][1] = fast_exp2(fmaf(s[mt][n][1], k2, -ua));
      s[mt][n][2] = fast_exp2(fmaf(s[mt][n][2], k2, -ub));
      s[mt][n][3] = fast_exp2(fmaf(s[mt][n][3], k2, -ub));
      ra += s[mt][n][0] + s[mt][n][1];
      rb += s[mt][n][2] + s[mt][n][3];
    }
    l[mt][0] = l[mt][0] * ca + ra;  // per-lane partial; the quad is summed at the end
    l[mt][1] = l[mt][1] * cb + rb;
    // Once the row maxima settle (2^0 is exactly 1), the warp skips rescaling O.
    if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f)) {
#pragma unroll
      for (int d = 0; d < DB; ++d) {
        o[mt][d][0] *= ca;
        o[mt][d][1] *= ca;
        o[mt][d][2] *= cb;
        o[mt][d][3] *= cb;
      }
    }
  }

  // O += P·V: the S accumulators of two 8-key blocks are the A fragment of one k-step.
#pragma unroll
  for (int kc = 0; kc < BN / 16; ++kc) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt][0] = pack2(s[mt][2 * kc][0], s[mt][2 * kc][1], T());
      a[mt][1] = pack2(s[mt][2 * kc][2], s[mt][2 * kc][3], T());
      a[mt][2] = pack2(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1], T());
      a[mt][3] = pack2(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3], T());
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      unsigned vb[4];
      ldmatrix_x4_trans(vb, sV + ((kc * 16 + (mi & 1) * 8 + r8) * P + dp * 16 + (mi >> 1) * 8) * 2);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816(o[mt][2 * dp], a[mt], vb[0], vb[1], T());
        mma16816(o[mt][2 * dp + 1], a[mt], vb[2], vb[3], T());
      }
    }
  }
}

// The barrier of one key group of attention_prefill_mma: the whole block when there is one
// group, else named barrier 1 + g over the group's NT threads.
// The ids are immediates: a register id makes ptxas reserve all 16 barriers, one block per SM.
template <int KG, int NT>
__device__ __forceinline__ void attn_group_sync(int g) {
  static_assert(KG >= 1 && KG <= 4, "key groups");
  if constexpr (KG == 1) {
    __syncthreads();
  } else if (g == 0) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory");
  } else if (g == 1) {
    asm volatile("bar.sync 2, %0;\n" ::"n"(NT) : "memory");
  } else if (g == 2) {
    asm volatile("bar.sync 3, %0;\n" ::"n"(NT) : "memory");
  } else {
    asm volatile("bar.sync 4, %0;\n" ::"n"(NT) : "memory");
  }
}

// FlashAttention-2 style prefill. A block owns BM = 16·MT·WARPS query rows of one (batch, head);
// each warp owns 16·MT consecutive rows (MT m16 tiles: every K/V fragment read from shared
// memory feeds MT mma's). Keys stream in tiles of BN through two shared-memory buffers (cp.async
// of tile t+1 overlaps the math of tile t; one barrier per tile). QREG keeps the Q fragments in
// registers for the whole block, else they are re-read from shared memory per tile (fewer
// registers for MT = 2, D = 128). Shared memory (16-bit elements): Q BM·(D+8), then K and V, two
// buffers each of BN·(D+8).
//
// Key groups (KG > 1): the block is KG groups of WARPS warps, each over the same BM rows and
// every KG-th key tile (group g: tiles g, g + KG, ...), with its own Q copy, K/V buffers and
// named barrier. Short sequences with few heads launch too few blocks to fill the SMs, and a
// block's time is its chain of key tiles (about 4 cycles an instruction with one warp per
// scheduler, Nsight Compute on an H200); KG groups cut the chain KG-fold and put KG warps on each
// scheduler. The groups then merge their (max, sum, O) through shared memory and group 0
// writes the rows.
template <typename T, typename TM, typename TK, int D, int WARPS, int MT, int BN, bool QREG,
          bool CAUSAL, bool HAS_MASK, bool HAS_KPAD, int KG = 1>
__device__ void attention_prefill_mma(const AttnParams<T, TM, TK>& p) {
  constexpr int WM = 16 * MT;  // query rows per warp
  constexpr int BM = WM * WARPS, NT = 32 * WARPS, P = D + 8;
  constexpr int KC = D / 16;  // k-steps of Q·Kᵀ
  constexpr int DB = D / 8;   // 8-wide output blocks
  static_assert(BN % 16 == 0 && D % 16 == 0, "tile shape");
  extern __shared__ __align__(16) unsigned short attn_smem_h[];
  constexpr unsigned kTileBytes = BN * P * 2;
  constexpr unsigned kGroupBytes = BM * P * 2 + 4 * kTileBytes;
  const int grp = KG == 1 ? 0 : static_cast<int>(threadIdx.x) / NT;
  const int tid = static_cast<int>(threadIdx.x) - grp * NT;  // thread within the group
  unsigned short* sQ = attn_smem_h + grp * (kGroupBytes / 2);
  const unsigned sQa = smem_addr(sQ);
  const unsigned sKa = sQa + BM * P * 2;
  const unsigned sVa = sKa + 2 * kTileBytes;

  const int warp = tid >> 5, lane = threadIdx.x & 31;  // warp within the group
  const int g = lane >> 2, tq = lane & 3, mi = lane >> 3, r8 = lane & 7;
  // Heaviest (latest, under a causal mask) query tiles of every head first: blocks start in
  // linear order, so the long ones do not trail at the end of the grid.
  const unsigned lin = blockIdx.y * gridDim.x + blockIdx.x;
  const i64 bh = lin % gridDim.y;
  const i64 m0 = static_cast<i64>(gridDim.x - 1 - lin / gridDim.y) * BM;
  const i64 b = bh / p.Hq, h = bh % p.Hq, hk = h / (p.Hq / p.Hkv);
  const i64 off = p.kv_len - p.q_len;
  i64 n_end = p.kv_len;
  if (CAUSAL) {
    const i64 last = m0 + BM + off;
    n_end = last < n_end ? last : n_end;
  }
  const int n_tiles = n_end > 0 ? static_cast<int>((n_end + BN - 1) / BN) : 0;
  // This group's tiles: grp, grp + KG, ...
  const int my_tiles = n_tiles > grp ? (n_tiles - grp + KG - 1) / KG : 0;
  const i64 wrow0 = m0 + warp * WM;  // this warp's first query row

  const unsigned short* qg = reinterpret_cast<const unsigned short*>(p.q + b * p.q_sb + h * p.q_sh);
  const unsigned short* kg =
      reinterpret_cast<const unsigned short*>(p.k + b * p.k_sb + hk * p.k_sh);
  const unsigned short* vg =
      reinterpret_cast<const unsigned short*>(p.v + b * p.v_sb + hk * p.v_sh);

  attn_load_tile<BM, D, NT>(sQa, qg, p.q_ss, m0, p.Sq, tid);
  if (my_tiles > 0) {
    const i64 n0 = static_cast<i64>(grp) * BN;
    attn_load_tile<BN, D, NT>(sKa, kg, p.k_ss, n0, p.kv_len, tid);
    attn_load_tile<BN, D, NT>(sVa, vg, p.v_ss, n0, p.kv_len, tid);
  }
  cp_async_commit();

  // Scores go to the log2 domain: exp(x·scale) = 2^(x·scale·log2 e).
  const float sl2 = p.scale * kLog2e;
  // Q fragment (m16 tile mt, k-step kc) address of this lane.
  const unsigned sQw = sQa + ((warp * WM + (mi & 1) * 8 + r8) * P + (mi >> 1) * 8) * 2;
  unsigned qf[QREG ? MT : 1][QREG ? KC : 1][4];
  float o[MT][DB][4];
  float mx[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int d = 0; d < DB; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
    mx[mt][0] = mx[mt][1] = neg_inf();
    l[mt][0] = l[mt][1] = 0.0f;
  }

  // Key-padding flags: KF per lane, key lane + 32·f of a tile (1 past the keys).
  constexpr int KF = (BN + 31) / 32;
  [[maybe_unused]] TK flags[KF], next_flags[KF];
  if constexpr (HAS_KPAD) {
    if (my_tiles > 0) attn_kpad_flags<TK, KF>(p, b, static_cast<i64>(grp) * BN, BN, next_flags);
  }

  for (int it = 0; it < my_tiles; ++it) {
    const int t = grp + it * KG;
    cp_async_wait<0>();
    // Tile t is visible to every thread of the group, and every warp of it is done with its
    // previous tile, whose buffers the next loads overwrite.
    attn_group_sync<KG, NT>(grp);
    if (it + 1 < my_tiles) {
      const unsigned nb = ((it + 1) & 1) * kTileBytes;
      const i64 n1 = static_cast<i64>(t + KG) * BN;
      attn_load_tile<BN, D, NT>(sKa + nb, kg, p.k_ss, n1, p.kv_len, tid);
      attn_load_tile<BN, D, NT>(sVa + nb, vg, p.v_ss, n1, p.kv_len, tid);
      cp_async_commit();
    }
    // The key-padding flags of the group's next tile, loaded now and judged in the next
    // iteration, so their latency hides behind this tile's math.
    if constexpr (HAS_KPAD) {
#pragma unroll
      for (int f = 0; f < KF; ++f) flags[f] = next_flags[f];
      if (it + 1 < my_tiles)
        attn_kpad_flags<TK, KF>(p, b, static_cast<i64>(t + KG) * BN, BN, next_flags);
    }
    if (QREG && it == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kc = 0; kc < KC; ++kc)
          ldmatrix_x4(qf[QREG ? mt : 0][QREG ? kc : 0], sQw + (mt * 16 * P + kc * 16) * 2);
    }
    const i64 n0 = static_cast<i64>(t) * BN;
    // Under the causal mask this warp's rows may see none of this tile's keys (the block's
    // later rows do): skip the math, keep the barrier count.
    if (CAUSAL && n0 > wrow0 + WM - 1 + off) continue;
    const unsigned sK = sKa + (it & 1) * kTileBytes, sV = sVa + (it & 1) * kTileBytes;
    // Exclusion bounds relative to this tile and warp, clamped into int range: key jt (of the
    // tile) exists while jt < key_lim, and row it (of the warp) sees it while jt - it <= diag.
    const i64 kl = p.kv_len - n0, dl = CAUSAL ? wrow0 + off - n0 : BN;
    const int key_lim = kl < BN ? static_cast<int>(kl) : BN;
    const int diag = dl < -WM ? -WM - 1 : (dl > BN ? BN : static_cast<int>(dl));
    const bool edge = key_lim < BN || diag < BN - 1;
    // The key padding: when it keeps every key of the tile (the usual case, a mask of ones or
    // padding only at the end), the scores skip the per-key check. Each lane holds KF flags.
    bool kpad_check = false;
    if constexpr (HAS_KPAD) {
      bool kept = true;
#pragma unroll
      for (int f = 0; f < KF; ++f) kept &= to_f32(flags[f]) != 0.0f;
      kpad_check = !__all_sync(0xffffffffu, kept);
    }

    attn_tile<T, TM, TK, D, MT, BN, QREG, CAUSAL, HAS_MASK, HAS_KPAD>(
        p, qf, o, mx, l, sQw, sK, sV, n0, wrow0, b, h, key_lim, diag, edge, kpad_check, sl2);
  }
  cp_async_wait<0>();
  if constexpr (KG > 1) {
    // Merge the groups: groups 1.. leave their state in shared memory past group 0's region (no
    // group reads its buffers any more), thread by thread in fragment order, and group 0 folds
    // each in with the online-softmax rescale.
    constexpr int E = MT * DB * 4 + MT * 4;  // O, then max and sum per m-tile
    static_assert(E * NT * 4 <= static_cast<int>(kGroupBytes), "merge scratch");
    float* red = reinterpret_cast<float*>(attn_smem_h + kGroupBytes / 2);
    __syncthreads();
    if (grp > 0) {
      float* mine = red + (grp - 1) * (kGroupBytes / 4);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int d = 0; d < DB; ++d)
#pragma unroll
          for (int e = 0; e < 4; ++e) mine[((mt * DB + d) * 4 + e) * NT + tid] = o[mt][d][e];
        mine[(MT * DB * 4 + mt * 4 + 0) * NT + tid] = mx[mt][0];
        mine[(MT * DB * 4 + mt * 4 + 1) * NT + tid] = mx[mt][1];
        mine[(MT * DB * 4 + mt * 4 + 2) * NT + tid] = l[mt][0];
        mine[(MT * DB * 4 + mt * 4 + 3) * NT + tid] = l[mt][1];
      }
    }
    __syncthreads();
    if (grp > 0) return;  // no block-wide barrier below
    for (int og = 1; og < KG; ++og) {
      const float* theirs = red + (og - 1) * (kGroupBytes / 4);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float c[2][2];  // [row a/b][mine, theirs]
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float om = theirs[(MT * DB * 4 + mt * 4 + r) * NT + tid];
          const float ol = theirs[(MT * DB * 4 + mt * 4 + 2 + r) * NT + tid];
          const float nm = fmaxf(mx[mt][r], om);
          const float u = nm == neg_inf() ? 0.0f : nm;
          c[r][0] = fast_exp2(mx[mt][r] - u);
          c[r][1] = fast_exp2(om - u);
          mx[mt][r] = nm;
          l[mt][r] = l[mt][r] * c[r][0] + ol * c[r][1];
        }
#pragma unroll
        for (int d = 0; d < DB; ++d)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            o[mt][d][e] = o[mt][d][e] * c[e >> 1][0] +
                          theirs[((mt * DB + d) * 4 + e) * NT + tid] * c[e >> 1][1];
      }
    }
  }
  // Stage this warp's rows of O in its own rows of sQ (only this warp reads those), then
  // 16-byte stores.
  __syncwarp();
  unsigned* sw = reinterpret_cast<unsigned*>(sQ);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float la = l[mt][0], lb = l[mt][1];
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
    const int ra = warp * WM + mt * 16 + g;
#pragma unroll
    for (int d = 0; d < DB; ++d) {
      sw[(ra * P + d * 8 + 2 * tq) / 2] = pack2(o[mt][d][0] * ia, o[mt][d][1] * ia, T());
      sw[((ra + 8) * P + d * 8 + 2 * tq) / 2] = pack2(o[mt][d][2] * ib, o[mt][d][3] * ib, T());
    }
  }
  __syncwarp();
  unsigned short* og = reinterpret_cast<unsigned short*>(p.o + b * p.o_sb + h * p.o_sh);
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int c = lane; c < WM * kChunks; c += 32) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const i64 row = wrow0 + r;
    if (row < p.Sq)
      *reinterpret_cast<Vec<unsigned, 4>*>(og + row * p.o_ss + col) =
          *reinterpret_cast<const Vec<unsigned, 4>*>(sQ + (warp * WM + r) * P + col);
  }
}

}  // namespace kiln
