// Attention family: kiln.Attention → the prefill kernel (kernels/attention.cuh) or, for one
// query row, the split-key decode kernels (kernels/attention_decode.cuh).
//
// Views: exporters build Q/K/V as GEMM → Split/Slice (last axis) → Reshape [B, S, H, D] →
// Transpose [0, 2, 1, 3], and the output as Transpose [0, 2, 1, 3] → Reshape [B, S, H·Dv]. The
// kernels take strided views, so attention_absorb_views claims those chains (every intermediate
// consumed only by the next link) and the attention step reads the GEMM buffer and writes the
// merged-heads buffer directly. The chains are a pure function of the graph (attn_chains), so
// the rule recomputes exactly what attention_absorb_views claimed.
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
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/backend/lower/paged_attention_codegen.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using Strides = std::vector<DimExpr>;

std::optional<DimExpr> mul(const DimExpr& a, const DimExpr& b) { return ir::dim_mul(a, b); }
DimExpr add(const DimExpr& a, const DimExpr& b) { return {a.coef + b.coef, a.offset + b.offset}; }
bool is_one(const DimExpr& d) { return d == DimExpr::constant(1); }

// a / b when the quotient is a constant or b is a constant that divides a exactly.
std::optional<DimExpr> div_exact(const DimExpr& a, const DimExpr& b) {
  if (b.is_constant()) {
    if (b.offset == 0 || a.coef % b.offset != 0 || a.offset % b.offset != 0) return std::nullopt;
    return DimExpr{a.coef / b.offset, a.offset / b.offset};
  }
  if (a.coef % b.coef != 0) return std::nullopt;
  const int64_t c = a.coef / b.coef;
  if (b.offset * c != a.offset) return std::nullopt;
  return DimExpr::constant(c);
}

std::optional<Strides> contiguous_strides(const ir::Shape& shape) {
  Strides st(shape.size());
  DimExpr s = DimExpr::constant(1);
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    if (i > 0) {
      auto next = mul(s, shape[i]);
      if (!next) return std::nullopt;
      s = *next;
    }
  }
  return st;
}

// Strides of `to` viewing the same elements as (`from`, `st`) in row-major order, or nullopt
// when `to` cannot be expressed as a strided view (a merge of non-mergeable dims).
std::optional<Strides> reshape_strides(const ir::Shape& from, const Strides& st,
                                       const ir::Shape& to) {
  std::vector<std::pair<DimExpr, DimExpr>> a;  // (dim, stride), size-1 dims dropped
  for (size_t i = 0; i < from.size(); ++i)
    if (!is_one(from[i])) a.emplace_back(from[i], st[i]);
  Strides out(to.size(), DimExpr::constant(0));
  size_t i = 0;
  for (size_t j = 0; j < to.size(); ++j) {
    if (is_one(to[j])) continue;
    if (i >= a.size()) return std::nullopt;
    for (;;) {
      auto [dim, stride] = a[i];
      if (dim == to[j]) {
        out[j] = stride;
        ++i;
        break;
      }
      if (auto rest = div_exact(dim, to[j]); rest && !is_one(*rest)) {  // split
        auto s = mul(stride, *rest);
        if (!s) return std::nullopt;
        out[j] = *s;
        a[i].first = *rest;
        break;
      }
      // merge a[i] with a[i+1]: only when a[i] steps over exactly a[i+1]'s extent
      if (i + 1 >= a.size()) return std::nullopt;
      auto span = mul(a[i + 1].first, a[i + 1].second);
      auto merged = mul(dim, a[i + 1].first);
      if (!span || !merged || *span != stride) return std::nullopt;
      a[i + 1] = {*merged, a[i + 1].second};
      ++i;
    }
  }
  if (i != a.size()) return std::nullopt;
  return out;
}

// Integer contents of a constant or symbolic-constant value.
std::optional<std::vector<DimExpr>> int_values(const LowerContext& cx, int v) {
  if (v < 0) return std::nullopt;
  const ir::Value& val = cx.value(v);
  if (val.ints) return *val.ints;
  if (!val.constant) return std::nullopt;
  std::vector<DimExpr> out;
  const auto& bytes = val.constant->bytes;
  if (val.dtype == DType::kI64) {
    for (size_t o = 0; o + 8 <= bytes.size(); o += 8) {
      int64_t x;
      __builtin_memcpy(&x, bytes.data() + o, 8);
      out.push_back(DimExpr::constant(x));
    }
  } else if (val.dtype == DType::kI32) {
    for (size_t o = 0; o + 4 <= bytes.size(); o += 4) {
      int32_t x;
      __builtin_memcpy(&x, bytes.data() + o, 4);
      out.push_back(DimExpr::constant(x));
    }
  } else {
    return std::nullopt;
  }
  return out;
}

bool is_view_op(const std::string& op) {
  return op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten";
}

// One link of an input chain applied forward: (shape of node input, its strides, offset) →
// strides and offset of `out` (one of the node's outputs).
bool apply_forward(const LowerContext& cx, const ir::Node& n, int out, Strides& st,
                   DimExpr& offset) {
  const ir::Shape& in_shape = cx.shape(n.inputs[0]);
  const ir::Shape& out_shape = cx.shape(out);
  if (n.domain != "") return false;
  if (is_view_op(n.op)) {
    auto s = reshape_strides(in_shape, st, out_shape);
    if (!s) return false;
    st = *s;
    return true;
  }
  if (n.op == "Transpose") {
    const std::vector<int64_t> perm = transpose_perm_attr(n, in_shape.size());
    if (perm.size() != st.size()) return false;
    Strides o(st.size());
    for (size_t k = 0; k < perm.size(); ++k) {
      if (perm[k] < 0 || perm[k] >= static_cast<int64_t>(st.size())) return false;
      o[k] = st[perm[k]];
    }
    st = o;
    return true;
  }
  const int64_t rank = static_cast<int64_t>(in_shape.size());
  if (n.op == "Split") {
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    DimExpr start = DimExpr::constant(0);
    for (int o : n.outputs) {
      if (o == out) break;
      if (o >= 0) start = add(start, cx.shape(o)[axis]);
    }
    auto delta = mul(start, st[axis]);
    if (!delta) return false;
    offset = add(offset, *delta);
    return true;
  }
  if (n.op == "Slice") {
    auto starts = int_values(cx, n.inputs.size() > 1 ? n.inputs[1] : -1);
    if (!starts || starts->size() != 1) return false;
    std::vector<DimExpr> axes = {DimExpr::constant(0)};
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) {
      auto a = int_values(cx, n.inputs[3]);
      if (!a || a->size() != 1) return false;
      axes = *a;
    }
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      auto steps = int_values(cx, n.inputs[4]);
      if (!steps || steps->size() != 1 || (*steps)[0] != DimExpr::constant(1)) return false;
    }
    if (!axes[0].is_constant()) return false;
    int64_t axis = axes[0].offset < 0 ? axes[0].offset + rank : axes[0].offset;
    if (axis < 0 || axis >= rank) return false;
    DimExpr s0 = (*starts)[0];
    if (s0.is_constant() && s0.offset < 0) s0 = add(s0, in_shape[axis]);
    if (s0.coef < 0 || (s0.is_constant() && s0.offset < 0)) return false;
    // The slice's length is its output dim; a start past the end would have made it empty.
    auto delta = mul(s0, st[axis]);
    if (!delta) return false;
    offset = add(offset, *delta);
    return true;
  }
  return false;
}

struct InChain {
  std::vector<int> nodes;  // from the attention input back towards the base
  int base = -1;
  DimExpr offset;
  Strides st;
};

// The chain over the first `len` of `links` (each link's first input is the next link's
// output) behind `x`; nullopt when a link is not a strided view of its input.
std::optional<InChain> chain_over(const LowerContext& cx, int x, const std::vector<int>& links,
                                  size_t len) {
  std::vector<int> vals = {x};  // vals[k] is the output of links[k]
  for (size_t k = 0; k < len; ++k) vals.push_back(cx.node(links[k]).inputs[0]);
  InChain c;
  c.base = vals[len];
  c.offset = DimExpr::constant(0);
  auto st = contiguous_strides(cx.shape(c.base));
  if (!st) return std::nullopt;
  c.st = *st;
  for (size_t k = len; k-- > 0;)
    if (!apply_forward(cx, cx.node(links[k]), vals[k], c.st, c.offset)) return std::nullopt;
  if (c.st.size() != 4) return std::nullopt;
  c.nodes.assign(links.begin(), links.begin() + static_cast<long>(len));
  return c;
}

// The longest absorbable chain behind attention input `x` whose links all apply (possibly
// none: x itself, contiguous).
InChain input_chain(const LowerContext& cx, int x, size_t max_len = SIZE_MAX) {
  std::vector<int> links;
  for (int cur = x; links.size() < max_len;) {
    const int prod = cx.value(cur).producer;
    if (prod < 0 || cx.consumers(cur).size() != 1 || cx.is_graph_output(cur)) break;
    const ir::Node& n = cx.node(prod);
    if (!n.domain.empty() ||
        !(is_view_op(n.op) || n.op == "Transpose" || n.op == "Split" || n.op == "Slice"))
      break;
    links.push_back(prod);
    cur = n.inputs[0];
  }
  for (size_t len = links.size(); len > 0; --len)
    if (auto c = chain_over(cx, x, links, len)) return *c;
  InChain c;
  c.base = x;
  c.offset = DimExpr::constant(0);
  c.st = contiguous_strides(cx.shape(x)).value_or(Strides(4, DimExpr::constant(0)));
  return c;
}

struct OutChain {
  std::vector<int> nodes;  // from the attention output forward
  int final_value = -1;
  Strides st;  // of the attention output [B, Hq, Sq, Dv] inside final_value's buffer
};

OutChain output_chain(const LowerContext& cx, int y) {
  std::vector<int> nodes;
  std::vector<int> vals = {y};
  int cur = y;
  for (;;) {
    if (cx.consumers(cur).size() != 1 || cx.is_graph_output(cur)) break;
    const ir::Node& n = cx.node(cx.consumers(cur)[0]);
    if (!n.domain.empty() || !(is_view_op(n.op) || n.op == "Transpose") || n.outputs.size() != 1 ||
        n.inputs[0] != cur)
      break;
    nodes.push_back(cx.consumers(cur)[0]);
    cur = n.outputs[0];
    vals.push_back(cur);
  }
  for (size_t len = nodes.size(); len > 0; --len) {
    OutChain c;
    c.final_value = vals[len];
    auto st = contiguous_strides(cx.shape(c.final_value));
    if (!st) continue;
    bool ok = true;
    for (size_t k = len; ok && k-- > 0;) {
      const ir::Node& n = cx.node(nodes[k]);
      const ir::Shape& in_shape = cx.shape(vals[k]);
      if (n.op == "Transpose") {
        const std::vector<int64_t> perm = transpose_perm_attr(n, in_shape.size());
        if (perm.size() != st->size()) {
          ok = false;
          break;
        }
        Strides in(st->size());
        for (size_t j = 0; j < perm.size(); ++j) in[perm[j]] = (*st)[j];
        st = in;
      } else {
        st = reshape_strides(cx.shape(vals[k + 1]), *st, in_shape);
        ok = st.has_value();
      }
    }
    if (!ok) continue;
    c.nodes.assign(nodes.begin(), nodes.begin() + static_cast<long>(len));
    c.st = *st;
    return c;
  }
  OutChain c;
  c.final_value = y;
  c.st = contiguous_strides(cx.shape(y)).value_or(Strides(4, DimExpr::constant(0)));
  return c;
}

struct AttnChains {
  InChain in[3];
  OutChain out;
};

// Chains of every kiln.Attention node. A Split is claimed only when each of its consumed
// outputs starts an accepted chain; otherwise chains stop before it (the Split runs).
std::map<int, AttnChains> attn_chains(const LowerContext& cx) {
  std::map<int, AttnChains> all;
  const ir::Graph& g = cx.graph();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    const std::string op = n.qualified_op();
    if ((op != "kiln.Attention" && op != "kiln.PagedAttention") || n.inputs.size() < 3 ||
        n.outputs.size() != 1)
      continue;
    AttnChains c;
    for (int k = 0; k < 3; ++k) c.in[k] = input_chain(cx, n.inputs[k]);
    c.out = output_chain(cx, n.outputs[0]);
    all.emplace(static_cast<int>(i), std::move(c));
  }
  for (bool changed = true; changed;) {
    changed = false;
    std::set<int> claimed;  // values a chain passes through (each link's output)
    for (auto& [node, c] : all)
      for (auto& in : c.in) {
        int v = g.nodes[node].inputs[static_cast<size_t>(&in - c.in)];
        for (int link : in.nodes) {
          claimed.insert(v);
          v = g.nodes[link].inputs[0];
        }
      }
    for (auto& [node, c] : all)
      for (int x = 0; x < 3; ++x) {
        InChain& in = c.in[x];
        for (size_t k = 0; k < in.nodes.size(); ++k) {
          const ir::Node& link = g.nodes[in.nodes[k]];
          if (link.op != "Split") continue;
          bool covered = true;
          for (int o : link.outputs)
            if (o >= 0 && !cx.consumers(o).empty() && !claimed.count(o)) covered = false;
          if (covered) continue;
          in = input_chain(cx, g.nodes[node].inputs[x], k);  // stop before the Split
          changed = true;
          break;
        }
      }
  }
  return all;
}

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
  const auto st = contiguous_strides(m).value_or(Strides(m.size(), DimExpr::constant(0)));
  for (size_t i = 0; i < m.size(); ++i)
    if (!is_one(m[i])) out[4 - m.size() + i] = st[i];
  return out;
}

// `config` and `candidates`: the launch's tuning alternatives (prefill only).
KernelLaunch make_launch(LowerContext& cx, AttnKernel k, std::vector<KernelArgRef> args,
                         const std::string& nodes, std::string config = {},
                         std::vector<LaunchCandidate> candidates = {}) {
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

// The attention node's name, then those of the view nodes it absorbs.
std::string absorbed_names(const LowerContext& cx, const ir::Node& n, const AttnChains& c) {
  std::string names = n.name;
  for (const auto& in : c.in)
    for (int link : in.nodes) names += "," + cx.node(link).name;
  for (int link : c.out.nodes) names += "," + cx.node(link).name;
  return names;
}

// One query row: the split-key decode kernel, plus a combine kernel when the keys are split.
// Untuned: the split and combine launches share a partial buffer sized by the split count, so a
// per-launch configuration (what the autotuner chooses) cannot change it.
void emit_decode(LowerContext& cx, int i, const AttnSpec& s, std::vector<KernelArgRef> args,
                 const std::string& names) {
  const ir::Node& n = cx.node(i);
  const int64_t nsplit = attention_decode_splits(s);
  if (nsplit == 1) {
    cx.emit(i, make_launch(cx, codegen_attention_decode_split(s, 1), args, names));
    return;
  }
  const int part = cx.new_value(
      n.outputs[0] >= 0 ? cx.value(n.outputs[0]).name + "/partials" : n.name + "/partials",
      DType::kF32, {attention_decode_part_floats(s, nsplit)});
  args.push_back(KernelArgRef::tensor(part));
  cx.emit(i, make_launch(cx, codegen_attention_decode_split(s, nsplit), args, names));
  cx.emit(i, make_launch(cx, codegen_attention_decode_combine(s, nsplit), args, names));
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
  std::vector<KernelArgRef> args = attention_args(cx, n, c, s);
  const std::string names = absorbed_names(cx, n, c);
  if (s.Sq == DimExpr::constant(1)) {
    emit_decode(cx, i, s, std::move(args), names);
    return Status::ok_status();
  }
  cx.emit(i, make_launch(cx, codegen_attention_prefill(s), args, names, attention_prefill_config(s),
                         attention_prefill_candidates(s)));
  return Status::ok_status();
}

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
    if (is_one(ts[j])) continue;
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
// calls for another (paged_decode_config) gets it as a decided candidate of both launches,
// under the same name at the same index, so that the pair always agrees. `fresh`: the split
// launch's decode_fresh arguments (after `args` and the workspace), none when empty.
void emit_paged_decode(LowerContext& cx, int node, PagedAttnSpec s, std::vector<KernelArgRef> args,
                       const std::vector<KernelArgRef>& fresh, const std::string& names,
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
  s.decode_fresh = !fresh.empty();
  if (splits) {
    const int part = cx.new_value(out_name + "/partials", DType::kF32, {part_floats});
    args.push_back(KernelArgRef::tensor(part));
  }
  using Codegen = AttnKernel (*)(const PagedAttnSpec&);
  for (Codegen codegen : {&codegen_paged_decode_split, &codegen_paged_decode_combine}) {
    if (codegen == &codegen_paged_decode_combine && !splits) break;
    std::vector<KernelArgRef> launch_args = args;
    if (codegen == &codegen_paged_decode_split)
      launch_args.insert(launch_args.end(), fresh.begin(), fresh.end());
    std::vector<LaunchCandidate> candidates;
    for (const PagedDecodeConfig& c : others) {
      AttnKernel k = codegen(with(c));
      candidates.push_back({paged_decode_config_name(c), std::move(k.def), k.work, k.work_per_block,
                            k.grid_y, k.block, k.shared_bytes});
    }
    KernelLaunch l = make_launch(cx, codegen(with(def)), std::move(launch_args), names,
                                 paged_decode_config_name(def), std::move(candidates));
    for (const auto& [p, which] : chosen) l.tuned[p] = TunedChoice{which, "heuristic", 0, 0};
    cx.emit(node, std::move(l));
  }
}

// kiln.PagedAttention (a generation program's layer): the step's T tokens are the rows of the
// paged kernels, one query each: append K and V at the tokens' slots, then the decode kernels
// over each token's own sequence (block table row t, context_lens[t] positions). Q/K/V/O views
// [1, H, T, D] → per-token stride (axis 2) and per-head stride (axis 1). On the runtime's decode
// route (each token its sequence's only new one) the append launch is skipped and the split
// kernel appends instead (decode_fresh): one launch less per layer.
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
    if (!is_one(in->st[3])) return lower_unsupported(n, "Q/K/V must have unit head-dim stride");
  if (!is_one(c.out.st[3]))
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
      make_launch(cx, codegen_paged_kv_append(s), std::move(append), names);
  append_launch.skip_on_decode = true;
  cx.emit(i, std::move(append_launch));
  std::vector<KernelArgRef> args = {KernelArgRef::tensor(cx.resolve(c.in[0].base)),
                                    kv_arg(KvRef::kKeyCache),
                                    kv_arg(KvRef::kValueCache),
                                    kv_arg(KvRef::kBlockTables),
                                    kv_arg(KvRef::kContextLens),
                                    KernelArgRef::tensor(cx.resolve(c.out.final_value))};
  args.insert(args.end(), rotary.begin(), rotary.end());
  const std::vector<KernelArgRef> fresh = {k_new, v_new, kv_arg(KvRef::kSlotMapping),
                                           KernelArgRef::decode_route()};
  emit_paged_decode(cx, i, s, std::move(args), fresh, names, cx.value(n.outputs[0]).name);
  return Status::ok_status();
}

}  // namespace

std::vector<LowerRule> attention_rules() {
  return {{"kiln.Attention", lower_attention}, {"kiln.PagedAttention", lower_paged_attention}};
}

Status attention_absorb_views(LowerContext& cx) {
  for (const auto& [node, c] : attn_chains(cx)) {
    for (const auto& in : c.in)
      for (int link : in.nodes) cx.mark_done(link);
    for (int link : c.out.nodes) cx.mark_done(link);
  }
  return Status::ok_status();
}

}  // namespace kiln::compiler
