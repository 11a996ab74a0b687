// Attention over the runtime's paged KV cache (LLM generation). One pair of cache tensors per
// layer, key_cache [num_blocks, HKV, BS, D] and value_cache [num_blocks, HKV, BS, DV] (head-major
// inside a block), in the model's compute dtype. The token at position j of batch row b lives in
// block block_tables[b·bt_stride + j / BS] at offset j % BS; context_lens[b] counts the row's
// tokens including those appended this step (0: a padding row, which reads nothing and yields
// zeros). slot_mapping[t] = block·BS + offset of new token t, -1 = padding token: write nothing.
//  - paged_kv_append: new K and V rows (strided: a GEMM output or a slice of a fused QKV
//    buffer) → the cache at their slots.
//  - paged_decode_split / paged_decode_combine: one query token per row. The context is cut into
//    partitions of PART tokens (PART = 0: one partition); blockIdx.x = partition, blockIdx.y =
//    b·(HQ / GQ) + g: GQ query heads that share a kv head read its keys and values once
//    together. A row of one partition is written directly; otherwise each partition writes a
//    partial (max, sum, unnormalised output) and the combine launch (a block per b·HQ) merges
//    them. Two launches with PART > 0, one with PART = 0; no state survives between launches
//    (graph-capture safe, no memset).
//  - paged_prefill: q_len new tokens per row, causal: query i sits at position
//    context_len - q_len + i and sees keys at positions <= its own (none when negative: zeros).
// GQA: query head h reads kv head h / (HQ / HKV). fp32 accumulation, online softmax; `scale`
// multiplies Q·K. Head-dim strides are 1 everywhere.
// Rotary (kiln.PagedAttention with cos/sin): with ROT = R > 0 the first R elements of each query
// and new key are rotated as kiln.Rotary does (layout_rotary; ROT_MODE 0: half pairs, 1:
// interleaved pairs, 2: full-width table), the key before it is written to the cache, the query
// as it is loaded. New token t's table row is rot_cos/rot_sin + t·rot_st.
#pragma once
#include "attention.cuh"
#include "common.cuh"
#include "dtype.cuh"
#include "layout.cuh"

namespace kiln {

// Every pointer is the base of its tensor; strides in elements.
template <typename T>
struct PagedAttnParams {
  const T* q;  // [rows, (q_len,) HQ, D]: element (b, i, h, d) at b·q_sb + i·q_ss + h·q_sh + d
  i64 q_sb, q_ss, q_sh;
  T* o;  // [rows, (q_len,) HQ, DV], strides as q
  i64 o_sb, o_ss, o_sh;
  const T* key_cache;
  const T* value_cache;
  const int* block_tables;  // [rows, bt_stride]
  i64 bt_stride;
  const int* context_lens;  // [rows]
  i64 rows;                 // batch rows (max_seqs of the step)
  i64 q_len;                // prefill: new tokens per row; decode: 1
  float scale;
  const T* rot_cos;  // rotary tables (ROT > 0): token t's row at rot_cos + t·rot_st
  const T* rot_sin;
  i64 rot_st;
  // The decode route (paged_decode_split with FRESH): every row's token is its sequence's only
  // new one and has not been appended. Row b's new key k_new + b·k_st + hk·k_sh (rotated here)
  // and value (v likewise) stand in for cache position context_lens[b] - 1, and one block per
  // (row, kv head) writes them into key_out / value_out (the caches) at slot_mapping[b].
  const T* k_new = nullptr;
  i64 k_st = 0, k_sh = 0;
  const T* v_new = nullptr;
  i64 v_st = 0, v_sh = 0;
  const long long* slot_mapping = nullptr;
  T* key_out = nullptr;
  T* value_out = nullptr;
};

// Element d of row x (fp32), rotated when d < ROT (ROT = 0: no rotary).
template <typename T, int ROT, int ROT_MODE>
__device__ __forceinline__ float paged_load_rotated(const T* x, const T* cs, const T* sn, int d) {
  if (ROT == 0 || d >= ROT) return to_f32(x[d]);
  // Rounded to T, as kiln.Rotary's output would be.
  return to_f32(from_f32<T>(layout_rotary<T, T>(x, cs, sn, d, ROT, ROT_MODE == 1, ROT_MODE == 2)));
}

// ---- append -------------------------------------------------------------------------------------

// k(t, h, d) = k[t·k_st + h·k_sh + d], v likewise; num_tokens rows. Grid-stride over
// num_tokens·HKV·max(D, DV) elements. Keys are rotated first when ROT > 0 (rot_* as in
// PagedAttnParams).
template <typename T, int HKV, int D, int DV, int BS, int ROT = 0, int ROT_MODE = 0>
__device__ void paged_kv_append(const T* k, i64 k_st, i64 k_sh, const T* v, i64 v_st, i64 v_sh,
                                const long long* slot_mapping, i64 num_tokens, T* key_cache,
                                T* value_cache, const T* rot_cos = nullptr,
                                const T* rot_sin = nullptr, i64 rot_st = 0) {
  constexpr int W = D > DV ? D : DV;
  const i64 n = num_tokens * HKV * W;
  for (i64 i = global_thread_index(); i < n; i += global_thread_count()) {
    const int d = static_cast<int>(i % W);
    const i64 th = i / W;
    const int h = static_cast<int>(th % HKV);
    const i64 t = th / HKV;
    const long long slot = slot_mapping[t];
    if (slot < 0) continue;
    const i64 blk = slot / BS, off = slot % BS;
    const i64 row = (blk * HKV + h) * BS + off;
    if (d < D)  // a round trip through fp32 is exact for every T
      key_cache[row * D + d] = from_f32<T>(paged_load_rotated<T, ROT, ROT_MODE>(
          k + t * k_st + h * k_sh, rot_cos + t * rot_st, rot_sin + t * rot_st, d));
    if (d < DV) value_cache[row * DV + d] = v[t * v_st + h * v_sh + d];
  }
}

// ---- shared pieces ------------------------------------------------------------------------------

// One warp's running softmax state over the keys it has seen; lane owns output dims lane + 32·t.
template <int DVL>
struct PagedWarpState {
  float m, l;
  float acc[DVL];
};

template <int DVL>
__device__ __forceinline__ void paged_state_init(PagedWarpState<DVL>& s) {
  s.m = neg_inf();
  s.l = 0.0f;
#pragma unroll
  for (int t = 0; t < DVL; ++t) s.acc[t] = 0.0f;
}

// Folds key position j of row `table` (kv head hk) into the warp's state; `qs` is the scaled
// query in fp32 (shared memory). The whole warp calls it with the same j.
template <typename T, int HKV, int D, int DV, int BS, int DVL>
__device__ __forceinline__ void paged_fold_key(const PagedAttnParams<T>& p, const int* table,
                                               i64 hk, i64 j, const float* qs,
                                               PagedWarpState<DVL>& s) {
  const int lane = threadIdx.x & 31;
  const i64 row = (static_cast<i64>(table[j / BS]) * HKV + hk) * BS + j % BS;
  const T* kr = p.key_cache + row * D;
  float dot = 0.0f;
#pragma unroll
  for (int d = lane; d < D; d += 32) dot += qs[d] * to_f32(kr[d]);
  const float sc = warp_reduce_sum(dot);
  const float m_new = fmaxf(s.m, sc);
  const float corr = expf(s.m - m_new);  // m = -inf → 0
  const float pj = expf(sc - m_new);
  s.l = s.l * corr + pj;
  const T* vr = p.value_cache + row * DV;
#pragma unroll
  for (int t = 0; t < DVL; ++t) {
    const int d = lane + 32 * t;
    s.acc[t] = s.acc[t] * corr + (d < DV ? pj * to_f32(vr[d]) : 0.0f);
  }
  s.m = m_new;
}

// ---- decode -------------------------------------------------------------------------------------

// Partitions of row context `ctx`: ceil(ctx / PART), 1 with PART = 0 or ctx = 0.
template <int PART>
__device__ __forceinline__ i64 paged_partitions(i64 ctx) {
  if (PART == 0 || ctx <= PART) return 1;
  return (ctx + PART - 1) / PART;
}

// Elements per vector load of a cache row: 16 bytes where D and DV allow, else narrower.
template <typename T, int D, int DV>
__host__ __device__ constexpr int paged_vec() {
  int v = static_cast<int>(16 / sizeof(T));
  while (v > 1 && (D % v != 0 || DV % v != 0)) v /= 2;
  return v;
}

// Lanes that share one cache row of n vectors: the power of two >= n, at most 32.
__host__ __device__ constexpr int paged_row_lanes(int n) {
  int l = 1;
  while (l < n && l < 32) l *= 2;
  return l;
}

// This lane's vectors li + L·i (of W / VEC) of cache row j, kv head hk (j past j_end: row
// j_end - 1, which is in bounds).
template <typename T, int HKV, int W, int BS, int VEC, int L, int NVEC>
__device__ __forceinline__ void paged_load_row(const T* cache, const int* table, i64 hk, i64 j,
                                               i64 j_end, int li, Vec<T, VEC> (&out)[NVEC]) {
  const i64 jj = j < j_end ? j : j_end - 1;
  const i64 row = (static_cast<i64>(table[jj / BS]) * HKV + hk) * BS + jj % BS;
#pragma unroll
  for (int i = 0; i < NVEC; ++i)
    if (li + L * i < W / VEC) out[i] = load_vec<T, VEC>(cache + row * W + (li + L * i) * VEC);
}

// Chunk c0's key rows c0 + u·KROUND + kr (kr = warp·KPW + lane / KL) and value rows
// c0 + vr + VROWS·w, this lane's vectors of each (paged_load_row).
template <typename T, int HKV, int D, int DV, int BS, int VEC, int KL, int VL, int KROUND,
          int VROWS, int U, int NK, int VW, int NV>
__device__ __forceinline__ void paged_load_chunk(const PagedAttnParams<T>& p, const int* table,
                                                 i64 hk, i64 c0, i64 j_end, int kr, int kl,
                                                 int vr, int vl, Vec<T, VEC> (&kv)[U][NK],
                                                 Vec<T, VEC> (&vv)[VW][NV]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    paged_load_row<T, HKV, D, BS, VEC, KL>(p.key_cache, table, hk, c0 + u * KROUND + kr, j_end,
                                           kl, kv[u]);
#pragma unroll
  for (int w = 0; w < VW; ++w)
    paged_load_row<T, HKV, DV, BS, VEC, VL>(p.value_cache, table, hk, c0 + vr + VROWS * w, j_end,
                                            vl, vv[w]);
}

// paged_load_row's vectors again, from `fresh` (shared memory, W elements) when row j (past
// j_end: j_end - 1) is position j_fresh: this step's token, whose cache row is not written yet.
template <typename T, int W, int VEC, int L, int NVEC>
__device__ __forceinline__ void paged_fresh_row(i64 j, i64 j_end, int li, i64 j_fresh,
                                                const T* fresh, Vec<T, VEC> (&out)[NVEC]) {
  if ((j < j_end ? j : j_end - 1) != j_fresh) return;
#pragma unroll
  for (int i = 0; i < NVEC; ++i)
    if (li + L * i < W / VEC) out[i] = load_vec<T, VEC>(fresh + (li + L * i) * VEC);
}

// One query token per row, GQ query heads of one kv head per block (GQ divides HQ / HKV: each
// key and value row is read once for all of them): blockIdx.y = b·(HQ / GQ) + g, the heads
// g·GQ .. g·GQ + GQ - 1; blockIdx.x = partition of the context (keys [pi·PART, min((pi + 1)·PART,
// ctx)), all of them with PART = 0). The keys are taken in chunks of CH: each key row is read by
// a group of KL lanes with vector loads (the whole chunk's keys and values are loaded before any
// is used, so a chunk costs one round trip to memory after its block-table lookups), scored for
// every head into shared memory, and folded into per-head running softmaxes that every warp
// keeps alike; value rows are spread over the block (RPW rows per warp), and their sums meet in
// shared memory at the end, a head at a time. A row of one partition is written directly,
// otherwise a partial (DV unnormalised sums, max, sum) per head h at
// part[((b·HQ + h)·max_parts + pi)·(DV + 2)].
// With FRESH (the decode route: no append launch before it), the blocks of a row's last
// partition take its new key (rotated) and value from p.k_new / p.v_new into shared memory for
// position ctx - 1, and those of the kv head's first head group also write them into the cache
// (nothing for slot -1). No block reads that cache row: the append needs no launch of its own.
// Nothing before it in the step then writes what its first chunk reads (context_lens and
// block_tables are copied in before the step, the other cache rows by earlier steps): the FRESH
// kernel loads that chunk before kiln::kernel_enter(), so that under programmatic dependent
// launch those loads overlap the kernel before it. The FRESH kernel enters itself; without
// FRESH the caller enters first.
// The first chunk's loads go out before the queries' (EARLY), so that the two round trips to
// memory overlap, with FRESH or with one query head a block; without FRESH and GQ > 1 the
// registers that holds cost blocks per SM (ptxas, sm_90, the Llama's 4 heads a block: 126 ->
// 168). One H200, kernels_bench_paged_decode, µs a layer, the first chunk after the queries ->
// before them: GPT-2 batch 8 (1 head a block) 9.67 -> 8.85, FRESH 9.62 -> 8.19; the Llama
// batch 1 (1 head) 6.26 -> 5.77, batch 8 FRESH (4 heads) 13.51 -> 10.78, without FRESH 11.40
// -> 13.17 (hence not there). Loading each further chunk before the one ahead of it is summed
// (PART = 0 or PART > CH) doubled the chunk's registers and measured slower at every batch from
// 8 (the Llama, one partition, batch 32: 27.2 -> 50.3).
template <typename T, int HQ, int HKV, int D, int DV, int BS, int PART, int WARPS, int GQ = 1,
          int ROT = 0, int ROT_MODE = 0, bool FRESH = false>
__device__ void paged_decode_split(const PagedAttnParams<T>& p, float* part, int max_parts) {
  static_assert(HQ % HKV == 0 && (HQ / HKV) % GQ == 0, "a block's heads share one kv head");
  constexpr int VEC = paged_vec<T, D, DV>();
  constexpr int NVK = D / VEC, KL = paged_row_lanes(NVK), KPW = 32 / KL;
  constexpr int NK = (NVK + KL - 1) / KL;  // key vectors per lane
  constexpr int NVV = DV / VEC, VL = paged_row_lanes(NVV), RPW = 32 / VL;
  constexpr int NV = (NVV + VL - 1) / VL;  // value vectors per lane
  constexpr int KROUND = WARPS * KPW, VROWS = WARPS * RPW;
  // Key rounds per chunk: about 64 keys, at most 8 vectors in flight per lane, and no more
  // than a partition holds.
  constexpr int U0 = 64 / KROUND > 0 ? 64 / KROUND : 1;
  constexpr int U1 = U0 * NK > 8 ? (8 / NK > 0 ? 8 / NK : 1) : U0;
  constexpr int U = PART > 0 && PART / KROUND < U1 ? (PART / KROUND > 0 ? PART / KROUND : 1) : U1;
  constexpr int CH = KROUND * U;  // keys per chunk
  constexpr int VW = (CH + VROWS - 1) / VROWS;  // value rows per thread
  __shared__ float qs[GQ][D];
  __shared__ float sc[GQ][CH];
  __shared__ float red[VROWS][DV];
  __shared__ __align__(16) T fresh_k[D];
  __shared__ __align__(16) T fresh_v[DV];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 b = blockIdx.y / (HQ / GQ);
  const i64 h0 = blockIdx.y % (HQ / GQ) * GQ, hk = h0 / (HQ / HKV);
  const i64 ctx = p.context_lens[b];
  const i64 nparts = paged_partitions<PART>(ctx);
  const int pi = blockIdx.x;
  if (pi >= nparts) return;  // whole block: no barrier reached
  const i64 j_begin = PART == 0 ? 0 : static_cast<i64>(pi) * PART;
  const i64 j_end = PART == 0 || j_begin + PART > ctx ? ctx : j_begin + PART;
  const T* cs = p.rot_cos + b * p.rot_st;
  const T* sn = p.rot_sin + b * p.rot_st;
  const int* table = p.block_tables + b * p.bt_stride;
  const int kl = lane % KL, kr = warp * KPW + lane / KL;  // this thread's key slice and row
  const int vr = warp * RPW + lane / VL, vl = lane % VL;  // this thread's value row and slice
  constexpr bool EARLY = FRESH || GQ == 1;  // the first chunk loaded before the queries
  // The chunk being summed: keys u·KROUND + warp·KPW + lane / KL and value rows vr + VROWS·w;
  // positions past the partition re-read its last key (in bounds) and count for nothing.
  Vec<T, VEC> kv[U][NK], vv[VW][NV];
  if (EARLY && j_begin < j_end)
    paged_load_chunk<T, HKV, D, DV, BS, VEC, KL, VL, KROUND, VROWS, U, NK, VW, NV>(
        p, table, hk, j_begin, j_end, kr, kl, vr, vl, kv, vv);
  if (FRESH) kernel_enter();

  // The group's queries, rotated and scaled, in fp32: each element loaded (and rotated) once by
  // one thread of the block, then every lane takes its slice, vectors kl + KL·i of each row.
  for (int x = threadIdx.x; x < GQ * D; x += 32 * WARPS) {
    const int g = x / D, d = x % D;
    const T* qrow = p.q + b * p.q_sb + (h0 + g) * p.q_sh;
    qs[g][d] = ctx > 0 ? paged_load_rotated<T, ROT, ROT_MODE>(qrow, cs, sn, d) * p.scale : 0.0f;
  }
  const bool fresh = FRESH && ctx > 0 && pi == nparts - 1;
  const i64 j_fresh = fresh ? ctx - 1 : -1;
  if (fresh) {
    const T* krow = p.k_new + b * p.k_st + hk * p.k_sh;
    for (int d = threadIdx.x; d < D; d += 32 * WARPS)
      fresh_k[d] = from_f32<T>(paged_load_rotated<T, ROT, ROT_MODE>(krow, cs, sn, d));
    for (int d = threadIdx.x; d < DV; d += 32 * WARPS)
      fresh_v[d] = p.v_new[b * p.v_st + hk * p.v_sh + d];
  }
  __syncthreads();
  if (fresh && h0 % (HQ / HKV) == 0) {
    const long long slot = p.slot_mapping[b];
    if (slot >= 0) {
      const i64 row = (slot / BS * HKV + hk) * BS + slot % BS;
      for (int d = threadIdx.x; d < D; d += 32 * WARPS) p.key_out[row * D + d] = fresh_k[d];
      for (int d = threadIdx.x; d < DV; d += 32 * WARPS) p.value_out[row * DV + d] = fresh_v[d];
    }
  }
  float q[GQ][NK][VEC];
#pragma unroll
  for (int g = 0; g < GQ; ++g)
#pragma unroll
    for (int i = 0; i < NK; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        q[g][i][e] = kl + KL * i < NVK ? qs[g][(kl + KL * i) * VEC + e] : 0.0f;

  float m[GQ], l[GQ], acc[GQ][NV][VEC];
#pragma unroll
  for (int g = 0; g < GQ; ++g) {
    m[g] = neg_inf();
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][i][e] = 0.0f;
  }

  // A partition of one chunk: with EARLY the loop below holds no loads (one H200, the Llama's
  // FRESH kernel at batch 8: 10.78 µs so, 13.23 with a load the loop never reaches).
  constexpr bool kOneChunk = PART > 0 && PART <= CH;
  for (i64 c0 = j_begin; c0 < j_end; c0 += CH) {
    if (!EARLY || (!kOneChunk && c0 != j_begin))
      paged_load_chunk<T, HKV, D, DV, BS, VEC, KL, VL, KROUND, VROWS, U, NK, VW, NV>(
          p, table, hk, c0, j_end, kr, kl, vr, vl, kv, vv);
    if (FRESH && fresh && c0 + CH >= j_end) {  // the chunk holding position ctx - 1
#pragma unroll
      for (int u = 0; u < U; ++u)
        paged_fresh_row<T, D, VEC, KL>(c0 + u * KROUND + kr, j_end, kl, j_fresh, fresh_k, kv[u]);
#pragma unroll
      for (int w = 0; w < VW; ++w)
        paged_fresh_row<T, DV, VEC, VL>(c0 + vr + VROWS * w, j_end, vl, j_fresh, fresh_v, vv[w]);
    }
    // Scores: each lane's partial dot per head, summed over its KL lanes.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = u * KROUND + warp * KPW + lane / KL;
#pragma unroll
      for (int g = 0; g < GQ; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < NK; ++i)
          if (kl + KL * i < NVK)
#pragma unroll
            for (int e = 0; e < VEC; ++e) dot = fmaf(q[g][i][e], to_f32(kv[u][i].v[e]), dot);
#pragma unroll
        for (int off = KL / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (kl == 0) sc[g][t] = c0 + t < j_end ? dot : neg_inf();
      }
    }
    __syncthreads();
    // The running softmaxes, the same in every thread (same data, same order).
    float corr[GQ];
#pragma unroll
    for (int g = 0; g < GQ; ++g) {
      float cm = neg_inf();
      for (int t = lane; t < CH; t += 32) cm = fmaxf(cm, sc[g][t]);
      cm = warp_reduce_max(cm);
      const float m_new = fmaxf(m[g], cm);  // finite: the chunk holds a key
      corr[g] = expf(m[g] - m_new);         // m = -inf → 0
      float cl = 0.0f;
      for (int t = lane; t < CH; t += 32) cl += expf(sc[g][t] - m_new);
      l[g] = l[g] * corr[g] + warp_reduce_sum(cl);
      m[g] = m_new;
    }
#pragma unroll
    for (int w = 0; w < VW; ++w) {
      const int t = vr + VROWS * w;
#pragma unroll
      for (int g = 0; g < GQ; ++g) {
        const float pw = t < CH ? expf(sc[g][t] - m[g]) : 0.0f;  // past the partition: -inf
#pragma unroll
        for (int i = 0; i < NV; ++i)
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            acc[g][i][e] =
                fmaf(pw, to_f32(vv[w][i].v[e]), w == 0 ? acc[g][i][e] * corr[g] : acc[g][i][e]);
      }
    }
    __syncthreads();  // sc is rewritten by the next chunk
  }

  // Per head, the value rows' sums meet in shared memory.
  const bool direct = nparts == 1;
#pragma unroll
  for (int g = 0; g < GQ; ++g) {
#pragma unroll
    for (int i = 0; i < NV; ++i)
      if (vl + VL * i < NVV)
#pragma unroll
        for (int e = 0; e < VEC; ++e) red[vr][(vl + VL * i) * VEC + e] = acc[g][i][e];
    __syncthreads();
    const i64 bh = b * HQ + h0 + g;
    float* prow = direct ? nullptr : part + (bh * max_parts + pi) * (DV + 2);
    T* orow = p.o + b * p.o_sb + (h0 + g) * p.o_sh;
    for (int d = threadIdx.x; d < DV; d += 32 * WARPS) {
      float a = 0.0f;
#pragma unroll
      for (int r = 0; r < VROWS; ++r) a += red[r][d];
      if (direct)
        orow[d] = from_f32<T>(l[g] > 0.0f ? a / l[g] : 0.0f);  // ctx = 0: zeros
      else
        prow[d] = a;
    }
    if (!direct && threadIdx.x == 0) {
      prow[DV] = m[g];
      prow[DV + 1] = l[g];
    }
    if (g + 1 < GQ) __syncthreads();  // red is rewritten for the next head
  }
}

// A block of N threads per b·HQ (blockIdx.x): merges the row's partitions; rows of one
// partition were written by paged_decode_split. Partitions are weighed N at a time (one per
// thread), then summed by G groups of threads, each owning every output element.
template <typename T, int HQ, int DV, int PART, int N>
__device__ void paged_decode_combine(const PagedAttnParams<T>& p, const float* part,
                                     int max_parts) {
  static_assert(N % 32 == 0, "whole warps");
  constexpr int WARPS = N / 32;
  constexpr int G = N / DV > 1 ? N / DV : 1;          // groups of threads over the partitions
  constexpr int DPT = (DV + N / G - 1) / (N / G);     // output elements per thread
  __shared__ float weight[N];
  __shared__ float wred[WARPS];
  __shared__ float ored[G][DV];
  const i64 bh = blockIdx.x;
  const i64 b = bh / HQ, h = bh % HQ;
  const i64 n = paged_partitions<PART>(p.context_lens[b]);
  if (n <= 1) return;  // whole block
  const float* rows = part + bh * max_parts * (DV + 2);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float top = neg_inf();
  for (i64 s = tid; s < n; s += N) top = fmaxf(top, rows[s * (DV + 2) + DV]);
  top = warp_reduce_max(top);
  if (lane == 0) wred[warp] = top;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < WARPS; ++w) top = fmaxf(top, wred[w]);
  const int g = tid / (N / G), d0 = tid % (N / G);
  float acc[DPT];
#pragma unroll
  for (int k = 0; k < DPT; ++k) acc[k] = 0.0f;
  float sum = 0.0f;
  for (i64 c = 0; c < n; c += N) {
    __syncthreads();  // wred / the previous chunk's weights are read
    const i64 s = c + tid;
    float w = 0.0f;
    if (s < n) {
      const float ms = rows[s * (DV + 2) + DV];
      w = ms == neg_inf() ? 0.0f : expf(ms - top);
      sum += w * rows[s * (DV + 2) + DV + 1];
    }
    weight[tid] = w;
    __syncthreads();
    const int cn = n - c < N ? static_cast<int>(n - c) : N;
#pragma unroll 4
    for (int k = g; k < cn; k += G) {
      const float wk = weight[k];
      const float* r = rows + (c + k) * (DV + 2);
#pragma unroll
      for (int e = 0; e < DPT; ++e) {
        const int d = d0 + e * (N / G);
        if (d < DV) acc[e] = fmaf(wk, r[d], acc[e]);
      }
    }
  }
  sum = warp_reduce_sum(sum);
  __syncthreads();
  if (lane == 0) wred[warp] = sum;
#pragma unroll
  for (int e = 0; e < DPT; ++e) {
    const int d = d0 + e * (N / G);
    if (d < DV) ored[g][d] = acc[e];
  }
  __syncthreads();
  sum = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) sum += wred[w];
  T* orow = p.o + b * p.o_sb + h * p.o_sh;
  for (int d = tid; d < DV; d += N) {
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < G; ++k) a += ored[k][d];
    orow[d] = from_f32<T>(sum > 0.0f ? a / sum : 0.0f);
  }
}

// ---- prefill ------------------------------------------------------------------------------------

// A warp per query row: blockIdx.x·WARPS + warp = query index i < q_len, blockIdx.y = b·HQ + h.
// Shared memory: WARPS·D floats.
template <typename T, int HQ, int HKV, int D, int DV, int BS, int WARPS, int ROT = 0,
          int ROT_MODE = 0>
__device__ void paged_prefill(const PagedAttnParams<T>& p) {
  constexpr int DVL = (DV + 31) / 32;
  extern __shared__ float paged_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 bh = blockIdx.y;
  const i64 b = bh / HQ, h = bh % HQ, hk = h / (HQ / HKV);
  const i64 i = static_cast<i64>(blockIdx.x) * WARPS + warp;
  if (i >= p.q_len) return;  // no block-wide barrier below
  const i64 ctx = p.context_lens[b];
  const i64 pos = ctx - p.q_len + i;  // the query's position; keys 0..pos
  float* qs = paged_smem + warp * D;
  PagedWarpState<DVL> s;
  paged_state_init(s);
  if (pos >= 0) {
    const T* qrow = p.q + b * p.q_sb + i * p.q_ss + h * p.q_sh;
    const i64 tok = b * p.q_len + i;  // the new token's index: its table row
    for (int d = lane; d < D; d += 32)
      qs[d] = paged_load_rotated<T, ROT, ROT_MODE>(qrow, p.rot_cos + tok * p.rot_st,
                                                   p.rot_sin + tok * p.rot_st, d) *
              p.scale;
    __syncwarp();
    const int* table = p.block_tables + b * p.bt_stride;
    for (i64 j = 0; j <= pos; ++j) paged_fold_key<T, HKV, D, DV, BS, DVL>(p, table, hk, j, qs, s);
  }
  T* orow = p.o + b * p.o_sb + i * p.o_ss + h * p.o_sh;
#pragma unroll
  for (int t = 0; t < DVL; ++t) {
    const int d = lane + 32 * t;
    if (d < DV) orow[d] = from_f32<T>(s.l > 0.0f ? s.acc[t] / s.l : 0.0f);
  }
}

}  // namespace kiln
