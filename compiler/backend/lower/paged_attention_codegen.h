// Paged attention codegen: one layer's attention over the runtime's paged KV cache (LLM
// generation) described by PagedAttnSpec → the KernelDefs and launch geometry of
// kernels/paged_attention.cuh: append the new keys and values to the cache, then decode (one
// query token per row; split over context partitions, then combine) or prefill (a causal chunk
// of q_len tokens per row).
//
// Kernel parameters, in order (T the dtype's kernel type, then `long long S` as every kernel):
//   append:  const T* k, const T* v, const long long* slot_mapping, T* key_cache, T* value_cache
//   decode split / prefill: const T* q, const T* key_cache, const T* value_cache,
//            const int* block_tables, const int* context_lens, T* o[, float* part]
//            [, const T* k, const T* v, const long long* slot_mapping]
//            (the last three: a split with decode_fresh, whose caches are then writable)
//   decode combine: the split's first six (part last).
// `part` (a split decode, or one whose launch has split configurations: decode_workspace):
// paged_decode_part_floats() floats of workspace.
#pragma once

#include <cstdint>
#include <string>

#include "cache/dtype.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct PagedAttnSpec {
  DType dtype = DType::kF16;  // Q, new K/V, caches and output
  int64_t Hq = 1, Hkv = 1, D = 64, Dv = 64;
  int64_t block_size = 16;          // tokens per cache block
  int64_t max_blocks_per_seq = 1;   // columns of block_tables
  ir::DimExpr rows;                 // batch rows of the step (max_seqs): block_tables' rows
  ir::DimExpr q_len;                // new tokens per row: 1 for decode, the chunk for prefill
                                    // (at most one of rows, q_len depends on S)
  // Decode: context tokens per partition (a multiple of block_size), 0 = no split (one launch).
  int64_t partition = 0;
  // Decode: query heads per block of the split launch, a divisor of Hq / Hkv. They share one kv
  // head, whose key and value rows the block then reads once for all of them.
  int64_t decode_group = 1;
  // Decode: the split kernel takes `part` even with partition 0 (another configuration of its
  // launch splits, and a launch's configurations share one parameter list).
  bool decode_workspace = false;
  // Decode: the split kernel stands in for the append (the runtime's decode route, where every
  // row's token is its sequence's only new one and no append launch runs): after its other
  // parameters it takes k, v (as the append's) and slot_mapping, reads each row's new key and
  // value from k and v, and writes them into the caches itself.
  bool decode_fresh = false;
  float scale = 1.0f;
  // Element strides (head-dim stride 1). q and o: per row (b), per token of the chunk (prefill)
  // and per head; k and v (append): per new token (rows·q_len of them, row-major) and per head.
  ir::DimExpr q_sb, q_ss, q_sh, o_sb, o_ss, o_sh;
  ir::DimExpr k_st, k_sh, v_st, v_sh;
  // Element offsets of q, o, k and v inside their buffers (views of a fused QKV GEMM's output).
  ir::DimExpr q_off, o_off, k_off, v_off;
  // Rotary applied to Q and K inside the kernels (kiln.PagedAttention with cos/sin): rotary_dim
  // R > 0 rotates the first R elements of each head; the tables (in `dtype`) hold rotary_width
  // entries per token (R/2, or R for a full-width table), token t's row rotary_st·t elements in
  // (0: one row for every token). The kernels then take `rot_cos` and `rot_sin` parameters.
  int64_t rotary_dim = 0;
  int64_t rotary_width = 0;
  bool rotary_interleaved = false;
  ir::DimExpr rotary_st;
};

// Contiguous strides: q/o [rows, q_len, H, D], k/v [tokens, Hkv, D].
void paged_attn_contiguous_strides(PagedAttnSpec& s);

// The largest decode_group whose queries and output sums fit a lane's register budget (the
// kernel keeps both for every head of the group), a divisor of Hq / Hkv.
int64_t paged_decode_default_group(const PagedAttnSpec& s);

// A decode step's split configuration: query heads per block and context tokens per partition.
struct PagedDecodeConfig {
  int64_t group = 1, partition = 0;
  bool operator==(const PagedDecodeConfig&) const = default;
};
// The configuration for `rows` batch rows, from a sweep of GPT-2- and Llama-sized layers on an
// H200 (tests/kernels/bench_paged_decode.cc) at 512 tokens of context: heads share a block
// (the default group) once that still leaves 64 blocks per position, and the partition grows
// with the rows·Hq / group blocks per position: 32 tokens up to 16 of them, 64 up to 128, 256
// up to 256, beyond that none (no split, no combine). Partitions are multiples of block_size;
// one that covers max_seq_len is 0.
PagedDecodeConfig paged_decode_config(const PagedAttnSpec& s, int64_t rows);
// Its name among a launch's configurations: "group=4 partition=64".
std::string paged_decode_config_name(const PagedDecodeConfig& c);
// Partitions of the longest context (max_blocks_per_seq·block_size): grid.x of the split launch.
int64_t paged_decode_max_partitions(const PagedAttnSpec& s);
ir::DimExpr paged_decode_part_floats(const PagedAttnSpec& s);

// Grid-stride copy of rows·q_len new tokens' K and V into the cache (slot -1 skipped).
AttnKernel codegen_paged_kv_append(const PagedAttnSpec& s);
// Decode: split launch (grid max_partitions × rows·Hq / decode_group) and, with s.partition > 0,
// the combine launch (rows·Hq blocks; none with partition 0). A row of one partition is written
// by the split launch.
AttnKernel codegen_paged_decode_split(const PagedAttnSpec& s);
AttnKernel codegen_paged_decode_combine(const PagedAttnSpec& s);
// Prefill/chunked: a warp per query row, grid ceil(q_len / warps) × rows·Hq.
AttnKernel codegen_paged_prefill(const PagedAttnSpec& s);

}  // namespace kiln::compiler
