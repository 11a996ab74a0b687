#include "compiler/backend/lower/paged_attention_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kPrefillWarps = 4;
constexpr int kAppendThreads = 256;
constexpr int kCombineThreads = 128;
// A decode lane's register budget, in fp32 values, for its group's queries and output sums.
constexpr int64_t kDecodeGroupFloats = 64;
// Blocks per context position below which a decode step keeps one query head per block.
constexpr int64_t kGroupMinBlocks = 64;

ir::DimExpr times(const ir::DimExpr& d, int64_t c) { return {d.coef * c, d.offset * c}; }
ir::DimExpr row_heads(const PagedAttnSpec& s) { return times(s.rows, s.Hq); }

std::string ctype(const PagedAttnSpec& s) { return std::string(kernel_ctype(s.dtype)); }

// `name`, moved by `off` elements when that is not 0.
std::string at(const std::string& name, const ir::DimExpr& off) {
  return off == ir::DimExpr::constant(0) ? name : fmt::format("({} + {})", name, dim_code(off));
}

bool has_rotary(const PagedAttnSpec& s) { return s.rotary_dim > 0; }

// The rotary template arguments ", ROT, ROT_MODE" (kernels/paged_attention.cuh), or "".
std::string rotary_args(const PagedAttnSpec& s) {
  if (!has_rotary(s)) return "";
  const int mode = s.rotary_width == s.rotary_dim ? 2 : s.rotary_interleaved ? 1 : 0;
  return fmt::format(", {}, {}", s.rotary_dim, mode);
}

void add_rotary_params(const PagedAttnSpec& s, std::vector<std::string>& params) {
  if (!has_rotary(s)) return;
  params.push_back(fmt::format("const {}* __restrict__ rot_cos", ctype(s)));
  params.push_back(fmt::format("const {}* __restrict__ rot_sin", ctype(s)));
}

// `writes_cache`: the caches are writable parameters (a split kernel with decode_fresh).
std::vector<std::string> attend_params(const PagedAttnSpec& s, bool writes_cache = false) {
  const std::string t = ctype(s);
  const char* cache = writes_cache ? "" : "const ";
  std::vector<std::string> params = {fmt::format("const {}* q", t),
                                     fmt::format("{}{}* __restrict__ key_cache", cache, t),
                                     fmt::format("{}{}* __restrict__ value_cache", cache, t),
                                     "const int* __restrict__ block_tables",
                                     "const int* __restrict__ context_lens",
                                     fmt::format("{}* __restrict__ o", t)};
  add_rotary_params(s, params);
  return params;
}

// Fills `kiln::PagedAttnParams<T> p` from the spec and the kernel's parameters.
std::string params_code(const PagedAttnSpec& s) {
  std::string code = fmt::format(
      "  kiln::PagedAttnParams<{}> p;\n"
      "  p.q = {};\n  p.q_sb = {};\n  p.q_ss = {};\n  p.q_sh = {};\n"
      "  p.o = {};\n  p.o_sb = {};\n  p.o_ss = {};\n  p.o_sh = {};\n"
      "  p.key_cache = key_cache;\n  p.value_cache = value_cache;\n"
      "  p.block_tables = block_tables;\n  p.bt_stride = {}LL;\n"
      "  p.context_lens = context_lens;\n  p.rows = {};\n  p.q_len = {};\n  p.scale = {};\n",
      ctype(s), at("q", s.q_off), dim_code(s.q_sb), dim_code(s.q_ss), dim_code(s.q_sh),
      at("o", s.o_off), dim_code(s.o_sb), dim_code(s.o_ss), dim_code(s.o_sh), s.max_blocks_per_seq,
      dim_code(s.rows), dim_code(s.q_len), float_literal(s.scale));
  if (has_rotary(s))
    code += fmt::format("  p.rot_cos = rot_cos;\n  p.rot_sin = rot_sin;\n  p.rot_st = {};\n",
                        dim_code(s.rotary_st));
  else
    code += "  p.rot_cos = nullptr;\n  p.rot_sin = nullptr;\n  p.rot_st = 0;\n";
  return code;
}

// The template arguments shared by the attend kernels: T, HQ, HKV, D, DV, BS.
std::string shape_args(const PagedAttnSpec& s) {
  return fmt::format("{}, {}, {}, {}, {}, {}", ctype(s), s.Hq, s.Hkv, s.D, s.Dv, s.block_size);
}

}  // namespace

void paged_attn_contiguous_strides(PagedAttnSpec& s) {
  s.q_sh = ir::DimExpr::constant(s.D);
  s.q_ss = ir::DimExpr::constant(s.Hq * s.D);
  s.q_sb = times(s.q_len, s.Hq * s.D);
  s.o_sh = ir::DimExpr::constant(s.Dv);
  s.o_ss = ir::DimExpr::constant(s.Hq * s.Dv);
  s.o_sb = times(s.q_len, s.Hq * s.Dv);
  s.k_sh = ir::DimExpr::constant(s.D);
  s.k_st = ir::DimExpr::constant(s.Hkv * s.D);
  s.v_sh = ir::DimExpr::constant(s.Dv);
  s.v_st = ir::DimExpr::constant(s.Hkv * s.Dv);
}

int64_t paged_decode_default_group(const PagedAttnSpec& s) {
  // A lane holds NK query and NV output vectors per head (kernels/paged_attention.cuh:
  // paged_decode_split), VEC elements each, as fp32.
  int64_t vec = 16 / static_cast<int64_t>(dtype_size(s.dtype));
  while (vec > 1 && (s.D % vec != 0 || s.Dv % vec != 0)) vec /= 2;
  const auto per_lane = [](int64_t n) {
    int64_t lanes = 1;
    while (lanes < n && lanes < 32) lanes *= 2;
    return (n + lanes - 1) / lanes;
  };
  const int64_t floats = (per_lane(s.D / vec) + per_lane(s.Dv / vec)) * vec;
  const int64_t share = s.Hkv > 0 && s.Hq % s.Hkv == 0 ? s.Hq / s.Hkv : 1;
  int64_t group = 1;
  for (int64_t g = 1; g <= share; ++g)
    if (share % g == 0 && g * floats <= kDecodeGroupFloats) group = g;
  return group;
}

PagedDecodeConfig paged_decode_config(const PagedAttnSpec& s, int64_t rows) {
  PagedDecodeConfig c;
  const int64_t group = paged_decode_default_group(s);
  if (rows * s.Hq / group >= kGroupMinBlocks) c.group = group;
  const int64_t per_position = rows * s.Hq / c.group;  // blocks per context position
  const int64_t want = per_position <= 16    ? 32
                       : per_position <= 128 ? 64
                       : per_position <= 256 ? 256
                                             : 0;
  if (want == 0) return c;
  const int64_t bs = std::max<int64_t>(s.block_size, 1);
  c.partition = (want + bs - 1) / bs * bs;
  if (c.partition >= s.max_blocks_per_seq * s.block_size) c.partition = 0;  // one partition
  return c;
}

std::string paged_decode_config_name(const PagedDecodeConfig& c) {
  return fmt::format("group={} partition={}", c.group, c.partition);
}

int64_t paged_decode_max_partitions(const PagedAttnSpec& s) {
  if (s.partition <= 0) return 1;
  const int64_t max_ctx = s.max_blocks_per_seq * s.block_size;
  return std::max<int64_t>((max_ctx + s.partition - 1) / s.partition, 1);
}

ir::DimExpr paged_decode_part_floats(const PagedAttnSpec& s) {
  return times(row_heads(s), paged_decode_max_partitions(s) * (s.Dv + 2));
}

AttnKernel codegen_paged_kv_append(const PagedAttnSpec& s) {
  const std::string t = ctype(s);
  AttnKernel k;
  // k and v may be slices of one fused QKV buffer: read-only, no __restrict__.
  k.def.params = {fmt::format("const {}* k", t), fmt::format("const {}* v", t),
                  "const long long* __restrict__ slot_mapping",
                  fmt::format("{}* __restrict__ key_cache", t),
                  fmt::format("{}* __restrict__ value_cache", t)};
  add_rotary_params(s, k.def.params);
  const ir::DimExpr tokens = ir::dim_mul(s.rows, s.q_len).value_or(s.rows);
  k.def.body = fmt::format(
      "  kiln::paged_kv_append<{}, {}, {}, {}, {}{}>({}, {}, {}, {}, {}, {}, slot_mapping, {}, "
      "key_cache, value_cache{});\n",
      t, s.Hkv, s.D, s.Dv, s.block_size, rotary_args(s), at("k", s.k_off), dim_code(s.k_st),
      dim_code(s.k_sh), at("v", s.v_off), dim_code(s.v_st), dim_code(s.v_sh), dim_code(tokens),
      has_rotary(s) ? fmt::format(", rot_cos, rot_sin, {}", dim_code(s.rotary_st)) : "");
  k.def.max_threads = kAppendThreads;
  k.block = kAppendThreads;
  k.work = times(tokens, s.Hkv * std::max(s.D, s.Dv));
  k.work_per_block = kAppendThreads;
  return k;
}

AttnKernel codegen_paged_decode_split(const PagedAttnSpec& s) {
  AttnKernel k;
  k.def.params = attend_params(s, s.decode_fresh);
  const bool split = s.partition > 0 || s.decode_workspace;
  if (split) k.def.params.push_back("float* __restrict__ part");
  k.def.body = params_code(s);
  if (s.decode_fresh) {
    // k and v may be slices of the buffer q is in: read-only, no __restrict__.
    k.def.params.push_back(fmt::format("const {}* k", ctype(s)));
    k.def.params.push_back(fmt::format("const {}* v", ctype(s)));
    k.def.params.push_back("const long long* __restrict__ slot_mapping");
    k.def.body += fmt::format(
        "  p.k_new = {};\n  p.k_st = {};\n  p.k_sh = {};\n"
        "  p.v_new = {};\n  p.v_st = {};\n  p.v_sh = {};\n"
        "  p.slot_mapping = slot_mapping;\n"
        "  p.key_out = key_cache;\n  p.value_out = value_cache;\n",
        at("k", s.k_off), dim_code(s.k_st), dim_code(s.k_sh), at("v", s.v_off), dim_code(s.v_st),
        dim_code(s.v_sh));
  }
  // FRESH follows ROT and ROT_MODE, which it then needs spelled out. The FRESH kernel enters
  // (kiln::kernel_enter) itself, after its first loads.
  const std::string rot = !s.decode_fresh || has_rotary(s) ? rotary_args(s) : ", 0, 0";
  k.def.body += fmt::format("  kiln::paged_decode_split<{}, {}, {}, {}{}{}>(p, {}, {});\n",
                            shape_args(s), std::max<int64_t>(s.partition, 0), kDecodeWarps,
                            s.decode_group, rot, s.decode_fresh ? ", true" : "",
                            split ? "part" : "nullptr", paged_decode_max_partitions(s));
  k.def.enters_itself = s.decode_fresh;
  k.def.max_threads = 32 * kDecodeWarps;
  k.block = 32 * kDecodeWarps;
  k.work = ir::DimExpr::constant(paged_decode_max_partitions(s));
  k.work_per_block = 1;
  k.grid_y = times(s.rows, s.Hq / s.decode_group);
  return k;  // static shared memory only
}

AttnKernel codegen_paged_decode_combine(const PagedAttnSpec& s) {
  AttnKernel k;
  k.def.params = attend_params(s);
  k.def.params.push_back("const float* __restrict__ part");
  k.def.body = params_code(s);
  k.def.body += fmt::format("  kiln::paged_decode_combine<{}, {}, {}, {}, {}>(p, part, {});\n",
                            ctype(s), s.Hq, s.Dv, std::max<int64_t>(s.partition, 0),
                            kCombineThreads, paged_decode_max_partitions(s));
  k.def.max_threads = kCombineThreads;
  k.block = kCombineThreads;
  k.work = s.partition > 0 ? row_heads(s) : ir::DimExpr::constant(0);  // 0: never launched
  k.work_per_block = 1;
  return k;
}

AttnKernel codegen_paged_prefill(const PagedAttnSpec& s) {
  AttnKernel k;
  k.def.params = attend_params(s);
  k.def.body = params_code(s);
  k.def.body += fmt::format("  kiln::paged_prefill<{}, {}{}>(p);\n", shape_args(s), kPrefillWarps,
                            rotary_args(s));
  k.def.max_threads = 32 * kPrefillWarps;
  k.block = 32 * kPrefillWarps;
  k.work = s.q_len;
  k.work_per_block = kPrefillWarps;
  k.grid_y = row_heads(s);
  k.shared_bytes = static_cast<uint32_t>(kPrefillWarps * s.D * 4);
  return k;
}

}  // namespace kiln::compiler
