// kiln.Attention with one query row (Sq == 1, decode): the keys are split across blocks
// (flash-decoding). attention_decode_split: blockIdx.x = split, blockIdx.y = b·Hq + h; each
// block folds keys [split·chunk, (split+1)·chunk) into a partial (max, sum, unnormalised
// output) — or, with one split, writes the output directly. attention_decode_combine (a second
// launch, a block per b·Hq) merges the partials. No state survives between launches, so both
// are graph-capture safe and need no memset. Any head dims, any strides, f32/f16/bf16.
#pragma once
#include "attention.cuh"
#include "common.cuh"
#include "dtype.cuh"

namespace kiln {

// `part`: per (b·Hq, split) Dv + 2 floats (output sums, then max and sum). Shared memory:
// D + WARPS·(Dv + 2) floats. Each lane owns output dims lane + 32·t, t < DVL.
template <typename T, typename TM, typename TK, int WARPS, int DVL, bool DIRECT>
__device__ void attention_decode_split(const AttnParams<T, TM, TK>& p, float* part, int nsplit) {
  extern __shared__ float attn_dec_smem[];
  float* qs = attn_dec_smem;
  float* wst = attn_dec_smem + p.D;  // per warp: Dv sums, max, sum
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 bh = blockIdx.y;
  const i64 b = bh / p.Hq, h = bh % p.Hq, hk = h / (p.Hq / p.Hkv);
  const int split = blockIdx.x;
  // Keys at or beyond kv_len (padding of a padded run) are never read.
  const i64 chunk = (p.kv_len + nsplit - 1) / nsplit;
  const i64 j_begin = split * chunk;
  const i64 j_end = j_begin + chunk < p.kv_len ? j_begin + chunk : p.kv_len;

  const T* qrow = p.q + b * p.q_sb + h * p.q_sh;
  for (int d = threadIdx.x; d < p.D; d += 32 * WARPS) qs[d] = to_f32(qrow[d * p.q_sd]);
  __syncthreads();

  const T* kbase = p.k + b * p.k_sb + hk * p.k_sh;
  const T* vbase = p.v + b * p.v_sb + hk * p.v_sh;
  float m = neg_inf(), l = 0.0f;
  float acc[DVL];
#pragma unroll
  for (int t = 0; t < DVL; ++t) acc[t] = 0.0f;
  // With one query row the causal rule (j <= 0 + kv_len - 1) excludes nothing.
  for (i64 j = j_begin + warp; j < j_end; j += WARPS) {
    if (p.kpad != nullptr && to_f32(p.kpad[b * p.kp_sb + j]) == 0.0f) continue;
    const T* kr = kbase + j * p.k_ss;
    float dot = 0.0f;
    for (int d = lane; d < p.D; d += 32) dot += qs[d] * to_f32(kr[d * p.k_sd]);
    float s = warp_reduce_sum(dot) * p.scale;
    if (p.mask != nullptr) s += to_f32(p.mask[b * p.m_sb + h * p.m_sh + j * p.m_sk]);
    if (s == neg_inf()) continue;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // m = -inf → 0
    const float pj = expf(s - m_new);
    l = l * corr + pj;
    const T* vr = vbase + j * p.v_ss;
#pragma unroll
    for (int t = 0; t < DVL; ++t) {
      const int d = lane + 32 * t;
      acc[t] = acc[t] * corr + (d < p.Dv ? pj * to_f32(vr[d * p.v_sd]) : 0.0f);
    }
    m = m_new;
  }
  float* mine = wst + warp * (p.Dv + 2);
#pragma unroll
  for (int t = 0; t < DVL; ++t) {
    const int d = lane + 32 * t;
    if (d < p.Dv) mine[d] = acc[t];
  }
  if (lane == 0) {
    mine[p.Dv] = m;
    mine[p.Dv + 1] = l;
  }
  __syncthreads();

  float top = neg_inf();
  for (int w = 0; w < WARPS; ++w) top = fmaxf(top, wst[w * (p.Dv + 2) + p.Dv]);
  float weight[WARPS];
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float mw = wst[w * (p.Dv + 2) + p.Dv];
    weight[w] = mw == neg_inf() ? 0.0f : expf(mw - top);
    sum += wst[w * (p.Dv + 2) + p.Dv + 1] * weight[w];
  }
  float* prow = part + (bh * nsplit + split) * (p.Dv + 2);
  T* orow = p.o + b * p.o_sb + h * p.o_sh;
  for (int d = threadIdx.x; d < p.Dv; d += 32 * WARPS) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) a += wst[w * (p.Dv + 2) + d] * weight[w];
    if (DIRECT)
      orow[d * p.o_sd] = from_f32<T>(sum > 0.0f ? a / sum : 0.0f);
    else
      prow[d] = a;
  }
  if (!DIRECT && threadIdx.x == 0) {
    prow[p.Dv] = top;
    prow[p.Dv + 1] = sum;
  }
}

// A block per b·Hq (blockIdx.x): merges the nsplit partials into the output row.
template <typename T, typename TM, typename TK>
__device__ void attention_decode_combine(const AttnParams<T, TM, TK>& p, const float* part,
                                         int nsplit) {
  const i64 bh = blockIdx.x;
  const i64 b = bh / p.Hq, h = bh % p.Hq;
  const float* rows = part + bh * nsplit * (p.Dv + 2);
  float top = neg_inf();
  for (int s = 0; s < nsplit; ++s) top = fmaxf(top, rows[s * (p.Dv + 2) + p.Dv]);
  float sum = 0.0f;
  for (int s = 0; s < nsplit; ++s) {
    const float ms = rows[s * (p.Dv + 2) + p.Dv];
    if (ms != neg_inf()) sum += rows[s * (p.Dv + 2) + p.Dv + 1] * expf(ms - top);
  }
  T* orow = p.o + b * p.o_sb + h * p.o_sh;
  for (int d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < nsplit; ++s) {
      const float ms = rows[s * (p.Dv + 2) + p.Dv];
      if (ms != neg_inf()) a += rows[s * (p.Dv + 2) + d] * expf(ms - top);
    }
    orow[d * p.o_sd] = from_f32<T>(sum > 0.0f ? a / sum : 0.0f);
  }
}

}  // namespace kiln
