// legalize_variants: rewrites op variants onto the internal op set (compiler/ops/kiln_ops.md).
//   ONNX Attention, com.microsoft MultiHeadAttention / GroupQueryAttention / Attention
//     → Reshape/Transpose (+ MatMul/Add/Split, Concat of the past) + kiln.Attention
//     (legalize_attention.cc);
//   ONNX / com.microsoft RotaryEmbedding → Gather of the caches + (Reshape) kiln.Rotary;
//   SkipLayerNormalization → Add(s) + LayerNormalization;
//   SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization → (Add(s) +) RMSNormalization;
//   FastGelu / BiasGelu → Add + Gelu (tanh / none).
// A node whose legalization would lose a used output (a norm's mean / inv_std_var) or that the
// internal ops cannot express is kept as it is.
#include "compiler/passes/legalize_variants.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/passes/legalize_builder.h"

namespace kiln::compiler {

// --- LegalizeBuilder
// --------------------------------------------------------------------------------

int64_t LegalizeBuilder::opset() const {
  auto it = g_.opsets.find("");
  return it == g_.opsets.end() ? 13 : it->second;
}

int LegalizeBuilder::in(size_t i) const { return i < node_.inputs.size() ? node_.inputs[i] : -1; }
int LegalizeBuilder::out(size_t i) const {
  return i < node_.outputs.size() ? node_.outputs[i] : -1;
}

bool LegalizeBuilder::needed(size_t i) const {
  const int id = out(i);
  if (id < 0) return false;
  if (std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end()) return true;
  for (size_t n = 0; n < g_.nodes.size(); ++n)
    if (n != pos_ && std::find(g_.nodes[n].inputs.begin(), g_.nodes[n].inputs.end(), id) !=
                         g_.nodes[n].inputs.end())
      return true;
  return false;
}

void LegalizeBuilder::emit(const std::string& op, std::vector<int> inputs, std::vector<int> outputs,
                        AttrMap attrs, const std::string& domain) {
  ir::Node n;
  n.name = graph_unique_node_name(g_, fmt::format("{}/{}_{}", node_.name, op, nodes_.size()));
  n.op = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  nodes_.push_back(std::move(n));
}

int LegalizeBuilder::new_value(const std::string& hint, DType dtype, ir::Shape shape) {
  return graph_new_value(g_, fmt::format("{}/{}", node_.name, hint), dtype, std::move(shape));
}

int LegalizeBuilder::op1(const std::string& op, std::vector<int> inputs, DType dtype,
                         ir::Shape shape, AttrMap attrs, int into, const std::string& domain) {
  if (into < 0) into = new_value(op, dtype, std::move(shape));
  emit(op, std::move(inputs), {into}, std::move(attrs), domain);
  return into;
}

int LegalizeBuilder::const_i64(const std::vector<int64_t>& data) {
  std::vector<double> d(data.begin(), data.end());
  return graph_new_constant(g_, fmt::format("{}/const", node_.name), DType::kI64,
                            {static_cast<int64_t>(data.size())}, d);
}

int LegalizeBuilder::scalar(DType dtype, double v) { return constant(dtype, {}, {v}); }

int LegalizeBuilder::constant(DType dtype, std::vector<int64_t> dims,
                           const std::vector<double>& data) {
  return graph_new_constant(g_, fmt::format("{}/const", node_.name), dtype, std::move(dims), data);
}

int LegalizeBuilder::reshape(int x, const std::vector<int64_t>& target, ir::Shape out, int into) {
  return op1("Reshape", {x, const_i64(target)}, dtype(x), std::move(out), {}, into);
}

int LegalizeBuilder::transpose(int x, const std::vector<int64_t>& perm, int into) {
  ir::Shape out;
  for (int64_t p : perm) out.push_back(shape(x)[static_cast<size_t>(p)]);
  return op1("Transpose", {x}, dtype(x), out, {{"perm", perm}}, into);
}

int LegalizeBuilder::unsqueeze(int x, int64_t axis, int into) {
  ir::Shape out = shape(x);
  out.insert(out.begin() + axis, ir::DimExpr::constant(1));
  return op1("Unsqueeze", {x, const_i64({axis})}, dtype(x), out, {}, into);
}

int LegalizeBuilder::binary(const std::string& op, int a, int b, int into) {
  const ir::Shape &sa = shape(a), &sb = shape(b);
  const size_t r = std::max(sa.size(), sb.size());
  ir::Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const ir::DimExpr one = ir::DimExpr::constant(1);
    const ir::DimExpr da = i < r - sa.size() ? one : sa[i - (r - sa.size())];
    const ir::DimExpr db = i < r - sb.size() ? one : sb[i - (r - sb.size())];
    out[i] = da == one ? db : da;
  }
  return op1(op, {a, b}, dtype(a), out, {}, into);
}

int LegalizeBuilder::concat(const std::vector<int>& xs, int64_t axis, int into) {
  ir::Shape out = shape(xs[0]);
  for (size_t i = 1; i < xs.size(); ++i) {
    std::optional<ir::DimExpr> d = dim_add(out[axis], shape(xs[i])[axis]);
    if (!d) fail("a concatenated length overflows");
    out[axis] = d.value_or(ir::DimExpr{});
  }
  return op1("Concat", xs, dtype(xs[0]), out, {{"axis", axis}}, into);
}

std::vector<int> LegalizeBuilder::split(int x, int64_t axis, const std::vector<int64_t>& sizes) {
  std::vector<int> outs;
  for (int64_t s : sizes) {
    ir::Shape sh = shape(x);
    sh[axis] = ir::DimExpr::constant(s);
    outs.push_back(new_value("Split", dtype(x), sh));
  }
  emit("Split", {x, const_i64(sizes)}, outs, {{"axis", axis}});
  return outs;
}

int LegalizeBuilder::to_heads(int x, int64_t heads, int into) {
  const ir::Shape s = shape(x);
  std::optional<ir::DimExpr> d = dim_div_exact(s[2], ir::DimExpr::constant(heads));
  if (!d || !d->is_constant())
    fail(fmt::format("cannot split {} into {} heads", s[2].to_string(), heads));
  const ir::DimExpr D = d.value_or(ir::DimExpr{});
  const int r = reshape(x, {0, 0, heads, D.offset}, {s[0], s[1], ir::DimExpr::constant(heads), D});
  return transpose(r, {0, 2, 1, 3}, into);
}

int LegalizeBuilder::from_heads(int y, int into) {
  const int t = transpose(y, {0, 2, 1, 3});
  const ir::Shape s = shape(t);  // [B, S, H, D]
  std::optional<ir::DimExpr> hd = ir::dim_mul(s[2], s[3]);
  if (!hd || !hd->is_constant()) fail("the merged head size is not constant");
  const ir::DimExpr HD = hd.value_or(ir::DimExpr{});
  return reshape(t, {0, 0, HD.offset}, {s[0], s[1], HD}, into);
}

void LegalizeBuilder::alias(int id, int src) {
  if (std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end())
    op1("Identity", {src}, dtype(src), shape(src), {}, id);
  else
    aliases_.emplace_back(id, src);
}

Result<size_t> LegalizeBuilder::commit() {
  if (!error_.empty())
    return internal_error(fmt::format("legalize_variants: node '{}' ({}): {}", node_.name,
                                      node_.qualified_op(), error_));
  // The original becomes an output-less placeholder (graph_remove_dead drops it) and the new
  // nodes go in front of it, so producers are renumbered once per insert.
  ir::Node placeholder = node_;
  placeholder.outputs.clear();
  graph_replace_node(g_, pos_, std::move(placeholder));
  for (size_t k = 0; k < nodes_.size(); ++k) graph_insert_node(g_, pos_ + k, std::move(nodes_[k]));
  for (const auto& [id, src] : aliases_) graph_replace_uses(g_, id, src);
  return pos_ + nodes_.size() + 1;
}

// --- rotary --------------------------------------------------------------------------------------

namespace {

// Heads and head size of a rotary input X (4-D [B, H, S, D] or 3-D [B, S, H·D]).
struct RotaryLayout {
  int64_t heads = 0, head_size = 0, rotary_dim = 0;
};

std::optional<RotaryLayout> rotary_layout(const LegalizeBuilder& b, int cos_cache) {
  const ir::Node& n = b.node();
  const ir::Shape& x = b.shape(b.in(0));
  const ir::Shape& cs = b.shape(cos_cache);
  RotaryLayout l;
  if (x.size() == 4) {
    l.heads = x[1].offset;
    l.head_size = x[3].offset;
  } else {
    l.heads = n.attr_int("num_heads", 0);
    if (l.heads <= 0 && !cs.empty() && cs.back().offset > 0)
      l.heads = x[2].offset / (2 * cs.back().offset);  // onnxruntime's inference
    if (l.heads <= 0) return std::nullopt;
    l.head_size = x[2].offset / l.heads;
  }
  const int64_t r = n.attr_int("rotary_embedding_dim", 0);
  l.rotary_dim = r == 0 ? l.head_size : r;
  return l;
}

// cos/sin tables ([B, S, R/2] or [S, R/2]) → kiln.Rotary on X (reshaped to heads when 3-D).
bool emit_rotary(LegalizeBuilder& b, const RotaryLayout& l, int cos, int sin) {
  const int x = b.in(0);
  const ir::Shape xs = b.shape(x);
  const AttrMap attrs = {{"rotary_dim", l.rotary_dim},
                         {"interleaved", b.node().attr_int("interleaved", 0)}};
  const bool per_batch = b.shape(cos).size() == 3;  // [B, S, R/2]; else [S, R/2]
  if (xs.size() == 4) {  // [B, H, S, D]: the tables need a head axis before S
    const int c = per_batch ? b.unsqueeze(cos, 1) : cos;
    const int s = per_batch ? b.unsqueeze(sin, 1) : sin;
    b.op1("Rotary", {x, c, s}, b.dtype(x), xs, attrs, b.out(0), "kiln");
    return true;
  }
  // [B, S, H·D] → [B, S, H, D]: the tables need a head axis after S.
  const ir::Shape x4 = {xs[0], xs[1], ir::DimExpr::constant(l.heads),
                        ir::DimExpr::constant(l.head_size)};
  const int xr = b.reshape(x, {0, 0, l.heads, l.head_size}, x4);
  const int c = b.unsqueeze(cos, per_batch ? 2 : 1);
  const int s = b.unsqueeze(sin, per_batch ? 2 : 1);
  const int y = b.op1("Rotary", {xr, c, s}, b.dtype(x), x4, attrs, -1, "kiln");
  b.reshape(y, {0, 0, xs[2].offset}, xs, b.out(0));
  return true;
}

int gather_rows(LegalizeBuilder& b, int table, int idx) {
  ir::Shape out = b.shape(idx);
  out.push_back(b.shape(table)[1]);
  return b.op1("Gather", {table, idx}, b.dtype(table), out, {{"axis", int64_t{0}}});
}

// ONNX RotaryEmbedding: X, cos_cache, sin_cache, position_ids (optional).
Result<bool> legalize_onnx_rotary(LegalizeBuilder& b) {
  auto l = rotary_layout(b, b.in(1));
  if (!l) return false;
  int cos = b.in(1), sin = b.in(2);
  if (b.in(3) >= 0) {
    cos = gather_rows(b, cos, b.in(3));
    sin = gather_rows(b, sin, b.in(3));
  }
  return emit_rotary(b, *l, cos, sin);
}

// com.microsoft RotaryEmbedding: input, position_ids ([B, S] or one start position), caches.
Result<bool> legalize_ms_rotary(LegalizeBuilder& b) {
  auto l = rotary_layout(b, b.in(2));
  if (!l) return false;
  const int pos = b.in(1);
  const ir::Shape xs = b.shape(b.in(0));
  int idx = pos;
  if (b.shape(pos).size() != 2) {
    // Position p + s for step s: needs S at compile time for the step numbers.
    const ir::DimExpr S = xs.size() == 4 ? xs[2] : xs[1];
    if (!S.is_constant()) return false;
    std::vector<double> steps(static_cast<size_t>(S.offset));
    for (size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<double>(i);
    idx = b.binary("Add", b.constant(b.dtype(pos), {S.offset}, steps), pos);  // [S]
  }
  const int cos = gather_rows(b, b.in(2), idx), sin = gather_rows(b, b.in(3), idx);
  return emit_rotary(b, *l, cos, sin);
}

// --- norms and GELU ------------------------------------------------------------------------------

// input + skip (+ bias), the last Add writing `into` when >= 0.
int skip_sum(LegalizeBuilder& b, int bias, int into) {
  const int s = b.binary("Add", b.in(0), b.in(1), bias >= 0 ? -1 : into);
  return bias >= 0 ? b.binary("Add", s, bias, into) : s;
}

Result<bool> legalize_skip_norm(LegalizeBuilder& b, bool simplified) {
  if (b.needed(1) || b.needed(2)) return false;  // mean / inv_std_var: keep the fused op
  const int bias = b.in(simplified ? 3 : 4);
  const int sum = skip_sum(b, bias, b.needed(3) ? b.out(3) : -1);
  const AttrMap attrs = {{"axis", int64_t{-1}}, {"epsilon", b.node().attr_float("epsilon", 1e-12)}};
  const int x = b.in(0);
  if (simplified) {
    b.op1("RMSNormalization", {sum, b.in(2)}, b.dtype(x), b.shape(x), attrs, b.out(0));
  } else {
    std::vector<int> ins = {sum, b.in(2)};
    if (b.in(3) >= 0) ins.push_back(b.in(3));
    b.op1("LayerNormalization", ins, b.dtype(x), b.shape(x), attrs, b.out(0));
  }
  return true;
}

Result<bool> legalize_simplified_norm(LegalizeBuilder& b) {
  if (b.needed(1)) return false;  // inv_std_var
  const ir::Shape x = b.shape(b.in(0));
  std::optional<int64_t> axis =
      axis_normalize(b.node().attr_int("axis", -1), static_cast<int64_t>(x.size()));
  // RMSNormalization broadcasts scale over X[axis:]; the simplified form only needs the counts
  // to agree, so keep the node when the shapes differ.
  if (!axis || b.shape(b.in(1)) != ir::Shape(x.begin() + *axis, x.end())) return false;
  b.op1("RMSNormalization", {b.in(0), b.in(1)}, b.dtype(b.in(0)), x,
        {{"axis", *axis}, {"epsilon", b.node().attr_float("epsilon", 1e-5)}}, b.out(0));
  return true;
}

Result<bool> legalize_gelu(LegalizeBuilder& b, const char* approximate) {
  const int x = b.in(1) >= 0 ? b.binary("Add", b.in(0), b.in(1)) : b.in(0);
  b.op1("Gelu", {x}, b.dtype(x), b.shape(x), {{"approximate", std::string(approximate)}}, b.out(0));
  return true;
}

using LegalizeFn = Result<bool> (*)(LegalizeBuilder&);

struct Legalization {
  std::string_view domain, op;
  LegalizeFn fn;
};

const Legalization kLegalizations[] = {
    {"", "Attention", legalize_onnx_attention},
    {"com.microsoft", "MultiHeadAttention", legalize_ms_mha},
    {"com.microsoft", "GroupQueryAttention", legalize_ms_gqa},
    {"com.microsoft", "Attention", legalize_ms_attention},
    {"", "RotaryEmbedding", legalize_onnx_rotary},
    {"com.microsoft", "RotaryEmbedding", legalize_ms_rotary},
    {"com.microsoft", "SkipLayerNormalization",
     [](LegalizeBuilder& b) { return legalize_skip_norm(b, false); }},
    {"com.microsoft", "SkipSimplifiedLayerNormalization",
     [](LegalizeBuilder& b) { return legalize_skip_norm(b, true); }},
    {"", "SimplifiedLayerNormalization", legalize_simplified_norm},
    {"com.microsoft", "SimplifiedLayerNormalization", legalize_simplified_norm},
    {"com.microsoft", "FastGelu", [](LegalizeBuilder& b) { return legalize_gelu(b, "tanh"); }},
    {"com.microsoft", "BiasGelu", [](LegalizeBuilder& b) { return legalize_gelu(b, "none"); }},
};

}  // namespace

Status legalize_variants(ir::Graph& g) {
  for (size_t i = 0; i < g.nodes.size();) {
    const ir::Node& n = g.nodes[i];
    const std::string_view domain = n.domain == "ai.onnx" ? "" : std::string_view(n.domain);
    const Legalization* l = nullptr;
    for (const Legalization& c : kLegalizations)
      if (c.domain == domain && c.op == n.op) l = &c;
    if (!l) {
      ++i;
      continue;
    }
    LegalizeBuilder b(g, i);
    KILN_ASSIGN_OR_RETURN(bool legalized, l->fn(b));
    if (!legalized) {
      ++i;
      continue;
    }
    KILN_ASSIGN_OR_RETURN(i, b.commit());
  }
  graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
