// Token sampling for generation: one token id per row of logits [rows, VOCAB] (a row stride
// apart), chosen on the GPU so a decode step returns ids, not logits. One CTA (BLOCK threads)
// per row, one launch per step; rows at or beyond *active_rows write nothing.
//
// Per row r: temperature[r] (<= 0: greedy), top_k[r] (<= 0 or >= VOCAB: off), top_p[r] (>= 1:
// off), seed[r] and step[r] (tokens this sequence generated so far).
//  - Order: tokens rank by logit, descending, ties by the lower index first (+0 and -0 equal).
//  - Greedy (temperature <= 0 or so small that 1/temperature overflows, top_k == 1, or
//    VOCAB == 1): the first token in that order.
//  - Sampling: a token's weight w_i is e_i = exp((x_i - max) / temperature) in fixed point
//    (sampling_exp, then e_i · 2^(62 - index bits) rounded), so every sum below is an exact
//    integer, the same in any order. Keep the top_k first tokens in the order; then, with K the
//    kept weight, the shortest prefix of the order whose weight reaches floor(top_p · K) (the
//    token that crosses is kept; tied logits beyond it are not: ties follow the order); then
//    with W the weight kept and u the draw of (seed, step), the token is the first kept index
//    (ascending) where the running weight exceeds floor(u · W).
//  - The draw: Philox-4x32-10 (Salmon et al., SC'11) with key (seed lo, seed hi) and counter
//    (step lo, step hi, 0, 0); u = (word 0 >> 8) · 2^-24. It depends on (seed, step) only.
//  - Deterministic, and the same token on any launch geometry, row position or batch: integer
//    atomics and sums only, float math only in correctly rounded operations (no contraction).
//  - LOGPROB: also logprobs[r] = log softmax(x)[token] of the raw logits (temperature 1, no
//    filtering), a float sum.
// A row needs at least one finite logit; NaN logits are not supported.
//
// Method: the argmax is a block max of a 64-bit rank key (order-preserving logit bits, then the
// inverted index). top_k and top_p find a pivot key by radix select over the rank key, 8 bits a
// pass, histograms of counts (top_k) or weights (top_p) in shared memory; a pass stops early once
// the crossing bin holds one token (usually 2 to 3 passes over the row). The draw sums the kept
// weights in index order: each warp sums a contiguous segment with warp scans; the segment that
// holds the target is split the same way again; one warp walks the sub-segment found.
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

// The 24-bit draw of (seed, step): u = draw · 2^-24.
__device__ __forceinline__ unsigned sampling_draw24(u64 seed, u64 step) {
  const Philox4x32 c = {{static_cast<unsigned>(step), static_cast<unsigned>(step >> 32), 0u, 0u}};
  const Philox4x32 r =
      philox4x32_10(c, static_cast<unsigned>(seed), static_cast<unsigned>(seed >> 32));
  return r.v[0] >> 8;
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

template <int BLOCK>
__device__ __forceinline__ u64 sampling_block_sum_u64(u64 v) {
  __shared__ u64 part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? part[lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// exp(a) for a <= 0 from correctly rounded float operations only (no contraction, no hardware
// approximation), so a CPU repeats it bit for bit: Cody-Waite reduction by ln 2, a degree-7
// Taylor polynomial, an exact power-of-two scale; 0 below -80. About 1e-7 relative error.
__device__ __forceinline__ float sampling_exp(float a) {
  if (!(a >= -80.0f)) return 0.0f;
  const float n = rintf(__fmul_rn(a, 1.44269502f));
  float r = __fmaf_rn(n, -0.693145751953125f, a);
  r = __fmaf_rn(n, -1.42860677e-6f, r);
  float q = 1.98412698e-4f;  // 1/5040
  q = __fmaf_rn(q, r, 1.38888889e-3f);
  q = __fmaf_rn(q, r, 8.33333377e-3f);
  q = __fmaf_rn(q, r, 4.16666679e-2f);
  q = __fmaf_rn(q, r, 1.66666672e-1f);
  q = __fmaf_rn(q, r, 0.5f);
  q = __fmaf_rn(q, r, 1.0f);
  q = __fmaf_rn(q, r, 1.0f);
  return __fmul_rn(q, __int_as_float((static_cast<int>(n) + 127) << 23));
}

// One row: its logits, its max and inverse temperature. A token's weight is its
// e = exp((x - max) / temperature) in fixed point, e · 2^(62 - IDX_BITS) rounded to an integer:
// a row's weights sum below 2^62, exactly and in any order.
template <typename T, int IDX_BITS>
struct SamplingRow {
  const T* x;
  float max_logit;
  float inv_temp;
  __device__ __forceinline__ float logit(int i) const { return to_f32(x[i]); }
  __device__ __forceinline__ u64 weight(float xi) const {
    const float e = sampling_exp(__fmul_rn(__fsub_rn(xi, max_logit), inv_temp));
    return __float2ull_rn(__fmul_rn(e, static_cast<float>(1ull << (62 - IDX_BITS))));
  }
};

// Radix select over the rank keys >= `lo`, in descending order: the key of the first token at
// which the running weight reaches `target` (1 per token when !MASS, else its weight). Every
// token with a key >= the result is kept. When the weights never reach the target, every token
// >= lo is kept.
template <typename T, int VOCAB, int BLOCK, int IDX_BITS, bool MASS>
__device__ u64 sampling_select(const SamplingRow<T, IDX_BITS>& row, u64 lo, u64 target) {
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
      if (key < lo || (key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
      const int d = static_cast<int>((key >> shift) & 255);
      atomicAdd(&cnt[d], 1u);
      if constexpr (MASS) atomicAdd(&wt[d], row.weight(xi));
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
        if (shift == 0 || cnt[found] == 1 || cum + w == target) s_done = 1;
      }
    }
    __syncthreads();
    if (s_done) break;
  }
  return s_prefix > lo ? s_prefix : lo;  // a bin's lowest key can lie below lo
}

// The kept weight of token i (key >= pivot), or 0.
template <typename T, int IDX_BITS>
__device__ __forceinline__ u64 sampling_kept_weight(const SamplingRow<T, IDX_BITS>& row, u64 pivot,
                                                    int i) {
  const float xi = row.logit(i);
  return sampling_rank_key<IDX_BITS>(xi, i) >= pivot ? row.weight(xi) : 0;
}

// Inclusive prefix sum over the warp.
__device__ __forceinline__ u64 sampling_warp_scan(u64 v) {
  const int lane = threadIdx.x & 31;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 w = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += w;
  }
  return v;
}

// [lo, hi) split into one segment of SEG tokens (a multiple of 32) per warp, in order: each warp
// sums its segment's kept weights, then the segment where the running weight passes `*rem`
// (taken as floor(u · total) when u24 >= 0) is returned and `*rem` becomes the remainder in it.
template <typename T, int BLOCK, int IDX_BITS, int SEG>
__device__ int sampling_pick_segment(const SamplingRow<T, IDX_BITS>& row, u64 pivot, int lo, int hi,
                                     long long u24, u64* rem) {
  constexpr int W = BLOCK / 32;
  __shared__ u64 tot[W];
  __shared__ int s_pick;
  __shared__ u64 s_rem;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int begin = lo + warp * SEG, end = begin + SEG < hi ? begin + SEG : hi;
  u64 carry = 0;
  for (int b = begin; b < end; b += 32) {
    const int i = b + lane;
    carry += __shfl_sync(0xffffffffu,
                         sampling_warp_scan(i < end ? sampling_kept_weight(row, pivot, i) : 0), 31);
  }
  if (lane == 0) tot[warp] = carry;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 r = *rem;
    if (u24 >= 0) {
      u64 total = 0;
      for (int w = 0; w < W; ++w) total += tot[w];
      r = __umul64hi(static_cast<u64>(u24) << 40, total);  // floor(u · total) < total
    }
    int pick = 0;
    while (pick < W - 1 && tot[pick] <= r) r -= tot[pick++];
    s_pick = pick;
    s_rem = r;
  }
  __syncthreads();
  *rem = s_rem;
  return lo + s_pick * SEG;
}

// The sampled token: with W the sum of the kept weights (key >= pivot) and target = floor(u · W),
// the first kept index (ascending) where the running sum of weights exceeds the target. Three
// levels: the row in one segment per warp, the chosen segment again in one sub-segment per
// warp, then one warp walks the chosen sub-segment 32 tokens at a time. Exact integer sums, so
// every level agrees with the others.
template <typename T, int VOCAB, int BLOCK, int IDX_BITS>
__device__ int sampling_draw(const SamplingRow<T, IDX_BITS>& row, u64 pivot, unsigned u24) {
  constexpr int W = BLOCK / 32;
  constexpr int SEG = ((VOCAB + W - 1) / W + 31) / 32 * 32;
  constexpr int SUB = ((SEG + W - 1) / W + 31) / 32 * 32;
  __shared__ int s_token;
  u64 rem = 0;
  const int seg = sampling_pick_segment<T, BLOCK, IDX_BITS, SEG>(row, pivot, 0, VOCAB, u24, &rem);
  const int seg_end = seg + SEG < VOCAB ? seg + SEG : VOCAB;
  const int sub =
      sampling_pick_segment<T, BLOCK, IDX_BITS, SUB>(row, pivot, seg, seg_end, -1, &rem);
  const int sub_end = sub + SUB < seg_end ? sub + SUB : seg_end;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    u64 carry = 0;
    for (int b = sub; b < sub_end; b += 32) {
      const int i = b + lane;
      const u64 c =
          carry + sampling_warp_scan(i < sub_end ? sampling_kept_weight(row, pivot, i) : 0);
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
__device__ __forceinline__ void sample_rows(
    const T* __restrict__ logits, i64 row_stride, const float* __restrict__ temperature,
    const int* __restrict__ top_k, const float* __restrict__ top_p, const u64* __restrict__ seed,
    const u64* __restrict__ step, const int* __restrict__ active_rows, int* __restrict__ tokens,
    float* __restrict__ logprobs, i64 rows) {
  static_assert(BLOCK >= 32 && BLOCK <= 1024 && BLOCK % 32 == 0, "whole warps, one block");
  static_assert(VOCAB >= 1 && VOCAB <= (1 << 24), "vocabulary of 1 to 2^24 tokens");
  constexpr int IDX_BITS = sampling_index_bits(VOCAB);
  const i64 r = blockIdx.x;
  if (r >= rows || (active_rows != nullptr && r >= *active_rows)) return;
  SamplingRow<T, IDX_BITS> row{logits + r * row_stride, 0.0f, 1.0f};
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
  const float inv_temp = __frcp_rn(temp);
  if (temp > 0.0f && inv_temp <= 3.402823466e38f && k != 1 && VOCAB > 1) {
    row.inv_temp = inv_temp;
    u64 pivot = 0;
    if (k > 1 && k < VOCAB)
      pivot = sampling_select<T, VOCAB, BLOCK, IDX_BITS, false>(row, 0, static_cast<u64>(k));
    if (p < 1.0f) {
      u64 kept = 0;
      for (int i = threadIdx.x; i < VOCAB; i += BLOCK) {
        const float xi = row.logit(i);
        if (sampling_rank_key<IDX_BITS>(xi, i) >= pivot) kept += row.weight(xi);
      }
      kept = sampling_block_sum_u64<BLOCK>(kept);
      const u64 target = p > 0.0f ? static_cast<u64>(__dmul_rn(p, static_cast<double>(kept))) : 0;
      pivot = sampling_select<T, VOCAB, BLOCK, IDX_BITS, true>(row, pivot, target > 0 ? target : 1);
    }
    const unsigned u24 = sampling_draw24(seed[r], step[r]);
    token = sampling_draw<T, VOCAB, BLOCK, IDX_BITS>(row, pivot, u24);
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
