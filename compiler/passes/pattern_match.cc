#include "compiler/passes/pattern_match.h"

#include <algorithm>
#include <cmath>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {
constexpr int64_t kMaxSplat = int64_t{1} << 16;
}  // namespace

PatternView::PatternView(const ir::Graph& g)
    : g_(g), users_(g.values.size()), is_output_(g.values.size(), 0) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) users_[in].push_back(static_cast<int>(i));
  for (int o : g.outputs) is_output_[o] = 1;
}

const ir::Value& PatternView::value(int v) const {
  static const ir::Value kNone;
  return v >= 0 && v < static_cast<int>(g_.values.size()) ? g_.values[v] : kNone;
}

const ir::Node* PatternView::producer(int v) const {
  const int p = producer_index(v);
  return p < 0 ? nullptr : &g_.nodes[p];
}

const ir::Node* PatternView::producer(int v, std::string_view op) const {
  const ir::Node* n = producer(v);
  return n && n->domain.empty() && n->op == op ? n : nullptr;
}

int PatternView::producer_index(int v) const {
  if (v < 0 || v >= static_cast<int>(g_.values.size())) return -1;
  const int p = g_.values[v].producer;
  return p >= 0 && p < static_cast<int>(g_.nodes.size()) ? p : -1;
}

const std::vector<int>& PatternView::users(int v) const {
  static const std::vector<int> kNone;
  return v >= 0 && v < static_cast<int>(users_.size()) ? users_[v] : kNone;
}

const ir::Node* PatternView::sole_user(int v, std::string_view op) const {
  const std::vector<int>& u = users(v);
  if (u.size() != 1 || is_graph_output(v)) return nullptr;
  const ir::Node& n = g_.nodes[u[0]];
  return n.domain.empty() && n.op == op ? &n : nullptr;
}

bool PatternView::is_graph_output(int v) const {
  return v >= 0 && v < static_cast<int>(is_output_.size()) && is_output_[v];
}

std::optional<RefTensor> PatternView::constant(int v) const {
  if (!value(v).constant) return std::nullopt;
  Result<RefTensor> t = reference_decode_constant(value(v));
  if (!t.ok()) return std::nullopt;
  return std::move(t).value();
}

std::optional<double> PatternView::splat(int v) const {
  const ir::Value& val = value(v);
  if (!val.constant) return std::nullopt;
  int64_t n = 1;
  for (int64_t d : val.constant->dims)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxSplat) return std::nullopt;
  std::optional<RefTensor> t = constant(v);
  if (!t || t->data.empty()) return std::nullopt;
  for (double x : t->data)
    if (!(x == t->data[0]) && !(std::isnan(x) && std::isnan(t->data[0]))) return std::nullopt;
  return t->data[0];
}

int PatternView::other_input(const ir::Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return -1;
}

int PatternView::skip_noop_casts(int v) const {
  for (const ir::Node* c = producer(v, "Cast"); c && !c->inputs.empty() && c->inputs[0] >= 0;
       c = producer(v, "Cast")) {
    if (value(c->inputs[0]).dtype != value(v).dtype) break;
    v = c->inputs[0];
  }
  return v;
}

std::optional<std::vector<int64_t>> PatternView::reduce_axes(const ir::Node& n) const {
  if (n.inputs.empty() || n.inputs[0] < 0) return std::nullopt;
  const auto rank = static_cast<int64_t>(value(n.inputs[0]).shape.size());
  std::vector<int64_t> axes;
  if (n.has_attr("axes")) {
    axes = n.attr_ints("axes");
  } else if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
    std::optional<RefTensor> t = constant(n.inputs[1]);
    if (!t) return std::nullopt;
    for (double x : t->data) axes.push_back(static_cast<int64_t>(x));
  }
  if (axes.empty()) {
    if (n.attr_int("noop_with_empty_axes", 0) != 0) return axes;
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
    return axes;
  }
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
  }
  return axes;
}

bool PatternView::is_mean_last_axis_keepdims(const ir::Node& n) const {
  if (!n.domain.empty() || n.op != "ReduceMean" || n.attr_int("keepdims", 1) != 1 ||
      n.inputs.empty())
    return false;
  const auto rank = static_cast<int64_t>(value(n.inputs[0]).shape.size());
  std::optional<std::vector<int64_t>> axes = reduce_axes(n);
  return rank >= 1 && axes && *axes == std::vector<int64_t>{rank - 1};
}

int64_t PatternView::opset(const ir::Node& n) const {
  auto it = g_.opsets.find(n.domain == "ai.onnx" ? std::string() : n.domain);
  return it == g_.opsets.end() ? 1 : it->second;
}

bool near_value(double a, double b, double rtol) {
  return std::isfinite(a) && std::abs(a - b) <= rtol * std::abs(b);
}

bool infer_agrees(ir::Graph& g, const ir::Node& n, int64_t max_size) {
  const OpDef* def = op_find(n.domain, n.op);
  if (!def || !def->infer) return false;
  std::vector<ir::Value> saved;
  for (int o : n.outputs) saved.push_back(g.values[o]);
  auto it = g.opsets.find(n.domain == "ai.onnx" ? std::string() : n.domain);
  const int64_t opset = it == g.opsets.end() ? 1 : it->second;
  InferContext c(g, n, opset, max_size);
  bool ok = def->infer(c).ok();
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    ir::Value& v = g.values[n.outputs[k]];
    ok = ok && v.dtype == saved[k].dtype && v.shape == saved[k].shape;
    v = saved[k];
  }
  return ok;
}

std::vector<int64_t> unsqueeze_axes(const PatternView& pv, const ir::Node& n) {
  if (n.has_attr("axes")) return n.attr_ints("axes");
  std::vector<int64_t> axes;
  if (n.inputs.size() > 1)
    if (std::optional<RefTensor> t = pv.constant(n.inputs[1]))
      for (double x : t->data) axes.push_back(static_cast<int64_t>(x));
  return axes;
}

namespace {

// A Transpose of `v`'s producer with permutation `perm`, its input read only by it; or null.
const ir::Node* transpose_of(const PatternView& pv, int v, const std::vector<int64_t>& perm) {
  const ir::Node* t = pv.producer(v, "Transpose");
  if (t == nullptr || t->attr_ints("perm") != perm || pv.users(t->inputs[0]).size() != 1)
    return nullptr;
  return t;
}

// x when v = Transpose [0,1,3,2] (Reshape [B,H,D,S] (Transpose [0,2,1] (Reshape [B·H,S,D] (x))))
// with x [B, H, S, D]: the keys as the dynamo exporter's decomposed SDPA transposes them for
// Q·Kᵀ, and fuse_attention transposes back, an identity. Else v.
int through_transposed_flatten(const PatternView& pv, int v) {
  const ir::Node* t2 = transpose_of(pv, v, {0, 1, 3, 2});
  const ir::Node* r2 = t2 ? pv.producer(t2->inputs[0], "Reshape") : nullptr;
  const ir::Node* t1 = r2 && pv.users(r2->inputs[0]).size() == 1
                           ? transpose_of(pv, r2->inputs[0], {0, 2, 1})
                           : nullptr;
  const ir::Node* r1 = t1 ? pv.producer(t1->inputs[0], "Reshape") : nullptr;
  if (r1 == nullptr) return v;
  const int x = r1->inputs[0];
  const ir::Shape& xs = pv.value(x).shape;
  if (xs.size() != 4 || pv.value(v).shape != xs) return v;
  const std::optional<ir::DimExpr> bh = ir::dim_mul(xs[0], xs[1]);
  if (!bh || pv.value(r1->outputs[0]).shape != ir::Shape{*bh, xs[2], xs[3]} ||
      pv.value(r2->outputs[0]).shape != ir::Shape{xs[0], xs[1], xs[3], xs[2]})
    return v;
  return x;
}

}  // namespace

// GQA: v = Reshape(Expand(Unsqueeze(kv, axis 2) → [B, Hkv, n, S, D]) → [B, Hkv·n, S, D]
// repeats each kv head n times (query head h reads kv head h / n), seen through
// through_transposed_flatten. Returns kv, or -1.
int unrepeat_kv(const PatternView& pv, int v, int64_t& n) {
  v = through_transposed_flatten(pv, v);
  const ir::Node* rs = pv.producer(v, "Reshape");
  if (!rs) return -1;
  const ir::Node* ex = pv.producer(rs->inputs[0], "Expand");
  if (!ex) return -1;
  const ir::Node* un = pv.producer(ex->inputs[0], "Unsqueeze");
  if (!un) return -1;
  const int kv = un->inputs[0];
  const ir::Shape& ks = pv.value(kv).shape;
  const ir::Shape& us = pv.value(un->outputs[0]).shape;
  const ir::Shape& es = pv.value(ex->outputs[0]).shape;
  const ir::Shape& vs = pv.value(v).shape;
  const std::vector<int64_t> axes = unsqueeze_axes(pv, *un);
  if (ks.size() != 4 || us.size() != 5 || es.size() != 5 || vs.size() != 4 || axes.size() != 1 ||
      (axes[0] != 2 && axes[0] != -3))
    return -1;
  if (!ks[1].is_constant() || !es[2].is_constant() || es[2].offset < 1) return -1;
  for (int a : {0, 1, 3, 4})
    if (es[a] != us[a]) return -1;
  const ir::DimExpr heads = ir::DimExpr::constant(ks[1].offset * es[2].offset);
  if (vs != ir::Shape{ks[0], heads, ks[2], ks[3]}) return -1;
  n = es[2].offset;
  return kv;
}

std::vector<int64_t> const_ints(const PatternView& pv, const ir::Node& n, const char* attr,
                                size_t input, bool& ok) {
  if (n.has_attr(attr)) return n.attr_ints(attr);
  std::vector<int64_t> out;
  if (input >= n.inputs.size() || n.inputs[input] < 0) return out;  // absent
  std::optional<RefTensor> t = pv.constant(n.inputs[input]);
  if (!t) {
    ok = false;
    return out;
  }
  for (double v : t->data) out.push_back(ref_to_int(v));
  return out;
}

bool last_axis_piece(const PatternView& pv, int v, int& x, int64_t& lo, int64_t& hi,
                     bool allow_empty) {
  const ir::Node* n = pv.producer(v);
  if (!n || !n->domain.empty() || n->inputs.empty()) return false;
  x = n->inputs[0];
  const ir::Shape& xs = pv.value(x).shape;
  if (xs.empty() || !xs.back().is_constant()) return false;
  const auto rank = static_cast<int64_t>(xs.size());
  const int64_t d = xs.back().offset;
  if (n->op == "Split") {
    const int64_t axis = n->attr_int("axis", 0);
    if ((axis != -1 && axis != rank - 1) || n->outputs.size() != 2) return false;
    const ir::Shape& s0 = pv.value(n->outputs[0]).shape;
    if (s0.size() != xs.size() || s0.back() != ir::DimExpr::constant(d / 2) || d % 2) return false;
    lo = v == n->outputs[0] ? 0 : d / 2;
    hi = lo + d / 2;
    return true;
  }
  if (n->op != "Slice") return false;
  bool ok = true;
  const std::vector<int64_t> starts = const_ints(pv, *n, "starts", 1, ok);
  const std::vector<int64_t> ends = const_ints(pv, *n, "ends", 2, ok);
  std::vector<int64_t> axes = const_ints(pv, *n, "axes", 3, ok);
  const std::vector<int64_t> steps =
      n->has_attr("starts") ? std::vector<int64_t>{} : const_ints(pv, *n, "steps", 4, ok);
  if (!ok || starts.size() != 1 || ends.size() != 1) return false;
  if (axes.empty()) axes = {0};
  if (axes.size() != 1 || (axes[0] != -1 && axes[0] != rank - 1)) return false;
  if (!steps.empty() && steps != std::vector<int64_t>{1}) return false;
  auto clamp = [d](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + d : i, 0, d); };
  lo = clamp(starts[0]);
  hi = clamp(ends[0]);
  return lo < hi || (allow_empty && lo == hi);
}

}  // namespace kiln::compiler
