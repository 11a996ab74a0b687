#include "compiler/passes/fuse_norms.h"

#include <optional>
#include <string>
#include <vector>

#include "compiler/passes/fuse_driver.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

namespace {

// What a match becomes: op(x, scale, bias) {axis = -1, epsilon, stash_type = 1} producing out.
struct NormPlan {
  std::string op;  // "LayerNormalization" or "RMSNormalization"
  int out = -1;
  int x = -1;
  int scale = -1;                  // -1: ones
  std::vector<double> scale_data;  // a constant scale re-shaped to [D] (when not empty)
  int bias = -1;                   // -1: none (LayerNormalization only)
  std::vector<double> bias_data;
  double eps = 0;
};

// a when v = sqrt(a): Sqrt(a) or Pow(a, 0.5); else -1.
int sqrt_arg(const PatternView& pv, int v) {
  if (const ir::Node* n = pv.producer(v, "Sqrt")) return n->inputs[0];
  if (const ir::Node* n = pv.producer(v, "Pow"))
    if (auto e = pv.splat(n->inputs[1]); e && *e == 0.5) return n->inputs[0];
  return -1;
}

// a when v = 1 / sqrt(a): Reciprocal(sqrt(a)), Div(1, sqrt(a)) or Pow(a, -0.5); else -1.
int rsqrt_arg(const PatternView& pv, int v) {
  if (const ir::Node* n = pv.producer(v, "Reciprocal")) return sqrt_arg(pv, n->inputs[0]);
  if (const ir::Node* n = pv.producer(v, "Div"))
    if (auto one = pv.splat(n->inputs[0]); one && *one == 1.0) return sqrt_arg(pv, n->inputs[1]);
  if (const ir::Node* n = pv.producer(v, "Pow"))
    if (auto e = pv.splat(n->inputs[1]); e && *e == -0.5) return n->inputs[0];
  return -1;
}

// For a = mean(x², last axis, keepdims) + eps: fills x and eps. eps may be absent (0).
bool mean_square(const PatternView& pv, int a, int& x, double& eps) {
  eps = 0;
  if (const ir::Node* add = pv.producer(a, "Add")) {
    for (int side = 0; side < 2; ++side) {
      std::optional<double> e = pv.splat(add->inputs[1 - side]);
      if (e && *e >= 0 && pv.producer(add->inputs[side], "ReduceMean")) {
        eps = *e;
        a = add->inputs[side];
        break;
      }
    }
  }
  const ir::Node* mean = pv.producer(a, "ReduceMean");
  if (!mean || !pv.is_mean_last_axis_keepdims(*mean)) return false;
  const int sq = mean->inputs[0];
  if (const ir::Node* p = pv.producer(sq, "Pow")) {
    auto e = pv.splat(p->inputs[1]);
    if (!e || *e != 2.0) return false;
    x = p->inputs[0];
  } else if (const ir::Node* m = pv.producer(sq, "Mul"); m && m->inputs[0] == m->inputs[1]) {
    x = m->inputs[0];
  } else {
    return false;
  }
  return pv.value(sq).shape == pv.value(x).shape;
}

// x0 when d = x0 - mean(x0, last axis, keepdims), else -1.
int centred_source(const PatternView& pv, int d) {
  const ir::Node* sub = pv.producer(d, "Sub");
  if (!sub) return -1;
  const ir::Node* mean = pv.producer(sub->inputs[1], "ReduceMean");
  if (!mean || !pv.is_mean_last_axis_keepdims(*mean) || mean->inputs[0] != sub->inputs[0])
    return -1;
  return pv.value(d).shape == pv.value(sub->inputs[0]).shape ? sub->inputs[0] : -1;
}

// Matches n = x / sqrt(mean(x²) + eps) (or x · rsqrt(...)) at node `n`.
bool match_core(const PatternView& pv, const ir::Node& n, NormPlan& p) {
  if (!n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  int num = -1, a = -1;
  if (n.op == "Div") {
    num = n.inputs[0];
    a = sqrt_arg(pv, n.inputs[1]);
  } else if (n.op == "Mul") {
    for (int side = 0; side < 2 && a < 0; ++side) {
      a = rsqrt_arg(pv, n.inputs[1 - side]);
      num = n.inputs[side];
    }
  }
  int x = -1;
  if (a < 0 || !mean_square(pv, a, x, p.eps) || x != num) return false;
  const ir::Value& xv = pv.value(x);
  if (pv.value(n.outputs[0]).shape != xv.shape || pv.value(n.outputs[0]).dtype != xv.dtype ||
      xv.shape.empty() || !xv.shape.back().is_constant())
    return false;
  const int x0 = centred_source(pv, x);
  p.op = x0 >= 0 ? "LayerNormalization" : "RMSNormalization";
  p.x = x0 >= 0 ? x0 : x;
  p.out = n.outputs[0];
  return true;
}

// An affine parameter for the last axis: a [D] value, or a constant [1, ..., 1, D] (its data
// is returned in `data` to be stored as [D]).
bool last_axis_param(const PatternView& pv, int w, int64_t d, std::vector<double>& data) {
  const ir::Shape& s = pv.value(w).shape;
  if (s.empty() || s.back() != ir::DimExpr::constant(d)) return false;
  if (s.size() == 1) return true;
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] != ir::DimExpr::constant(1)) return false;
  std::optional<RefTensor> t = pv.constant(w);
  if (!t) return false;
  data = t->data;
  return true;
}

// A Mul (scale) or Add (bias) by a last-axis parameter reading `from` (through no-op Casts),
// when `from` has no other reader.
struct Affine {
  int param = -1;
  int out = -1;
  std::vector<double> data;  // set when the parameter is a constant [1, ..., 1, D]
};

std::optional<Affine> follow_affine(const PatternView& pv, int from, int x, const char* op) {
  int v = from;
  while (const ir::Node* c = pv.sole_user(v, "Cast")) {
    if (pv.value(c->outputs[0]).dtype != pv.value(v).dtype) break;
    v = c->outputs[0];
  }
  const ir::Node* n = pv.sole_user(v, op);
  if (!n || n->inputs.size() != 2 || n->inputs[0] == n->inputs[1]) return std::nullopt;
  Affine a;
  a.param = PatternView::other_input(*n, v);
  a.out = n->outputs[0];
  const int64_t d = pv.value(x).shape.back().offset;
  if (a.param < 0 || pv.value(a.param).dtype != pv.value(v).dtype ||
      pv.value(a.out).shape != pv.value(x).shape || !last_axis_param(pv, a.param, d, a.data))
    return std::nullopt;
  return a;
}

// The parameter as a [D] value: itself, a new constant from `data`, or ones.
int param_1d(ir::Graph& g, int param, const std::vector<double>& data, DType dt, int64_t d,
             const std::string& hint, double fill) {
  if (param >= 0 && data.empty()) return param;
  std::vector<double> v = data;
  if (param < 0) v.assign(static_cast<size_t>(d), fill);
  return graph_new_constant(g, hint, dt, {d}, v);
}

// Adds a plan when n normalises a LayerNorm or RMSNorm, taking in the scale (Mul) and, for
// LayerNorm, the bias (Add) that follow it.
void match_norm(const PatternView& pv, const ir::Node& n, std::vector<NormPlan>& plans) {
  NormPlan p;
  if (!match_core(pv, n, p)) return;
  if (std::optional<Affine> a = follow_affine(pv, p.out, p.x, "Mul")) {
    p.scale = a->param;
    p.scale_data = a->data;
    p.out = a->out;
  }
  if (p.op == "LayerNormalization")
    if (std::optional<Affine> a = follow_affine(pv, p.out, p.x, "Add")) {
      p.bias = a->param;
      p.bias_data = a->data;
      p.out = a->out;
    }
  plans.push_back(std::move(p));
}

// The [D] parameters made here are dropped by run_fusion when inference disagrees.
bool apply_norm_plan(ir::Graph& g, const NormPlan& p) {
  const int pos = fused_node_index(g, p.out);
  if (pos < 0) return false;
  const int64_t d = g.values[p.x].shape.back().offset;
  const DType dt = g.values[p.out].dtype;
  const std::string name = g.nodes[static_cast<size_t>(pos)].name;
  ir::Node fused{.name = name,
                 .op = p.op,
                 .domain = "",
                 .inputs = {p.x, param_1d(g, p.scale, p.scale_data, dt, d, name + "/scale", 1.0)},
                 .outputs = {p.out},
                 .attrs = {{"axis", int64_t{-1}}, {"epsilon", p.eps}, {"stash_type", int64_t{1}}}};
  if (p.bias >= 0)
    fused.inputs.push_back(param_1d(g, p.bias, p.bias_data, dt, d, name + "/bias", 0));
  return replace_if_agrees(g, pos, std::move(fused));
}

}  // namespace

Status fuse_norms(ir::Graph& g) { return run_fusion<NormPlan>(g, match_norm, apply_norm_plan); }

}  // namespace kiln::compiler
