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
//    b·HQ + h. A row of one partition is written directly; otherwise each partition writes a
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

// `part`: per (b·HQ, partition) DV + 2 floats (output sums, then max and sum), max_parts
// partitions per b·HQ. Shared memory: D + WARPS·(DV + 2) floats.
template <typename T, int HQ, int HKV, int D, int DV, int BS, int PART, int WARPS, int ROT = 0,
          int ROT_MODE = 0>
__device__ void paged_decode_split(const PagedAttnParams<T>& p, float* part, int max_parts) {
  constexpr int DVL = (DV + 31) / 32;
  extern __shared__ float paged_smem[];
  float* qs = paged_smem;
  float* wst = paged_smem + D;  // per warp: DV sums, max, sum
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 bh = blockIdx.y;
  const i64 b = bh / HQ, h = bh % HQ, hk = h / (HQ / HKV);
  const i64 ctx = p.context_lens[b];
  const i64 nparts = paged_partitions<PART>(ctx);
  const int pi = blockIdx.x;
  if (pi >= nparts) return;  // whole block: no barrier reached
  const i64 j_begin = PART == 0 ? 0 : static_cast<i64>(pi) * PART;
  const i64 j_end = PART == 0 || j_begin + PART > ctx ? ctx : j_begin + PART;

  const T* qrow = p.q + b * p.q_sb + h * p.q_sh;
  if (ctx > 0)  // a padding row reads nothing
    for (int d = threadIdx.x; d < D; d += 32 * WARPS)
      qs[d] = paged_load_rotated<T, ROT, ROT_MODE>(qrow, p.rot_cos + b * p.rot_st,
                                                   p.rot_sin + b * p.rot_st, d) *
              p.scale;
  __syncthreads();

  const int* table = p.block_tables + b * p.bt_stride;
  PagedWarpState<DVL> s;
  paged_state_init(s);
  for (i64 j = j_begin + warp; j < j_end; j += WARPS)
    paged_fold_key<T, HKV, D, DV, BS, DVL>(p, table, hk, j, qs, s);

  float* mine = wst + warp * (DV + 2);
#pragma unroll
  for (int t = 0; t < DVL; ++t) {
    const int d = lane + 32 * t;
    if (d < DV) mine[d] = s.acc[t];
  }
  if (lane == 0) {
    mine[DV] = s.m;
    mine[DV + 1] = s.l;
  }
  __syncthreads();

  float top = neg_inf();
#pragma unroll
  for (int w = 0; w < WARPS; ++w) top = fmaxf(top, wst[w * (DV + 2) + DV]);
  float weight[WARPS];
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float mw = wst[w * (DV + 2) + DV];
    weight[w] = mw == neg_inf() ? 0.0f : expf(mw - top);
    sum += wst[w * (DV + 2) + DV + 1] * weight[w];
  }
  const bool direct = nparts == 1;
  float* prow = direct ? nullptr : part + (bh * max_parts + pi) * (DV + 2);
  T* orow = p.o + b * p.o_sb + h * p.o_sh;
  for (int d = threadIdx.x; d < DV; d += 32 * WARPS) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) a += wst[w * (DV + 2) + d] * weight[w];
    if (direct)
      orow[d] = from_f32<T>(sum > 0.0f ? a / sum : 0.0f);  // ctx = 0: zeros
    else
      prow[d] = a;
  }
  if (!direct && threadIdx.x == 0) {
    prow[DV] = top;
    prow[DV + 1] = sum;
  }
}

// A block per b·HQ (blockIdx.x): merges the row's partitions; rows of one partition were
// written by paged_decode_split.
template <typename T, int HQ, int DV, int PART>
__device__ void paged_decode_combine(const PagedAttnParams<T>& p, const float* part,
                                     int max_parts) {
  const i64 bh = blockIdx.x;
  const i64 b = bh / HQ, h = bh % HQ;
  const i64 n = paged_partitions<PART>(p.context_lens[b]);
  if (n <= 1) return;
  const float* rows = part + bh * max_parts * (DV + 2);
  float top = neg_inf();
  for (i64 s = 0; s < n; ++s) top = fmaxf(top, rows[s * (DV + 2) + DV]);
  float sum = 0.0f;
  for (i64 s = 0; s < n; ++s) {
    const float ms = rows[s * (DV + 2) + DV];
    if (ms != neg_inf()) sum += rows[s * (DV + 2) + DV + 1] * expf(ms - top);
  }
  T* orow = p.o + b * p.o_sb + h * p.o_sh;
  for (int d = threadIdx.x; d < DV; d += blockDim.x) {
    float a = 0.0f;
    for (i64 s = 0; s < n; ++s) {
      const float ms = rows[s * (DV + 2) + DV];
      if (ms != neg_inf()) a += rows[s * (DV + 2) + d] * expf(ms - top);
    }
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
