// Attention codegen: a kiln.Attention step described as strided views (AttnSpec) → the
// KernelDefs and launch geometry of kernels/attention.cuh (prefill: tensor-core or SIMT) and
// kernels/attention_decode.cuh (one query row: split keys, then combine). Used by
// lower_attention.cc and by the benchmark (tests/kernels/bench_attention.cc).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/dtype.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// Element [b, h, s, d] of the view is at base[offset + b·st[0] + h·st[1] + s·st[2] + d·st[3]].
struct AttnView {
  ir::DimExpr offset;
  std::array<ir::DimExpr, 4> st;
};

// The view of a contiguous [B, H, S, D] tensor.
AttnView attn_view_contiguous(const ir::Shape& shape);

struct AttnSpec {
  DType dtype = DType::kF16;  // Q, K, V and Y
  AttnView q, k, v, o;
  ir::DimExpr B, Sq, Skv;
  int64_t Hq = 1, Hkv = 1, D = 64, Dv = 64;
  float scale = 1.0f;
  bool causal = false;
  bool has_mask = false;
  DType mask_dtype = DType::kF32;
  std::array<ir::DimExpr, 4> mask_st;  // broadcast strides over [B, Hq, Sq, Skv] (0 = broadcast)
  bool has_kpad = false;
  DType kpad_dtype = DType::kF32;
  ir::DimExpr kpad_sb;  // batch stride of key_padding [B, Skv]
  // The kernels take `const long long* real_size` (after q, k, v, o[, mask][, kpad]): the
  // request's real size s, which the runtime writes before each run. Queries past Sq(s) and keys
  // past Skv(s) are then padding: keys there are excluded, and the causal diagonal is that of
  // the real sizes. Without it, the real sizes are the run's Sq and Skv.
  bool real_size = false;
  // The largest size S the step runs at (config max_size; 0: unknown). Only the choice of the
  // default tiles reads it (attention_default_tiles).
  int64_t max_size = 0;
};

// Whether a step must read the request's real size (AttnSpec::real_size) to keep padding out of
// real rows when runs may be padded (`padded_runs`). A request of real size s runs at the
// captured size P >= s, and the real rows of every tensor are the prefix c·s + d of its size
// axis c·S + d (lower_layout.cc refuses the ops that would break that), so at P the keys past
// Skv(s) are padding. A real query must not see them, and under a causal mask its diagonal must
// be that of the real sizes. Without the real size that holds only when
//  - Skv is constant and the attention is not causal: there are no padding keys;
//  - it is causal with Skv - Sq constant (Sq = Skv = S): the real query i < Sq(s) sees keys
//    j <= i + Skv - Sq < Skv(s), at P as at s;
//  - it is not causal and has a key_padding graph input: the runtime fills the input's padding
//    with zeros, which key_padding reads as "excluded".
// Every other case (keys over S without key_padding; a causal diagonal that moves with S, e.g.
// a constant query count over S keys) reads the real size: the kernels exclude keys at or beyond
// Skv(s) as key_padding would, and put the causal diagonal at Skv(s) - Sq(s). That covers every
// attention kiln lowers, so the lowering refuses none for padding.
bool attention_needs_real_size(const AttnSpec& s, bool padded_runs);

// The name of the kernels' key-padding parameter (`const T* __restrict__ kpad`): the autotuner
// fills the value passed there with ones (every key kept) rather than its zeros for integers.
inline constexpr std::string_view kAttnKeyPaddingParam = "kpad";

// One kernel of the step: its definition and launch geometry (grid.x over `work`, grid.y).
struct AttnKernel {
  KernelDef def;
  ir::DimExpr work;
  uint32_t work_per_block = 1;
  ir::DimExpr grid_y = ir::DimExpr::constant(1);
  uint32_t block = 128;
  uint32_t shared_bytes = 0;
};

// The tensor-core prefill applies: f16/bf16, D == Dv in {64, 80, 96, 128}, unit head-dim
// strides, every offset and stride a multiple of 8 elements (16-byte cp.async / stores).
bool attention_mma_eligible(const AttnSpec& s);

// Tile shape of the tensor-core prefill (kernels/attention.cuh, attention_prefill_mma).
struct AttnMmaTiles {
  int warps = 4;          // 32·warps threads per block
  int warp_mtiles = 1;    // 16-row query tiles per warp: a block owns 16·warp_mtiles·warps rows
  int block_n = 64;       // keys per K/V tile (a multiple of 16)
  bool q_in_regs = true;  // Q fragments held in registers, else re-read from shared per tile
  // Warp groups that split a block's key tiles between them (kernels/attention.cuh, "Key
  // groups"): 32·warps·key_groups threads, key_groups copies of the shared memory.
  int key_groups = 1;
  bool operator==(const AttnMmaTiles&) const = default;
};

// Block shape of the SIMT prefill: one query row per warp.
struct AttnSimtTiles {
  int warps = 4;
  bool operator==(const AttnSimtTiles&) const = default;
};

// The tiles for head dim `d` on grids that fill the GPU (measured on an H100, see
// tests/kernels/bench_attention.cc --sweep).
AttnMmaTiles attention_mma_tiles(int64_t d);
// The tiles codegen_attention_prefill(s) uses: attention_mma_tiles(s.D), except at D = 64 where
// even the largest size (s.max_size) gives those tiles fewer than two blocks per SM of an H100
// (batch-1 prefill of a few dozen heads): there 64-row blocks (4 warps of one m-tile).
AttnMmaTiles attention_default_tiles(const AttnSpec& s);
// "warps=4 mtiles=2 bn=64 q=regs" (" kg=2" added with key groups); "warps=4".
std::string attention_tiles_label(const AttnMmaTiles& t);
std::string attention_tiles_label(const AttnSimtTiles& t);
// Head dim `d` can run tiles `t`: shared memory within 227 KiB, and the per-thread fragments
// (O accumulators, scores, Q when in registers) within what ptxas keeps in registers.
bool attention_mma_fits(int64_t d, const AttnMmaTiles& t);
// Alternatives to the default tiles `def` (attention_mma_tiles(d) when not given; at most 9, all
// fitting, none equal to `def`): the candidates the autotuner times and `bench_attention
// --sweep` measures.
std::vector<AttnMmaTiles> attention_mma_tile_candidates(int64_t d);
std::vector<AttnMmaTiles> attention_mma_tile_candidates(int64_t d, const AttnMmaTiles& def);
// Alternatives to the default SIMT block (4 warps).
std::vector<AttnSimtTiles> attention_simt_tile_candidates();

// Prefill kernel (tensor-core when eligible, else SIMT). Params: q, k, v, o[, mask][, kpad]
// [, real_size].
AttnKernel codegen_attention_prefill(const AttnSpec& s);
// The same with explicit tensor-core tiles (ignored on the SIMT path).
AttnKernel codegen_attention_prefill(const AttnSpec& s, const AttnMmaTiles& tiles);
// The SIMT prefill with an explicit block, whether or not the tensor-core path applies.
AttnKernel codegen_attention_prefill(const AttnSpec& s, const AttnSimtTiles& tiles);

// Launch configurations of a prefill step for the autotuner: the default's label (the
// KernelLaunch's `config`) and the alternatives (tile candidates of the path
// codegen_attention_prefill(s) takes; those that cannot win for a constant Sq are left out).
std::string attention_prefill_config(const AttnSpec& s);
std::vector<LaunchCandidate> attention_prefill_candidates(const AttnSpec& s);

// Decode (Sq == 1): with nsplit == 1 one kernel writes the output (params as prefill);
// otherwise the split kernel (params + "float* part") and then the combine kernel (q, k, v, o
// [, mask][, kpad][, real_size], part) — `part` holds attention_decode_part_floats() floats. Decode has no
// launch candidates: its two launches share the partial buffer sized by the split count, so a
// choice made per launch (what the autotuner times) cannot change it.
int64_t attention_decode_splits(const AttnSpec& s);
AttnKernel codegen_attention_decode_split(const AttnSpec& s, int64_t nsplit);
AttnKernel codegen_attention_decode_combine(const AttnSpec& s, int64_t nsplit);
ir::DimExpr attention_decode_part_floats(const AttnSpec& s, int64_t nsplit);

}  // namespace kiln::compiler
