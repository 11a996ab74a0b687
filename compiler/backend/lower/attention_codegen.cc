#include "compiler/backend/lower/attention_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {
namespace {

constexpr int kDecodeWarps = 4;
// Two blocks per SM of an H100 or H200 (132 SMs): below that a grid leaves SMs short of work.
constexpr int64_t kTwoBlocksPerSm = 2 * 132;
// Dynamic shared memory a block may opt in to (sm_80 and sm_90: 227 KiB); above 48 KiB the
// runtime raises the kernel's limit.
constexpr int64_t kMaxSharedBytes = 227 * 1024;
// Fragment registers per thread (mma_fragment_regs) above which ptxas spills the tensor-core
// prefill: the rest of its 255 go to addresses, loop state, the softmax maxima and sums, and the
// K/V fragments of one mma step. Measured with `nvcc -cubin -arch=sm_90 -Xptxas -v` (CUDA 13.0,
// f16 causal): no shape at 192 or below spills (the default D = 128 tiles, 192: 255 registers,
// no spills; D = 64 default, 160: 238), every one tried above does (208: D = 96 4x2 with Q in
// registers, and 8x2; 224: D = 64 with 128-key tiles and Q in registers; 256: D = 128 4x2 with
// Q in registers, 432 bytes spilled).
constexpr int kMaxFragmentRegs = 192;

bool multiple_of_8(const ir::DimExpr& d) { return d.coef % 8 == 0 && d.offset % 8 == 0; }

std::string mask_ctype(const AttnSpec& s) {
  return s.has_mask ? std::string(kernel_ctype(s.mask_dtype)) : "float";
}
std::string kpad_ctype(const AttnSpec& s) {
  return s.has_kpad ? std::string(kernel_ctype(s.kpad_dtype)) : "float";
}

std::vector<std::string> base_params(const AttnSpec& s) {
  const std::string t(kernel_ctype(s.dtype));
  std::vector<std::string> p = {
      // Q, K and V may be the same buffer (a fused QKV GEMM): read-only, no __restrict__.
      fmt::format("const {}* q", t), fmt::format("const {}* k", t), fmt::format("const {}* v", t),
      fmt::format("{}* __restrict__ o", t)};
  if (s.has_mask) p.push_back(fmt::format("const {}* __restrict__ mask", mask_ctype(s)));
  if (s.has_kpad)
    p.push_back(fmt::format("const {}* __restrict__ {}", kpad_ctype(s), kAttnKeyPaddingParam));
  if (s.real_size) p.push_back("const long long* __restrict__ real_size");
  return p;
}

std::string view_code(const char* name, const AttnView& v) {
  return fmt::format(
      "  p.{0} = {0} + {1};\n  p.{0}_sb = {2};\n  p.{0}_sh = {3};\n  p.{0}_ss = {4};\n"
      "  p.{0}_sd = {5};\n",
      name, dim_code(v.offset), dim_code(v.st[0]), dim_code(v.st[1]), dim_code(v.st[2]),
      dim_code(v.st[3]));
}

// Fills `kiln::AttnParams<...> p` from the spec (strides baked in; they may use S).
std::string params_code(const AttnSpec& s) {
  std::string c = fmt::format("  kiln::AttnParams<{}, {}, {}> p;\n", kernel_ctype(s.dtype),
                              mask_ctype(s), kpad_ctype(s));
  c += view_code("q", s.q) + view_code("k", s.k) + view_code("v", s.v) + view_code("o", s.o);
  if (s.has_mask) {
    c += fmt::format(
        "  p.mask = mask;\n  p.m_sb = {};\n  p.m_sh = {};\n  p.m_sq = {};\n"
        "  p.m_sk = {};\n",
        dim_code(s.mask_st[0]), dim_code(s.mask_st[1]), dim_code(s.mask_st[2]),
        dim_code(s.mask_st[3]));
  } else {
    c += "  p.mask = nullptr;\n  p.m_sb = p.m_sh = p.m_sq = p.m_sk = 0;\n";
  }
  if (s.has_kpad)
    c += fmt::format("  p.kpad = kpad;\n  p.kp_sb = {};\n", dim_code(s.kpad_sb));
  else
    c += "  p.kpad = nullptr;\n  p.kp_sb = 0;\n";
  c += fmt::format(
      "  p.B = {};\n  p.Hq = {}LL;\n  p.Hkv = {}LL;\n  p.Sq = {};\n  p.Skv = {};\n  p.D = {};\n"
      "  p.Dv = {};\n  p.scale = {};\n  p.causal = {};\n",
      dim_code(s.B), s.Hq, s.Hkv, dim_code(s.Sq), dim_code(s.Skv), s.D, s.Dv,
      float_literal(s.scale), s.causal ? "true" : "false");
  if (s.real_size) {
    c += fmt::format(
        "  const long long real_s = *real_size;  // the request's size, written before the run\n"
        "  p.q_len = kiln::attn_real_len({}LL, {}LL, real_s, p.Sq);\n"
        "  p.kv_len = kiln::attn_real_len({}LL, {}LL, real_s, p.Skv);\n",
        s.Sq.coef, s.Sq.offset, s.Skv.coef, s.Skv.offset);
  } else {
    c += "  p.q_len = p.Sq;\n  p.kv_len = p.Skv;\n";
  }
  return c;
}

// 32-bit registers each thread of the tensor-core prefill holds across the key loop: the O
// accumulators (16·MT rows × D per warp), the scores of one key tile (16·MT × BN) and, with Q in
// registers, the Q fragments (16·MT × D halves).
int64_t mma_fragment_regs(int64_t d, const AttnMmaTiles& t) {
  return t.warp_mtiles * (d / 2 + t.block_n / 2 + (t.q_in_regs ? d / 4 : 0));
}

// Q tile, then double-buffered K and V tiles; rows padded to d + 8 halves. Above 48 KiB for
// most shapes (the D = 128 default: 102 KiB; 8 warps × 2 m-tiles at D = 128: 136 KiB): the
// runtime opts each kernel in to its launch's shared_bytes.
int64_t mma_shared_bytes(int64_t d, const AttnMmaTiles& t) {
  return t.key_groups * (16 * t.warp_mtiles * t.warps + 4 * t.block_n) * (d + 8) * 2;
}

ir::DimExpr times(const ir::DimExpr& d, int64_t c) { return {d.coef * c, d.offset * c}; }

std::string tparams(const AttnSpec& s) {
  return fmt::format("{}, {}, {}", kernel_ctype(s.dtype), mask_ctype(s), kpad_ctype(s));
}

}  // namespace

bool attention_needs_real_size(const AttnSpec& s, bool padded_runs) {
  if (!padded_runs) return false;
  const ir::DimExpr diag_offset{s.Skv.coef - s.Sq.coef, s.Skv.offset - s.Sq.offset};
  if (s.causal) return !diag_offset.is_constant();
  return !s.Skv.is_constant() && !s.has_kpad;
}

AttnView attn_view_contiguous(const ir::Shape& shape) {
  AttnView v;
  v.offset = ir::DimExpr::constant(0);
  ir::DimExpr st = ir::DimExpr::constant(1);
  for (int i = 3; i >= 0; --i) {
    v.st[i] = st;
    // Only the outermost dim may make the product non-linear, and it is never multiplied in.
    if (i > 0) st = ir::dim_mul(st, shape[i]).value_or(ir::DimExpr::constant(0));
  }
  return v;
}

bool attention_mma_eligible(const AttnSpec& s) {
  if (s.dtype != DType::kF16 && s.dtype != DType::kBF16) return false;
  if (s.D != s.Dv || (s.D != 64 && s.D != 80 && s.D != 96 && s.D != 128)) return false;
  for (const AttnView* v : {&s.q, &s.k, &s.v, &s.o}) {
    if (v->st[3] != ir::DimExpr::constant(1) || !multiple_of_8(v->offset)) return false;
    for (int i = 0; i < 3; ++i)
      if (!multiple_of_8(v->st[i])) return false;
  }
  return true;
}

AttnMmaTiles attention_mma_tiles(int64_t d) {
  // 128 query rows per block in 4 warps of 32 rows: each K/V fragment read from shared memory
  // feeds two mma's. Beyond D = 64 the O accumulators and scores leave no registers for Q. On an
  // H100 (fp16, causal, B·H = 64, seq 2048) this runs 299 TFLOP/s at D = 128 (4 warps of 16
  // rows: 227; 48- or 32-key tiles: 285-290) and 248 at D = 64 (8 warps of 16 rows: 243).
  AttnMmaTiles t;
  t.warps = 4;
  t.warp_mtiles = 2;
  t.block_n = 64;
  t.q_in_regs = d <= 64;
  return t;
}

std::string attention_tiles_label(const AttnMmaTiles& t) {
  return fmt::format("warps={} mtiles={} bn={} q={}{}", t.warps, t.warp_mtiles, t.block_n,
                     t.q_in_regs ? "regs" : "smem",
                     t.key_groups > 1 ? fmt::format(" kg={}", t.key_groups) : "");
}

std::string attention_tiles_label(const AttnSimtTiles& t) {
  return fmt::format("warps={}", t.warps);
}

bool attention_mma_fits(int64_t d, const AttnMmaTiles& t) {
  if (t.warps < 1 || t.warp_mtiles < 1 || t.block_n < 16 || t.block_n % 16 != 0 || d % 16 != 0 ||
      t.key_groups < 1 || 32 * t.warps * t.key_groups > 1024)
    return false;
  // With several key groups the block's registers must fit the SM's 64K: __launch_bounds__
  // then caps each thread at 65536 / threads, which must leave the fragments room (4 groups of
  // 4 warps at D = 64, 80 fragment registers under a cap of 128: 12 bytes spilled, CUDA 13.0).
  const int64_t threads = 32 * t.warps * t.key_groups;
  if (t.key_groups > 1 && mma_fragment_regs(d, t) + 48 > std::min<int64_t>(255, 65536 / threads))
    return false;
  return mma_shared_bytes(d, t) <= kMaxSharedBytes && mma_fragment_regs(d, t) <= kMaxFragmentRegs;
}

AttnMmaTiles attention_default_tiles(const AttnSpec& s) {
  AttnMmaTiles t = attention_mma_tiles(s.D);
  if (s.D != 64 || s.max_size <= 0) return t;
  // One H200 (fp16, batch 1, 128 and 512 tokens, Q/K/V in a fused QKV product; µs a launch,
  // bench_attention --model): 4 warps of 32 rows against 4 warps of 16 rows, GPT-2 (12 heads)
  // 9.8 / 17.2 against 8.3 / 13.7, with key padding 14.2 / 21.7 against 9.1 / 15.0; a Llama
  // (32 heads over 8) 9.9 / 18.4 against 8.0 / 16.0, with key padding 14.5 / 21.8 against
  // 9.8 / 17.3. Such grids are one block per SM or less, and a block's chain of key tiles (one
  // warp per scheduler) sets the time: halving the rows doubles the blocks and, with 16 rows a
  // warp, frees the registers for a second block per SM.
  const int64_t rows = 16 * t.warp_mtiles * t.warps;
  const int64_t blocks = s.B.eval(s.max_size) * s.Hq * ((s.Sq.eval(s.max_size) + rows - 1) / rows);
  if (blocks < kTwoBlocksPerSm) t.warp_mtiles = 1;
  return t;
}

std::vector<AttnMmaTiles> attention_mma_tile_candidates(int64_t d) {
  return attention_mma_tile_candidates(d, attention_mma_tiles(d));
}

std::vector<AttnMmaTiles> attention_mma_tile_candidates(int64_t d, const AttnMmaTiles& def) {
  // Q goes in registers where they fit (one ldmatrix per k-step saved per key tile).
  auto regs_if_fit = [d](int warps, int mtiles, int block_n, int key_groups = 1) {
    AttnMmaTiles t{warps, mtiles, block_n, true, key_groups};
    if (!attention_mma_fits(d, t)) t.q_in_regs = false;
    return t;
  };
  const AttnMmaTiles large = attention_mma_tiles(d);
  // Shapes that differ from the default (4 warps of 2 m-tiles, 64 keys) in one structural way,
  // in the order kept when more than 6 fit. On an H100 (fp16, causal, B·H = 64, seq 2048) 32- and
  // 48-key tiles ran within 5% of the default at D = 128, and 8 warps of 16 rows within 2% at
  // D = 64; the smaller blocks are for grids too small to fill the SMs.
  const AttnMmaTiles shapes[] = {
      large,                   // the tiles for full grids, where `def` is another
      regs_if_fit(4, 2, 32),   // smaller key tiles: fewer score registers, less shared memory
      regs_if_fit(4, 2, 48),   // between the two
      regs_if_fit(8, 1, 64),   // the default's 128 rows in 8 warps: more warps hide latency
      regs_if_fit(4, 1, 64),   // 64 rows per block: twice the blocks (short sequences, few heads)
      regs_if_fit(8, 2, 64),   // 256 rows per block: each K/V tile feeds twice the rows
      regs_if_fit(4, 2, 128),  // larger key tiles: half the barriers and row-max passes
      {large.warps, large.warp_mtiles, large.block_n, !large.q_in_regs},  // Q elsewhere
      // Key groups: the key tiles of a block split between 2 or 4 warp groups (short
      // sequences with few heads: the block's chain of tiles, not the SMs, sets the time).
      regs_if_fit(4, 1, 64, 2),
      regs_if_fit(4, 1, 64, 4),
  };
  std::vector<AttnMmaTiles> out;
  for (const AttnMmaTiles& t : shapes) {
    if (out.size() == 9) break;
    if (t == def || !attention_mma_fits(d, t) || std::find(out.begin(), out.end(), t) != out.end())
      continue;
    out.push_back(t);
  }
  return out;
}

std::vector<AttnSimtTiles> attention_simt_tile_candidates() {
  // A warp per query row and no block-wide barrier: the block size only sets how finely rows
  // spread over the SMs (2 warps: more blocks for short inputs) and how many rows share a block's
  // scheduling slot (8 warps). 2 warps still reach full occupancy under the 32-blocks-per-SM cap.
  return {AttnSimtTiles{2}, AttnSimtTiles{8}};
}

AttnKernel codegen_attention_prefill(const AttnSpec& s) {
  if (attention_mma_eligible(s)) return codegen_attention_prefill(s, attention_default_tiles(s));
  return codegen_attention_prefill(s, AttnSimtTiles{});
}

AttnKernel codegen_attention_prefill(const AttnSpec& s, const AttnMmaTiles& tiles) {
  if (!attention_mma_eligible(s)) return codegen_attention_prefill(s, AttnSimtTiles{});
  AttnKernel k;
  k.def.params = base_params(s);
  k.def.body = params_code(s);
  k.work = s.Sq;
  k.grid_y = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  const int warps = tiles.warps, rows = 16 * tiles.warp_mtiles * tiles.warps;
  auto b = [](bool v) { return v ? "true" : "false"; };
  const std::string groups = tiles.key_groups > 1 ? fmt::format(", {}", tiles.key_groups) : "";
  k.def.body +=
      fmt::format("  kiln::attention_prefill_mma<{}, {}, {}, {}, {}, {}, {}, {}, {}{}>(p);\n",
                  tparams(s), s.D, warps, tiles.warp_mtiles, tiles.block_n, b(tiles.q_in_regs),
                  b(s.causal), b(s.has_mask), b(s.has_kpad), groups);
  k.def.max_threads = 32 * warps * tiles.key_groups;
  k.block = 32 * warps * tiles.key_groups;
  k.work_per_block = rows;
  k.shared_bytes = static_cast<uint32_t>(mma_shared_bytes(s.D, tiles));
  return k;
}

AttnKernel codegen_attention_prefill(const AttnSpec& s, const AttnSimtTiles& tiles) {
  AttnKernel k;
  k.def.params = base_params(s);
  k.def.body = params_code(s);
  k.work = s.Sq;
  k.grid_y = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  k.def.body += fmt::format("  kiln::attention_prefill_simt<{}, {}, {}>(p);\n", tparams(s),
                            tiles.warps, (s.Dv + 31) / 32);
  k.def.max_threads = 32 * tiles.warps;
  k.block = 32 * tiles.warps;
  k.work_per_block = tiles.warps;
  k.shared_bytes = static_cast<uint32_t>(tiles.warps * s.D * 4);
  return k;
}

std::string attention_prefill_config(const AttnSpec& s) {
  return attention_mma_eligible(s) ? attention_tiles_label(attention_default_tiles(s))
                                   : attention_tiles_label(AttnSimtTiles{});
}

std::vector<LaunchCandidate> attention_prefill_candidates(const AttnSpec& s) {
  const uint32_t default_rows = codegen_attention_prefill(s).work_per_block;
  std::vector<LaunchCandidate> out;
  auto add = [&](std::string label, AttnKernel k) {
    // Sq a constant that one block of the default already covers: a block owning more rows
    // only idles more threads.
    if (s.Sq.is_constant() && s.Sq.offset <= default_rows && k.work_per_block > default_rows)
      return;
    LaunchCandidate c;
    c.config = std::move(label);
    c.def = std::move(k.def);
    c.work = k.work;
    c.work_per_block = k.work_per_block;
    c.grid_y = k.grid_y;
    c.block = k.block;
    c.shared_bytes = k.shared_bytes;
    out.push_back(std::move(c));
  };
  if (attention_mma_eligible(s)) {
    for (const AttnMmaTiles& t : attention_mma_tile_candidates(s.D, attention_default_tiles(s)))
      add(attention_tiles_label(t), codegen_attention_prefill(s, t));
  } else {
    for (const AttnSimtTiles& t : attention_simt_tile_candidates())
      add(attention_tiles_label(t), codegen_attention_prefill(s, t));
  }
  return out;
}

int64_t attention_decode_splits(const AttnSpec& s) {
  const ir::DimExpr bh = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  if (!bh.is_constant()) return 1;  // enough blocks already at every size but the smallest
  if (s.Skv.is_constant() && s.Skv.offset <= 256) return 1;
  // About two blocks per SM, at most 32 partials per row.
  const int64_t want = (kTwoBlocksPerSm + bh.offset - 1) / std::max<int64_t>(bh.offset, 1);
  int64_t n = std::clamp<int64_t>(want, 1, 32);
  if (s.Skv.is_constant()) n = std::min(n, (s.Skv.offset + 63) / 64);
  return std::max<int64_t>(n, 1);
}

ir::DimExpr attention_decode_part_floats(const AttnSpec& s, int64_t nsplit) {
  const ir::DimExpr bh = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  return times(bh, nsplit * (s.Dv + 2));
}

AttnKernel codegen_attention_decode_split(const AttnSpec& s, int64_t nsplit) {
  AttnKernel k;
  const bool direct = nsplit == 1;
  k.def.params = base_params(s);
  if (!direct) k.def.params.push_back("float* __restrict__ part");
  k.def.body = params_code(s);
  k.def.body += fmt::format("  kiln::attention_decode_split<{}, {}, {}, {}>(p, {}, {});\n",
                            tparams(s), kDecodeWarps, (s.Dv + 31) / 32, direct ? "true" : "false",
                            direct ? "nullptr" : "part", nsplit);
  k.def.max_threads = 32 * kDecodeWarps;
  k.block = 32 * kDecodeWarps;
  k.work = ir::DimExpr::constant(nsplit);
  k.work_per_block = 1;
  k.grid_y = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  k.shared_bytes = static_cast<uint32_t>((s.D + kDecodeWarps * (s.Dv + 2)) * 4);
  return k;
}

AttnKernel codegen_attention_decode_combine(const AttnSpec& s, int64_t nsplit) {
  AttnKernel k;
  k.def.params = base_params(s);
  k.def.params.push_back("const float* __restrict__ part");
  k.def.body = params_code(s);
  k.def.body +=
      fmt::format("  kiln::attention_decode_combine<{}>(p, part, {});\n", tparams(s), nsplit);
  k.def.max_threads = 128;
  k.block = 128;
  k.work = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  k.work_per_block = 1;
  return k;
}

}  // namespace kiln::compiler
