#include "compiler/passes/fuse_rotary.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "compiler/ops/op_util.h"
#include "compiler/passes/fuse_driver.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

namespace {

struct RotaryPlan {
  int x = -1, cos = -1, sin = -1;
  int out = -1;
};

// x when v = rotate_half(x) = Concat(-x[..., D/2:], x[..., :D/2], axis -1), else -1.
int rotate_half_source(const PatternView& pv, int v) {
  const ir::Node* cat = pv.producer(v, "Concat");
  if (!cat || cat->inputs.size() != 2) return -1;
  const auto rank = static_cast<int64_t>(pv.value(v).shape.size());
  const int64_t axis = cat->attr_int("axis", 0);
  if (axis != -1 && axis != rank - 1) return -1;
  int neg_in = -1;
  if (const ir::Node* neg = pv.producer(cat->inputs[0], "Neg")) {
    neg_in = neg->inputs[0];
  } else if (const ir::Node* m = pv.producer(cat->inputs[0], "Mul"); m && m->inputs.size() == 2) {
    for (int side = 0; side < 2 && neg_in < 0; ++side)
      if (auto c = pv.splat(m->inputs[1 - side]); c && *c == -1.0) neg_in = m->inputs[side];
  }
  int x1 = -1, x2 = -1;
  int64_t lo1 = 0, hi1 = 0, lo2 = 0, hi2 = 0;
  if (neg_in < 0 || !last_axis_piece(pv, neg_in, x2, lo2, hi2) ||
      !last_axis_piece(pv, cat->inputs[1], x1, lo1, hi1) || x1 != x2)
    return -1;
  const ir::Shape& xs = pv.value(x1).shape;
  const int64_t d = xs.back().offset;
  if (d % 2 || lo1 != 0 || hi1 != d / 2 || lo2 != d / 2 || hi2 != d) return -1;
  if (pv.value(v).shape != xs || pv.value(neg_in).shape != pv.value(cat->inputs[1]).shape)
    return -1;
  return x1;
}

// A full-length cos/sin table: last dim D, broadcasting to x without growing it.
bool table_fits(const PatternView& pv, int table, int x, int product) {
  const ir::Value& t = pv.value(table);
  const ir::Value& xv = pv.value(x);
  return t.dtype == xv.dtype && !t.shape.empty() && t.shape.size() <= xv.shape.size() &&
         t.shape.back() == xv.shape.back() && pv.value(product).shape == xv.shape;
}

// Adds a plan when `add` is x·cos + rotate_half(x)·sin (either order).
void match_rotary(const PatternView& pv, const ir::Node& add, std::vector<RotaryPlan>& plans) {
  if (!add.domain.empty() || add.op != "Add" || add.inputs.size() != 2) return;
  for (int side = 0; side < 2; ++side) {
    const ir::Node* mc = pv.producer(add.inputs[side], "Mul");
    const ir::Node* ms = pv.producer(add.inputs[1 - side], "Mul");
    if (!mc || !ms || mc->inputs.size() != 2 || ms->inputs.size() != 2) continue;
    for (int r = 0; r < 2; ++r) {
      const int x = rotate_half_source(pv, ms->inputs[r]);
      RotaryPlan p{.x = x,
                   .cos = PatternView::other_input(*mc, x),
                   .sin = ms->inputs[1 - r],
                   .out = add.outputs[0]};
      if (x < 0 || p.cos < 0 || p.cos == x) continue;
      if (!table_fits(pv, p.cos, x, mc->outputs[0]) || !table_fits(pv, p.sin, x, ms->outputs[0]) ||
          pv.value(p.out).shape != pv.value(x).shape)
        continue;
      plans.push_back(p);
      return;
    }
  }
}

// Replaces the producer of `out` by kiln.Rotary(x, cos, sin) with the given attributes.
bool replace_by_rotary(ir::Graph& g, int out, int x, int cos, int sin, int64_t rotary_dim,
                       int64_t interleaved) {
  const int pos = fused_node_index(g, out);
  if (pos < 0) return false;
  ir::Node fused{.name = g.nodes[static_cast<size_t>(pos)].name,
                 .op = "Rotary",
                 .domain = "kiln",
                 .inputs = {x, cos, sin},
                 .outputs = {out},
                 .attrs = {{"rotary_dim", rotary_dim}, {"interleaved", interleaved}}};
  return replace_if_agrees(g, pos, std::move(fused));
}

bool apply_rotary_plan(ir::Graph& g, const RotaryPlan& p) {
  return replace_by_rotary(g, p.out, p.x, p.cos, p.sin, 0, 0);
}

// Partial rotary (GPT-NeoX, Phi-3): Concat(kiln.Rotary(x[..., :R]), x[..., R:]) on the last axis
// is kiln.Rotary(x) with rotary_dim R, the tables R wide (R = D, x[..., D:] empty, included).
struct PartialPlan {
  int x = -1, cos = -1, sin = -1;
  int64_t rotary_dim = 0, interleaved = 0;
  int out = -1;
};

void match_partial(const PatternView& pv, const ir::Node& cat, std::vector<PartialPlan>& plans) {
  if (!cat.domain.empty() || cat.op != "Concat" || cat.inputs.size() != 2) return;
  const ir::Shape& ys = pv.value(cat.outputs[0]).shape;
  const auto rank = static_cast<int64_t>(ys.size());
  const int64_t axis = cat.attr_int("axis", 0);
  if (rank == 0 || (axis != -1 && axis != rank - 1)) return;
  const ir::Node* rot = pv.producer(cat.inputs[0]);
  if (rot == nullptr || rot->domain != "kiln" || rot->op != "Rotary" ||
      pv.users(cat.inputs[0]).size() != 1 || pv.is_graph_output(cat.inputs[0]))
    return;
  const ir::Shape& rs = pv.value(rot->inputs[0]).shape;
  if (rs.empty() || !rs.back().is_constant()) return;
  const int64_t r = rs.back().offset;
  const int64_t own = rot->attr_int("rotary_dim", 0);
  if (own != 0 && own != r) return;  // the rotary covers its whole slice
  int x1 = -1, x2 = -1;
  int64_t lo1 = 0, hi1 = 0, lo2 = 0, hi2 = 0;
  if (!last_axis_piece(pv, cat.inputs[1], x2, lo2, hi2, /*allow_empty=*/true)) return;
  if (!last_axis_piece(pv, rot->inputs[0], x1, lo1, hi1)) {
    // A rotary over the whole of x and an empty x[..., D:] (exports that keep the
    // concatenation when the rotary covers the head): the first slice was folded away.
    x1 = rot->inputs[0];
    lo1 = 0;
    hi1 = r;
  }
  if (x1 != x2) return;
  const ir::Shape& xs = pv.value(x1).shape;
  if (xs != ys || lo1 != 0 || hi1 != r || lo2 != r || hi2 != xs.back().offset) return;
  plans.push_back({.x = x1,
                   .cos = rot->inputs[1],
                   .sin = rot->inputs[2],
                   .rotary_dim = r,
                   .interleaved = rot->attr_int("interleaved", 0),
                   .out = cat.outputs[0]});
}

bool apply_partial_plan(ir::Graph& g, const PartialPlan& p) {
  return replace_by_rotary(g, p.out, p.x, p.cos, p.sin, p.rotary_dim, p.interleaved);
}

}  // namespace

Status fuse_rotary(ir::Graph& g) {
  KILN_RETURN_IF_ERROR(run_fusion<RotaryPlan>(g, match_rotary, apply_rotary_plan));
  return run_fusion<PartialPlan>(g, match_partial, apply_partial_plan);
}

}  // namespace kiln::compiler
