// kiln.PagedAttention → the paged-KV kernels (kernels/paged_attention.cuh, through
// paged_attention_codegen.h): a generation program's attention over the runtime's cache.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_lowering.h"
#include "compiler/backend/lower/paged_attention_codegen.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

// The rotary part of a kiln.PagedAttention with cos/sin (inputs 3 and 4, compiler/ops/
// kiln_ops.md): fills s.rotary_* and appends the two table arguments to `args`. The tables are
// contiguous [..., T or 1, W] rows broadcast over batch and heads.
Status paged_rotary(LowerContext& cx, const ir::Node& n, PagedAttnSpec& s,
                    std::vector<KernelArgRef>& args) {
  if (n.inputs.size() < 5) return Status::ok_status();
  const int cs = n.inputs[3], sn = n.inputs[4];
  const auto symbolic = [&](int v) {  // contents that exist only as dims, not a tensor
    return cx.value(v).producer < 0 && cx.value(v).ints && !cx.value(v).constant;
  };
  const ir::Shape& ts = cx.shape(cs);
  if (ts.empty() || !ts.back().is_constant() || cx.shape(sn) != ts || cx.dtype(cs) != s.dtype ||
      cx.dtype(sn) != s.dtype || symbolic(cs) || symbolic(sn))
    return lower_unsupported(
        n, fmt::format("cos/sin {} must be two tables of Q's dtype", ir::shape_to_string(ts)));
  const int64_t r = n.attr_int("rotary_dim", 0);
  s.rotary_dim = r == 0 ? s.D : r;
  s.rotary_width = ts.back().offset;
  s.rotary_interleaved = n.attr_int("interleaved", 0) != 0;
  // Token t's row: the table's lead dims are 1 except, at most, the token axis (axis 2 of Q's
  // [1, H, T] lead, right-aligned).
  s.rotary_st = DimExpr::constant(0);
  for (size_t j = 0; j + 1 < ts.size(); ++j) {
    const size_t axis = 3 - (ts.size() - 1) + j;  // of [1, H, T]
    if (dim_is_one(ts[j])) continue;
    if (axis != 2 || ts[j] != s.rows)
      return lower_unsupported(n, fmt::format("cos/sin {} must be one row per token (or one "
                                              "row for all), broadcast over heads",
                                              ir::shape_to_string(ts)));
    s.rotary_st = DimExpr::constant(s.rotary_width);
  }
  args.push_back(KernelArgRef::tensor(cx.resolve(cs)));
  args.push_back(KernelArgRef::tensor(cx.resolve(sn)));
  return Status::ok_status();
}

// The decode's split launch and, where a configuration splits, the combine launch: the default
// configuration is batch 1's (the general kernels' too); each planned size whose row count
// calls for another (paged_decode_config) gets it as a decided candidate of every launch, under
// the same name at the same index, so that they always agree. With `fresh_sizes`, a second
// split launch, decode_only at those sizes, is the decode_fresh kernel (taking `fresh` after
// `args` and the workspace), and the plain split is skip_on_decode there.
void emit_paged_decode(LowerContext& cx, int node, PagedAttnSpec s, std::vector<KernelArgRef> args,
                       const std::vector<KernelArgRef>& fresh,
                       const std::vector<int64_t>& fresh_sizes, const std::string& names,
                       const std::string& out_name) {
  const auto with = [&](const PagedDecodeConfig& c) {
    PagedAttnSpec v = s;
    v.decode_group = c.group;
    v.partition = c.partition;
    return v;
  };
  const PagedDecodeConfig def = paged_decode_config(s, 1);
  std::vector<PagedDecodeConfig> others;
  std::map<int64_t, int> chosen;  // planned size → index into others
  for (int64_t p : cx.planned_sizes()) {
    const PagedDecodeConfig c = paged_decode_config(s, std::max<int64_t>(s.rows.eval(p), 1));
    if (c == def) continue;
    auto it = std::find(others.begin(), others.end(), c);
    chosen[p] = static_cast<int>(it - others.begin());
    if (it == others.end()) others.push_back(c);
  }
  bool splits = def.partition > 0;
  for (const PagedDecodeConfig& c : others) splits = splits || c.partition > 0;
  ir::DimExpr part_floats = paged_decode_part_floats(with(def));
  for (const PagedDecodeConfig& c : others)
    if (paged_decode_part_floats(with(c)).eval(1) > part_floats.eval(1))
      part_floats = paged_decode_part_floats(with(c));
  s.decode_workspace = splits;
  if (splits) {
    const int part = cx.new_value(out_name + "/partials", DType::kF32, {part_floats});
    args.push_back(KernelArgRef::tensor(part));
  }
  using Codegen = AttnKernel (*)(const PagedAttnSpec&);
  const auto launch = [&](Codegen codegen, bool decode_fresh) {
    std::vector<KernelArgRef> launch_args = args;
    if (decode_fresh) launch_args.insert(launch_args.end(), fresh.begin(), fresh.end());
    s.decode_fresh = decode_fresh;
    std::vector<LaunchCandidate> candidates;
    for (const PagedDecodeConfig& c : others) {
      AttnKernel k = codegen(with(c));
      candidates.push_back({paged_decode_config_name(c), std::move(k.def), k.work, k.work_per_block,
                            k.grid_y, k.block, k.shared_bytes});
    }
    KernelLaunch l = attention_launch(cx, codegen(with(def)), std::move(launch_args), names,
                                      paged_decode_config_name(def), std::move(candidates));
    for (const auto& [p, which] : chosen) l.tuned[p] = TunedChoice{which, "heuristic", 0, 0};
    return l;
  };
  KernelLaunch split = launch(&codegen_paged_decode_split, false);
  split.skip_on_decode = !fresh_sizes.empty();
  split.route_sizes = fresh_sizes;
  cx.emit(node, std::move(split));
  if (!fresh_sizes.empty()) {
    KernelLaunch fresh_split = launch(&codegen_paged_decode_split, true);
    fresh_split.decode_only = true;
    fresh_split.route_sizes = fresh_sizes;
    cx.emit(node, std::move(fresh_split));
  }
  if (splits) cx.emit(node, launch(&codegen_paged_decode_combine, false));
}

}  // namespace

// kiln.PagedAttention (a generation program's layer): the step's T tokens are the rows of the
// paged kernels, one query each: append K and V at the tokens' slots, then the decode kernels
// over each token's own sequence (block table row t, context_lens[t] positions). Q/K/V/O views
// [1, H, T, D] → per-token stride (axis 2) and per-head stride (axis 1). Where
// `kv_cache.decode_append` puts the append in the attention (KvCacheConfig::fresh_max_rows), on
// the runtime's decode route (each token its sequence's only new one) the append and the plain
// split launch are skipped and a split kernel that appends itself (decode_fresh) runs instead:
// one launch less per layer, for a kernel with more registers (schemas/config.md).
Status lower_paged_attention(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const KvCacheConfig* kv = cx.kv_cache();
  if (kv == nullptr)
    return lower_unsupported(n, "paged attention outside a generation program (no kv_cache)");
  const ir::Shape& qs = cx.shape(n.inputs[0]);
  const ir::Shape& ks = cx.shape(n.inputs[1]);
  const ir::Shape& vs = cx.shape(n.inputs[2]);
  PagedAttnSpec s;
  s.dtype = cx.dtype(n.inputs[0]);
  if (s.dtype != kv->dtype)
    return lower_unsupported(
        n, fmt::format("the attention computes in {}, but kv_cache.dtype is {}: the cache holds "
                       "keys and values in the attention's dtype (drop kv_cache.dtype or set it "
                       "to {})",
                       dtype_name(s.dtype), dtype_name(kv->dtype), dtype_name(s.dtype)));
  s.Hq = qs[1].offset;
  s.Hkv = ks[1].offset;
  s.D = qs[3].offset;
  s.Dv = vs[3].offset;
  s.block_size = kv->block_size;
  s.max_blocks_per_seq = (kv->max_seq_len + kv->block_size - 1) / kv->block_size;
  s.rows = qs[2];
  s.q_len = DimExpr::constant(1);
  s.scale = static_cast<float>(n.attr_float("scale", 1.0));
  const std::map<int, AttnChains> chains = attn_chains(cx);
  const AttnChains& c = chains.at(i);
  for (const InChain* in : {&c.in[0], &c.in[1], &c.in[2]})
    if (!dim_is_one(in->st[3])) return lower_unsupported(n, "Q/K/V must have unit head-dim stride");
  if (!dim_is_one(c.out.st[3]))
    return lower_unsupported(n, "the output must have unit head-dim stride");
  s.q_sb = s.q_ss = c.in[0].st[2];
  s.q_sh = c.in[0].st[1];
  s.q_off = c.in[0].offset;
  s.k_st = c.in[1].st[2];
  s.k_sh = c.in[1].st[1];
  s.k_off = c.in[1].offset;
  s.v_st = c.in[2].st[2];
  s.v_sh = c.in[2].st[1];
  s.v_off = c.in[2].offset;
  s.o_sb = s.o_ss = c.out.st[2];
  s.o_sh = c.out.st[1];
  s.o_off = DimExpr::constant(0);
  std::vector<KernelArgRef> rotary;
  KILN_RETURN_IF_ERROR(paged_rotary(cx, n, s, rotary));
  const int64_t layer = n.attr_int("layer", 0);
  const std::string names = absorbed_names(cx, n, c);
  const auto kv_arg = [&](KvRef r) { return KernelArgRef::kv_cache(r, layer); };
  const KernelArgRef k_new = KernelArgRef::tensor(cx.resolve(c.in[1].base));
  const KernelArgRef v_new = KernelArgRef::tensor(cx.resolve(c.in[2].base));
  std::vector<KernelArgRef> append = {k_new, v_new, kv_arg(KvRef::kSlotMapping),
                                      kv_arg(KvRef::kKeyCache), kv_arg(KvRef::kValueCache)};
  append.insert(append.end(), rotary.begin(), rotary.end());
  KernelLaunch append_launch =
      attention_launch(cx, codegen_paged_kv_append(s), std::move(append), names);
  // The planned sizes whose decode route appends in the attention.
  std::vector<int64_t> fresh_sizes;
  for (int64_t p : cx.planned_sizes())
    if (s.rows.eval(p) <= kv->fresh_max_rows()) fresh_sizes.push_back(p);
  append_launch.skip_on_decode = !fresh_sizes.empty();
  append_launch.route_sizes = fresh_sizes;
  cx.emit(i, std::move(append_launch));
  std::vector<KernelArgRef> args = {KernelArgRef::tensor(cx.resolve(c.in[0].base)),
                                    kv_arg(KvRef::kKeyCache),
                                    kv_arg(KvRef::kValueCache),
                                    kv_arg(KvRef::kBlockTables),
                                    kv_arg(KvRef::kContextLens),
                                    KernelArgRef::tensor(cx.resolve(c.out.final_value))};
  args.insert(args.end(), rotary.begin(), rotary.end());
  const std::vector<KernelArgRef> fresh = {k_new, v_new, kv_arg(KvRef::kSlotMapping)};
  emit_paged_decode(cx, i, s, std::move(args), fresh, fresh_sizes, names,
                    cx.value(n.outputs[0]).name);
  return Status::ok_status();
}

}  // namespace kiln::compiler
