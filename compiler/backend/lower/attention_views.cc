// The strided views around attention nodes (kiln.Attention, kiln.PagedAttention) and the rotary
// embeddings before them (kiln.Rotary): exporters build Q/K/V as GEMM → Split/Slice (last axis)
// → Reshape [B, S, H, D] → Transpose [0, 2, 1, 3] (→ kiln.Rotary for Q and K), and the output as
// Transpose [0, 2, 1, 3] → Reshape [B, S, H·Dv]. The kernels take strided views, so
// attention_absorb_views claims those chains (every intermediate consumed only by the next link)
// and the attention and rotary steps read the GEMM buffer and the attention step writes the
// merged-heads buffer directly. The chains are a pure function of the graph (view_chains), so the
// lowering rules recompute exactly what attention_absorb_views claimed.
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "compiler/backend/lower/attention_lowering.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using Strides = ViewStrides;

std::optional<DimExpr> mul(const DimExpr& a, const DimExpr& b) { return ir::dim_mul(a, b); }
DimExpr add(const DimExpr& a, const DimExpr& b) { return {a.coef + b.coef, a.offset + b.offset}; }

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

// Strides of `to` viewing the same elements as (`from`, `st`) in row-major order, or nullopt
// when `to` cannot be expressed as a strided view (a merge of non-mergeable dims).
std::optional<Strides> reshape_strides(const ir::Shape& from, const Strides& st,
                                       const ir::Shape& to) {
  std::vector<std::pair<DimExpr, DimExpr>> a;  // (dim, stride), size-1 dims dropped
  for (size_t i = 0; i < from.size(); ++i)
    if (!dim_is_one(from[i])) a.emplace_back(from[i], st[i]);
  Strides out(to.size(), DimExpr::constant(0));
  size_t i = 0;
  for (size_t j = 0; j < to.size(); ++j) {
    if (dim_is_one(to[j])) continue;
    if (i >= a.size()) return std::nullopt;
    for (;;) {
      auto [dim, stride] = a[i];
      if (dim == to[j]) {
        out[j] = stride;
        ++i;
        break;
      }
      if (auto rest = div_exact(dim, to[j]); rest && !dim_is_one(*rest)) {  // split
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

// The chain over the first `len` of `links` (each link's first input is the next link's
// output) behind `x`; nullopt when a link is not a strided view of its input, or when
// `unit_last` and the last axis does not step by 1.
std::optional<InChain> chain_over(const LowerContext& cx, int x, const std::vector<int>& links,
                                  size_t len, bool unit_last) {
  std::vector<int> vals = {x};  // vals[k] is the output of links[k]
  for (size_t k = 0; k < len; ++k) vals.push_back(cx.node(links[k]).inputs[0]);
  InChain c;
  c.base = vals[len];
  c.offset = DimExpr::constant(0);
  auto st = contiguous_view_strides(cx.shape(c.base));
  if (!st) return std::nullopt;
  c.st = *st;
  for (size_t k = len; k-- > 0;)
    if (!apply_forward(cx, cx.node(links[k]), vals[k], c.st, c.offset)) return std::nullopt;
  if (c.st.size() != cx.shape(x).size()) return std::nullopt;
  if (unit_last && (c.st.empty() || c.st.back() != DimExpr::constant(1))) return std::nullopt;
  c.nodes.assign(links.begin(), links.begin() + static_cast<long>(len));
  return c;
}

// The longest absorbable chain behind input `x` (of an attention, or a rotary embedding when
// `unit_last`) whose links all apply (possibly none: x itself, contiguous).
InChain input_chain(const LowerContext& cx, int x, bool unit_last, size_t max_len = SIZE_MAX) {
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
    if (auto c = chain_over(cx, x, links, len, unit_last)) return *c;
  InChain c;
  c.base = x;
  c.offset = DimExpr::constant(0);
  c.st = contiguous_view_strides(cx.shape(x))
             .value_or(Strides(cx.shape(x).size(), DimExpr::constant(0)));
  return c;
}

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
    auto st = contiguous_view_strides(cx.shape(c.final_value));
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
  c.st = contiguous_view_strides(cx.shape(y)).value_or(Strides(4, DimExpr::constant(0)));
  return c;
}

}  // namespace

bool dim_is_one(const DimExpr& d) { return d == DimExpr::constant(1); }

std::optional<Strides> contiguous_view_strides(const ir::Shape& shape) {
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

// Chains of every kiln.Attention and kiln.PagedAttention node and of the X input of every
// kiln.Rotary. A Split is claimed only when each of its consumed outputs starts an accepted
// chain; otherwise chains stop before it (the Split runs).
ViewChains view_chains(const LowerContext& cx) {
  ViewChains all;
  const ir::Graph& g = cx.graph();
  struct Reader {  // one chained input: node, input index, chain
    int node, input;
    InChain* chain;
    bool unit_last;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    const std::string op = n.qualified_op();
    if ((op == "kiln.Attention" || op == "kiln.PagedAttention") && n.inputs.size() >= 3 &&
        n.outputs.size() == 1) {
      AttnChains c;
      for (int k = 0; k < 3; ++k) c.in[k] = input_chain(cx, n.inputs[k], false);
      c.out = output_chain(cx, n.outputs[0]);
      all.attention.emplace(static_cast<int>(i), std::move(c));
    } else if (op == "kiln.Rotary" && !n.inputs.empty() && n.inputs[0] >= 0) {
      all.rotary.emplace(static_cast<int>(i), input_chain(cx, n.inputs[0], true));
    }
  }
  std::vector<Reader> readers;
  for (auto& [node, c] : all.attention)
    for (int k = 0; k < 3; ++k) readers.push_back({node, k, &c.in[k], false});
  for (auto& [node, c] : all.rotary) readers.push_back({node, 0, &c, true});
  for (bool changed = true; changed;) {
    changed = false;
    std::set<int> claimed;  // values a chain passes through (each link's output)
    for (const Reader& r : readers) {
      int v = g.nodes[r.node].inputs[r.input];
      for (int link : r.chain->nodes) {
        claimed.insert(v);
        v = g.nodes[link].inputs[0];
      }
    }
    for (const Reader& r : readers) {
      InChain& in = *r.chain;
      for (size_t k = 0; k < in.nodes.size(); ++k) {
        const ir::Node& link = g.nodes[in.nodes[k]];
        if (link.op != "Split") continue;
        bool covered = true;
        for (int o : link.outputs)
          if (o >= 0 && !cx.consumers(o).empty() && !claimed.count(o)) covered = false;
        if (covered) continue;
        in = input_chain(cx, g.nodes[r.node].inputs[r.input], r.unit_last, k);  // stop before it
        changed = true;
        break;
      }
    }
  }
  return all;
}

std::map<int, AttnChains> attn_chains(const LowerContext& cx) { return view_chains(cx).attention; }

// The attention node's name, then those of the view nodes it absorbs.
std::string absorbed_names(const LowerContext& cx, const ir::Node& n, const AttnChains& c) {
  std::string names = n.name;
  for (const auto& in : c.in)
    for (int link : in.nodes) names += "," + cx.node(link).name;
  for (int link : c.out.nodes) names += "," + cx.node(link).name;
  return names;
}

}  // namespace kiln::compiler
