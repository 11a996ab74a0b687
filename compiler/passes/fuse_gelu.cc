#include "compiler/passes/fuse_gelu.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "compiler/passes/fuse_driver.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

namespace {

struct GeluPlan {
  int x = -1;
  int out = -1;
  const char* approximate = "none";
};

// x when v = x·k (Mul by a constant ≈ k, either order) or x / (1/k) (Div); else -1.
int scaled_by(const PatternView& pv, int v, double k) {
  const ir::Node* n = pv.producer(v);
  if (!n || !n->domain.empty() || n->inputs.size() != 2) return -1;
  if (n->op == "Mul") {
    for (int side = 0; side < 2; ++side)
      if (auto c = pv.splat(n->inputs[1 - side]); c && near_value(*c, k)) return n->inputs[side];
  } else if (n->op == "Div") {
    if (auto c = pv.splat(n->inputs[1]); c && *c != 0 && near_value(1.0 / *c, k))
      return n->inputs[0];
  }
  return -1;
}

// x when v = x³: Pow(x, 3), Mul(x, x·x) or Mul(x·x, x); else -1.
int cube_base(const PatternView& pv, int v) {
  if (const ir::Node* p = pv.producer(v, "Pow"))
    if (auto e = pv.splat(p->inputs[1]); e && *e == 3.0) return p->inputs[0];
  const ir::Node* m = pv.producer(v, "Mul");
  if (!m || m->inputs.size() != 2) return -1;
  for (int side = 0; side < 2; ++side) {
    const ir::Node* sq = pv.producer(m->inputs[1 - side], "Mul");
    const int x = m->inputs[side];
    if (sq && sq->inputs.size() == 2 && sq->inputs[0] == x && sq->inputs[1] == x) return x;
  }
  return -1;
}

// x when v = x + 0.044715·x³ (either order), else -1.
int tanh_inner(const PatternView& pv, int v) {
  const ir::Node* add = pv.producer(v, "Add");
  if (!add || add->inputs.size() != 2) return -1;
  for (int side = 0; side < 2; ++side) {
    const int x = add->inputs[side];
    const int cube = scaled_by(pv, add->inputs[1 - side], 0.044715);
    if (cube >= 0 && cube_base(pv, cube) == x) return x;
  }
  return -1;
}

// From core = erf(x/√2) or tanh(...): matches 0.5 · x · (1 + core) in its factor orders and
// returns the value it computes, or -1.
int gelu_tail(const PatternView& pv, int core, int x) {
  const ir::Node* add = pv.sole_user(core, "Add");
  if (!add) return -1;
  const int one = PatternView::other_input(*add, core);
  if (auto c = pv.splat(one); !c || !near_value(*c, 1.0)) return -1;
  const int t = add->outputs[0];
  const ir::Node* m1 = pv.sole_user(t, "Mul");
  if (!m1) return -1;
  const int o1 = PatternView::other_input(*m1, t);
  const int p1 = m1->outputs[0];
  auto is_half = [&](int v) {
    auto c = pv.splat(v);
    return c && near_value(*c, 0.5);
  };
  if (o1 == x || is_half(o1)) {  // (x·t)·0.5 or (0.5·t)·x
    const ir::Node* m2 = pv.sole_user(p1, "Mul");
    if (!m2) return -1;
    const int o2 = PatternView::other_input(*m2, p1);
    if (o1 == x ? is_half(o2) : o2 == x) return m2->outputs[0];
    return -1;
  }
  if (scaled_by(pv, o1, 0.5) == x) return p1;  // (0.5·x)·t or (x/2)·t
  return -1;
}

// Adds a plan when n is the Erf or Tanh at the heart of a GELU.
void match_gelu(const PatternView& pv, const ir::Node& n, std::vector<GeluPlan>& plans) {
  if (!n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1) return;
  GeluPlan p;
  if (n.op == "Erf") {
    p.x = scaled_by(pv, n.inputs[0], 1.0 / std::numbers::sqrt2);
  } else if (n.op == "Tanh") {
    p.x = tanh_inner(pv, scaled_by(pv, n.inputs[0], std::sqrt(2.0 / std::numbers::pi)));
    p.approximate = "tanh";
  }
  if (p.x < 0) return;
  p.out = gelu_tail(pv, n.outputs[0], p.x);
  if (p.out < 0 || pv.value(p.out).shape != pv.value(p.x).shape ||
      pv.value(p.out).dtype != pv.value(p.x).dtype)
    return;
  plans.push_back(p);
}

bool apply_gelu_plan(ir::Graph& g, const GeluPlan& p) {
  const int pos = fused_node_index(g, p.out);
  if (pos < 0) return false;
  ir::Node fused{.name = g.nodes[static_cast<size_t>(pos)].name,
                 .op = "Gelu",
                 .domain = "",
                 .inputs = {p.x},
                 .outputs = {p.out},
                 .attrs = {{"approximate", std::string(p.approximate)}}};
  return replace_if_agrees(g, pos, std::move(fused));
}

}  // namespace

Status fuse_gelu(ir::Graph& g) { return run_fusion<GeluPlan>(g, match_gelu, apply_gelu_plan); }

}  // namespace kiln::compiler
