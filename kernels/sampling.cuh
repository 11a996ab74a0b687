// Token sampling for generation: one token id per row of logits [rows, VOCAB] (a row stride
// apart), chosen on the GPU so a decode step returns ids, not logits. One CTA (BLOCK threads)
// per row, one launch per step; rows at or beyond *active_rows write nothing.
//
// Per row r: temperature[r] (<= 0: greedy), top_k[r] (<= 0 or >= VOCAB: off), top_p[r] (>= 1:
// off), seed[r] and step[r] (tokens this sequence generated so far).
//  - Order: tokens rank by logit, descending, ties by the lower index first (+0 and -0 equal).
//  - Greedy (temperature <= 0 or so small that 1/temperature overflows, top_k == 1, or
//    VOCAB == 1): the first token in that order.
//  - Sampling: e_i = exp((x_i - max) / temperature); keep the top_k first tokens in the order;
//    then, with p_i = e_i / sum of the kept e, the shortest prefix of the order whose mass
//    reaches top_p (the token that crosses is kept; tied logits beyond it are not: ties follow
//    the order); then u = the draw of (seed, step) in [0, 1), and the token is the first kept
//    index i (ascending index) where the running sum of kept e_i exceeds u * sum of kept e.
//  - The draw: Philox-4x32-10 (Salmon et al., SC'11) with key (seed lo, seed hi) and counter
//    (step lo, step hi, 0, 0); u = (word 0 >> 8) · 2^-24. It depends on (seed, step) only, never
//    on the row's position, the batch or the launch.
//  - Deterministic: integer atomics only (counts and fixed-point masses, whose sums do not
//    depend on order); float sums reduce in a fixed order.
//  - LOGPROB: also logprobs[r] = log softmax(x)[token] of the raw logits (temperature 1, no
//    filtering).
// A row needs at least one finite logit; NaN logits are not supported.
//
// Method: the argmax is a block max of a 64-bit rank key (order-preserving logit bits, then the
// inverted index). top_k and top_p find a pivot key by radix select over the rank key, 8 bits a
// pass, histograms of counts (top_k) or of masses in 2^-40 units (top_p) in shared memory; a pass
// stops early once the crossing bin holds one token (usually 2 to 3 passes of the row). The draw
// scans the kept e in index order: each warp owns a contiguous segment, sums it with warp scans,
// then the one warp whose segment holds the target walks it again.
#pragma once

#include "common.cuh"
#include "dtype.cuh"

namespace kiln {

typedef unsigned long long u64;

struct Philox4x32 {
  unsigned v[4];
};

// Philox-4x32-10: 10 rounds of the paper's S-box with multipliers 0xD2511F53, 0xCD9E8D57 and
// key increments (Weyl) 0x9E3779B9, 0xBB67AE85.
__device__ __forceinline__ Philox4x32 philox4x32_10(Philox4x32 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned lo0 = 0xD2511F53u * c.v[0], hi0 = __umulhi(0xD2511F53u, c.v[0]);
    const unsigned lo1 = 0xCD9E8D57u * c.v[2], hi1 = __umulhi(0xCD9E8D57u, c.v[2]);
    c = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The uniform draw in [0, 1) of (seed, step): 24 bits, exact in float.
__device__ __forceinline__ float sampling_uniform(u64 seed, u64 step) {
  const Philox4x32 c = {{static_cast<unsigned>(step), static_cast<unsigned>(step >> 32), 0u, 0u}};
  const Philox4x32 r =
      philox4x32_10(c, static_cast<unsigned>(seed), static_cast<unsigned>(seed >> 32));
  return static_cast<float>(r.v[0] >> 8) * 5.9604644775390625e-8f;
}

// Bits of a token index for a vocabulary of V (at least 1).
__host__ __device__ constexpr int sampling_index_bits(long long v) {
  int b = 1;
  while ((1LL << b) < v) ++b;
  return b;
}

// The rank key: larger ranks first. Order-preserving logit bits (+0 and -0 alike), then the
// index inverted so that a lower index ranks first among equal logits.
template <int IDX_BITS>
__device__ __forceinline__ u64 sampling_rank_key(float x, int i) {
  unsigned u = x == 0.0f ? 0u : __float_as_uint(x);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<u64>(u) << IDX_BITS) | static_cast<u64>((1 << IDX_BITS) - 1 - i);
}

template <int IDX_BITS>
__device__ __forceinline__ int sampling_key_index(u64 key) {
  return (1 << IDX_BITS) - 1 - static_cast<int>(key & ((1ull << IDX_BITS) - 1));
}

template <int BLOCK>
__device__ __forceinline__ u64 sampling_block_max(u64 v) {
  __shared__ u64 part[32];
  for (int o = 16; o > 0; o >>= 1) {
    const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? part[lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) {
    const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

template <int BLOCK>
__device__ __forceinline__ float sampling_block_sum(float v) {
  __shared__ float part[32];
  v = warp_reduce_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return warp_reduce_sum(lane < BLOCK / 32 ? part[lane] : 0.0f);
}

// One row's view: its logits, and the scaled exponentials e_i.
template <typename T, int VOCAB>
struct SamplingRow {
  const T* x;
  float max_logit;
  float inv_temp;
  __device__ __forceinline__ float logit(int i) const { return to_f32(x[i]); }
  __device__ __forceinline__ float e(float xi) const { return expf((xi - max_logit) * inv_temp); }
};

// Radix select over the rank keys >= `lo`, in descending order: the key of the first token at
// which the running weight reaches `target` (weight 1 per token when !MASS, else its fixed-point
// mass e_i · scale). Every token with a key >= the result is kept. When the weights never reach
// the target (rounding), every token >= lo is kept.
template <typename T, int VOCAB, int BLOCK, int IDX_BITS, bool MASS>
__device__ u64 sampling_select(const SamplingRow<T, VOCAB>& row, u64 lo, u64 target, float scale) {
  constexpr int kBits = 32 + IDX_BITS;
  constexpr int kTop = (kBits + 7) / 8 * 8 - 8;  // shift of the highest digit
  __shared__ unsigned cnt[256];
  __shared__ u64 wt[256];
  __shared__ u64 s_prefix, s_above;
  __shared__ int s_done;
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_above = 0;
    s_done = 0;
  }
  for (int shift = kTop; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += BLOCK) {
      cnt[b] = 0;
      wt[b] = 0;
    }
    __syncthreads();
    const u64 prefix = s_prefix;
    for (int i = threadIdx.x; i < VOCAB; i += BLOCK) {
      const float xi = row.logit(i);
      const u64 key = sampling_rank_key<IDX_BITS>(xi, i);
      if (key < lo || (shift + 8 < 64 && (key >> (shift + 8)) != (prefix >> (shift + 8)))) continue;
      const int d = static_cast<int>((key >> shift) & 255);
      atomicAdd(&cnt[d], 1u);
      if constexpr (MASS) atomicAdd(&wt[d], static_cast<u64>(__float2ull_rn(row.e(xi) * scale)));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 cum = s_above;
      int found = -1;
      for (int d = 255; d >= 0; --d) {
        const u64 w = MASS ? wt[d] : cnt[d];
        if (cnt[d] != 0 && cum + w >= target) {
          found = d;
          break;
        }
        cum += w;
      }
      if (found < 0) {  // the target is out of reach: keep everything >= lo
        s_prefix = lo;
        s_done = 1;
      } else {
        s_prefix = prefix | (static_cast<u64>(found) << shift);
        s_above = cum;
        const u64 w = MASS ? wt[found] : cnt[found];
        if (shift == 0 || cnt[found] == 1 || (!MASS && cum + w == target)) s_done = 1;
      }
    }
    __syncthreads();
    if (s_done) break;
  }
  return s_prefix > lo ? s_prefix : lo;  // a bin's lowest key can lie below lo
}

// The sampled token: the first kept index (key >= pivot) where the running sum of e exceeds
// u · (sum of kept e). Warp w of the block scans the segment [w·SEG, (w+1)·SEG).
template <typename T, int VOCAB, int BLOCK, int IDX_BITS>
__device__ int sampling_draw(const SamplingRow<T, VOCAB>& row, u64 pivot, float u) {
  constexpr int W = BLOCK / 32;
  constexpr int SEG = ((VOCAB + W - 1) / W + 31) / 32 * 32;
  __shared__ float tot[W];
  __shared__ int last[W];
  __shared__ int s_warp;
  __shared__ float s_rem;
  __shared__ int s_token;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int begin = warp * SEG, end = begin + SEG < VOCAB ? begin + SEG : VOCAB;
  // The kept e of index i (0 when not kept or out of range).
  auto kept_e = [&](int i) {
    if (i >= end) return 0.0f;
    const float xi = row.logit(i);
    return sampling_rank_key<IDX_BITS>(xi, i) >= pivot ? row.e(xi) : 0.0f;
  };
  auto scan = [&](float v) {
    for (int o = 1; o < 32; o <<= 1) {
      const float w = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += w;
    }
    return v;
  };
  float carry = 0.0f;
  int last_kept = -1;
  for (int b = begin; b < end; b += 32) {
    const float v = kept_e(b + lane);
    if (v > 0.0f) last_kept = b + lane;
    carry += __shfl_sync(0xffffffffu, scan(v), 31);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const int w = __shfl_xor_sync(0xffffffffu, last_kept, o);
    last_kept = w > last_kept ? w : last_kept;
  }
  if (lane == 0) {
    tot[warp] = carry;
    last[warp] = last_kept;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float z = 0.0f;
    for (int w = 0; w < W; ++w) z += tot[w];
    float rem = u * z;
    int pick = -1, fallback = -1;
    for (int w = 0; w < W; ++w) {
      if (last[w] >= 0) fallback = last[w];
      if (pick < 0 && tot[w] > rem) pick = w;
      if (pick < 0) rem -= tot[w];
    }
    s_warp = pick;
    s_rem = rem;
    s_token = fallback;  // u · z rounded up to z: the last kept token
  }
  __syncthreads();
  if (warp == s_warp) {
    const float rem = s_rem;
    carry = 0.0f;
    for (int b = begin; b < end; b += 32) {
      const float c = carry + scan(kept_e(b + lane));
      const unsigned hit = __ballot_sync(0xffffffffu, c > rem);
      if (hit) {
        if (lane == 0) s_token = b + __ffs(hit) - 1;
        break;
      }
      carry = __shfl_sync(0xffffffffu, c, 31);
    }
  }
  __syncthreads();
  return s_token;
}

template <typename T, int VOCAB, int BLOCK, bool LOGPROB>
__device__ __forceinline__ void sample_rows(const T* __restrict__ logits, i64 row_stride,
                                            const float* __restrict__ temperature,
                                            const int* __restrict__ top_k,
                                            const float* __restrict__ top_p,
                                            const u64* __restrict__ seed,
                                            const u64* __restrict__ step,
                                            const int* __restrict__ active_rows,
                                            int* __restrict__ tokens, float* __restrict__ logprobs,
                                            i64 rows) {
  static_assert(BLOCK >= 32 && BLOCK <= 1024 && BLOCK % 32 == 0, "whole warps, one block");
  static_assert(VOCAB >= 1 && VOCAB <= (1 << 24), "vocabulary of 1 to 2^24 tokens");
  constexpr int IDX_BITS = sampling_index_bits(VOCAB);
  const i64 r = blockIdx.x;
  if (r >= rows || (active_rows != nullptr && r >= *active_rows)) return;
  SamplingRow<T, VOCAB> row{logits + r * row_stride, 0.0f, 1.0f};
  u64 best = 0;
  for (int i = threadIdx.x; i < VOCAB; i += BLOCK) {
    const u64 key = sampling_rank_key<IDX_BITS>(row.logit(i), i);
    best = key > best ? key : best;
  }
  best = sampling_block_max<BLOCK>(best);
  int token = sampling_key_index<IDX_BITS>(best);
  row.max_logit = row.logit(token);
  const float temp = temperature[r];
  const int k = top_k[r];
  const float p = top_p[r];
  const float inv_temp = 1.0f / temp;
  if (temp > 0.0f && inv_temp <= 3.402823466e38f && k != 1 && VOCAB > 1) {
    row.inv_temp = inv_temp;
    u64 pivot = 0;
    if (k > 1 && k < VOCAB)
      pivot = sampling_select<T, VOCAB, BLOCK, IDX_BITS, false>(row, 0, static_cast<u64>(k), 0.0f);
    if (p < 1.0f) {
      float z = 0.0f;
      for (int i = threadIdx.x; i < VOCAB; i += BLOCK) {
        const float xi = row.logit(i);
        if (sampling_rank_key<IDX_BITS>(xi, i) >= pivot) z += row.e(xi);
      }
      z = sampling_block_sum<BLOCK>(z);
      constexpr float kOne = 1099511627776.0f;  // 2^40: the unit of a fixed-point mass
      const float t = p > 0.0f ? p * kOne : 0.0f;
      const u64 target = t >= 1.0f ? static_cast<u64>(t) : 1ull;
      pivot = sampling_select<T, VOCAB, BLOCK, IDX_BITS, true>(row, pivot, target, kOne / z);
    }
    token = sampling_draw<T, VOCAB, BLOCK, IDX_BITS>(row, pivot, sampling_uniform(seed[r], step[r]));
  }
  if constexpr (LOGPROB) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < VOCAB; i += BLOCK) s += expf(row.logit(i) - row.max_logit);
    s = sampling_block_sum<BLOCK>(s);
    if (threadIdx.x == 0) logprobs[r] = row.logit(token) - row.max_logit - logf(s);
  }
  if (threadIdx.x == 0) tokens[r] = token;
}

}  // namespace kiln
