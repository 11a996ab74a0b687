// Attention family: kiln.Attention → the prefill kernel (kernels/attention.cuh) or, for one
// query row, the split-key decode kernels (kernels/attention_decode.cuh); kiln.PagedAttention
// in lower_paged_attention.cc. Both read Q/K/V and write O through the strided view chains of
// attention_views.cc, which attention_absorb_views claims before any rule runs.
//
// Padding: when runs may be padded and padding keys could reach real rows, the step also takes
// the pointer to the request's real size (attention_needs_real_size, attention_codegen.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/lower/attention_lowering.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using Strides = ViewStrides;

AttnView to_view(const DimExpr& offset, const Strides& st) {
  AttnView v;
  v.offset = offset;
  for (int i = 0; i < 4; ++i) v.st[i] = st[i];
  return v;
}

// Broadcast strides of a contiguous mask over [B, Hq, Sq, Skv] (right-aligned; size-1 dims 0).
std::array<DimExpr, 4> mask_strides(const ir::Shape& m) {
  std::array<DimExpr, 4> out;
  out.fill(DimExpr::constant(0));
  const auto st = contiguous_view_strides(m).value_or(Strides(m.size(), DimExpr::constant(0)));
  for (size_t i = 0; i < m.size(); ++i)
    if (!dim_is_one(m[i])) out[4 - m.size() + i] = st[i];
  return out;
}

// Q, K and V [B, H, S, D] → the spec's dtype, sizes, heads, scale and causality.
Result<AttnSpec> attention_sizes(const LowerContext& cx, const ir::Node& n) {
  const ir::Shape& qs = cx.shape(n.inputs[0]);
  const ir::Shape& ks = cx.shape(n.inputs[1]);
  const ir::Shape& vs = cx.shape(n.inputs[2]);
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4)
    return lower_unsupported(n, "Q, K and V must be 4-D");
  for (const DimExpr* d : {&qs[1], &ks[1], &qs[3], &vs[3]})
    if (!d->is_constant())
      return lower_unsupported(
          n, fmt::format("heads and head sizes must not depend on the size (Q {}, V {})",
                         ir::shape_to_string(qs), ir::shape_to_string(vs)));
  const DType t = cx.dtype(n.inputs[0]);
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16)
    return lower_unsupported(n,
                             fmt::format("Q/K/V are {}, expected f32, f16 or bf16", dtype_name(t)));
  AttnSpec s;
  s.dtype = t;
  s.B = qs[0];
  s.Hq = qs[1].offset;
  s.Hkv = ks[1].offset;
  s.Sq = qs[2];
  s.Skv = ks[2];
  s.D = qs[3].offset;
  s.Dv = vs[3].offset;
  if (s.Hkv <= 0 || s.Hq % s.Hkv != 0)
    return lower_unsupported(
        n, fmt::format("{} query heads are not a multiple of {} key/value heads", s.Hq, s.Hkv));
  s.scale = static_cast<float>(n.attr_float("scale", 1.0));
  s.causal = n.attr_int("causal", 0) != 0;
  return s;
}

int mask_input(const ir::Node& n) { return n.inputs.size() > 3 ? n.inputs[3] : -1; }
int key_padding_input(const ir::Node& n) { return n.inputs.size() > 4 ? n.inputs[4] : -1; }

// The optional additive mask and key_padding inputs → the spec.
Status add_masks(const LowerContext& cx, const ir::Node& n, AttnSpec& s) {
  if (const int mask = mask_input(n); mask >= 0) {
    s.has_mask = true;
    s.mask_dtype = cx.dtype(mask);
    s.mask_st = mask_strides(cx.shape(mask));
    if (kernel_ctype(s.mask_dtype).empty() || !dtype_is_float(s.mask_dtype))
      return lower_unsupported(
          n, fmt::format("mask is {}, expected a float tensor", dtype_name(s.mask_dtype)));
  }
  if (const int kpad = key_padding_input(n); kpad >= 0) {
    s.has_kpad = true;
    s.kpad_dtype = cx.dtype(kpad);
    s.kpad_sb = s.Skv;
    if (kernel_ctype(s.kpad_dtype).empty())
      return lower_unsupported(
          n, fmt::format("key_padding is {}, which kernels cannot read", dtype_name(s.kpad_dtype)));
  }
  return Status::ok_status();
}

// The launch arguments: the buffers behind the absorbed views (Q, K, V, the output), then the
// mask and key_padding when present, then the real-size pointer when the spec reads it.
std::vector<KernelArgRef> attention_args(const LowerContext& cx, const ir::Node& n,
                                         const AttnChains& c, const AttnSpec& s) {
  std::vector<KernelArgRef> args = {KernelArgRef::tensor(cx.resolve(c.in[0].base)),
                                    KernelArgRef::tensor(cx.resolve(c.in[1].base)),
                                    KernelArgRef::tensor(cx.resolve(c.in[2].base)),
                                    KernelArgRef::tensor(cx.resolve(c.out.final_value))};
  if (const int mask = mask_input(n); mask >= 0)
    args.push_back(KernelArgRef::tensor(cx.resolve(mask)));
  if (const int kpad = key_padding_input(n); kpad >= 0)
    args.push_back(KernelArgRef::tensor(cx.resolve(kpad)));
  if (s.real_size) args.push_back(KernelArgRef::real_size());
  return args;
}

// One query row: the split-key decode kernel, plus a combine kernel when the keys are split.
// Untuned: the split and combine launches share a partial buffer sized by the split count, so a
// per-launch configuration (what the autotuner chooses) cannot change it.
void emit_decode(LowerContext& cx, int i, const AttnSpec& s, std::vector<KernelArgRef> args,
                 const std::string& names) {
  const ir::Node& n = cx.node(i);
  const int64_t nsplit = attention_decode_splits(s);
  if (nsplit == 1) {
    cx.emit(i, attention_launch(cx, codegen_attention_decode_split(s, 1), args, names));
    return;
  }
  const int part = cx.new_value(
      n.outputs[0] >= 0 ? cx.value(n.outputs[0]).name + "/partials" : n.name + "/partials",
      DType::kF32, {attention_decode_part_floats(s, nsplit)});
  args.push_back(KernelArgRef::tensor(part));
  cx.emit(i, attention_launch(cx, codegen_attention_decode_split(s, nsplit), args, names));
  cx.emit(i, attention_launch(cx, codegen_attention_decode_combine(s, nsplit), args, names));
}

Status lower_attention(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  if (n.inputs.size() < 3 || n.outputs.size() != 1)
    return lower_unsupported(n, "expected inputs Q, K, V[, mask][, key_padding] and one output");
  KILN_ASSIGN_OR_RETURN(AttnSpec s, attention_sizes(cx, n));
  const std::map<int, AttnChains> chains = attn_chains(cx);
  const AttnChains& c = chains.at(i);
  s.q = to_view(c.in[0].offset, c.in[0].st);
  s.k = to_view(c.in[1].offset, c.in[1].st);
  s.v = to_view(c.in[2].offset, c.in[2].st);
  s.o = to_view(DimExpr::constant(0), c.out.st);
  KILN_RETURN_IF_ERROR(add_masks(cx, n, s));
  s.real_size = attention_needs_real_size(s, cx.padded_runs());
  s.max_size = cx.max_size();
  std::vector<KernelArgRef> args = attention_args(cx, n, c, s);
  const std::string names = absorbed_names(cx, n, c);
  if (s.Sq == DimExpr::constant(1)) {
    emit_decode(cx, i, s, std::move(args), names);
    return Status::ok_status();
  }
  cx.emit(i, attention_launch(cx, codegen_attention_prefill(s), args, names,
                              attention_prefill_config(s), attention_prefill_candidates(s)));
  return Status::ok_status();
}

}  // namespace

KernelLaunch attention_launch(LowerContext& cx, AttnKernel k, std::vector<KernelArgRef> args,
                              const std::string& nodes, std::string config,
                              std::vector<LaunchCandidate> candidates) {
  KernelLaunch l;
  l.config = std::move(config);
  l.candidates = std::move(candidates);
  l.kernel = cx.add_kernel("kiln_attention", std::move(k.def));
  l.args = std::move(args);
  l.args.push_back(KernelArgRef::size());
  l.work = k.work;
  l.work_per_block = k.work_per_block;
  l.grid_y = k.grid_y;
  l.block = k.block;
  l.shared_bytes = k.shared_bytes;
  l.nodes = nodes;
  return l;
}

std::vector<LowerRule> attention_rules() {
  return {{"kiln.Attention", lower_attention}, {"kiln.PagedAttention", lower_paged_attention}};
}

Status attention_absorb_views(LowerContext& cx) {
  const ViewChains chains = view_chains(cx);
  for (const auto& [node, c] : chains.attention) {
    for (const auto& in : c.in)
      for (int link : in.nodes) cx.mark_done(link);
    for (int link : c.out.nodes) cx.mark_done(link);
  }
  for (const auto& [node, in] : chains.rotary)
    for (int link : in.nodes) cx.mark_done(link);
  return Status::ok_status();
}

}  // namespace kiln::compiler
