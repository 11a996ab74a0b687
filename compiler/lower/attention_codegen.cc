#include "compiler/lower/attention_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/kernel_codegen.h"

namespace kiln::compiler {
namespace {

constexpr int kSimtWarps = 4;
constexpr int kDecodeWarps = 4;

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
  if (s.has_kpad) p.push_back(fmt::format("const {}* __restrict__ kpad", kpad_ctype(s)));
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
  return c;
}

ir::DimExpr times(const ir::DimExpr& d, int64_t c) { return {d.coef * c, d.offset * c}; }

std::string tparams(const AttnSpec& s) {
  return fmt::format("{}, {}, {}", kernel_ctype(s.dtype), mask_ctype(s), kpad_ctype(s));
}

}  // namespace

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

AttnKernel codegen_attention_prefill(const AttnSpec& s) {
  return codegen_attention_prefill(s, attention_mma_tiles(s.D));
}

AttnKernel codegen_attention_prefill(const AttnSpec& s, const AttnMmaTiles& tiles) {
  AttnKernel k;
  k.def.params = base_params(s);
  k.def.body = params_code(s);
  k.work = s.Sq;
  k.grid_y = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  if (attention_mma_eligible(s)) {
    const int warps = tiles.warps, rows = 16 * tiles.warp_mtiles * tiles.warps;
    auto b = [](bool v) { return v ? "true" : "false"; };
    k.def.body +=
        fmt::format("  kiln::attention_prefill_mma<{}, {}, {}, {}, {}, {}, {}, {}, {}>(p);\n",
                    tparams(s), s.D, warps, tiles.warp_mtiles, tiles.block_n, b(tiles.q_in_regs),
                    b(s.causal), b(s.has_mask), b(s.has_kpad));
    k.def.max_threads = 32 * warps;
    k.block = 32 * warps;
    k.work_per_block = rows;
    k.shared_bytes = static_cast<uint32_t>((rows + 4 * tiles.block_n) * (s.D + 8) * 2);
  } else {
    k.def.body += fmt::format("  kiln::attention_prefill_simt<{}, {}, {}>(p);\n", tparams(s),
                              kSimtWarps, (s.Dv + 31) / 32);
    k.def.max_threads = 32 * kSimtWarps;
    k.block = 32 * kSimtWarps;
    k.work_per_block = kSimtWarps;
    k.shared_bytes = static_cast<uint32_t>(kSimtWarps * s.D * 4);
  }
  return k;
}

int64_t attention_decode_splits(const AttnSpec& s) {
  const ir::DimExpr bh = ir::dim_mul(s.B, ir::DimExpr::constant(s.Hq)).value_or(s.B);
  if (!bh.is_constant()) return 1;  // enough blocks already at every size but the smallest
  if (s.Skv.is_constant() && s.Skv.offset <= 256) return 1;
  // About two blocks per SM of an H100 (132 SMs), at most 32 partials per row.
  const int64_t want = (264 + bh.offset - 1) / std::max<int64_t>(bh.offset, 1);
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
