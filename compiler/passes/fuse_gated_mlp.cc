#include "compiler/passes/fuse_gated_mlp.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/passes/fuse_driver.h"

namespace kiln::compiler {
namespace {

struct GatedMlp {
  int out = -1;  // the final Mul's output
  // Two projections: wg and wu, [K, N] each. One projection cut in halves: wg = wu, [K, 2N],
  // its first N columns the gate's.
  int x = -1, wg = -1, wu = -1;
  std::string act;   // kiln.GatedMatMul's `activation`
  std::string name;  // the gate MatMul's node name
};

// v is read once (by a node) and is not a graph output.
bool read_once(const PatternView& pv, int v) {
  return pv.users(v).size() == 1 && !pv.is_graph_output(v);
}

// The gate product g that `act_out` applies an activation to, setting `act`; -1 when `act_out`
// is not one of the forms in the header.
int gate_of(const PatternView& pv, int act_out, std::string& act) {
  const ir::Node* n = pv.producer(act_out);
  if (n == nullptr || !n->domain.empty()) return -1;
  if ((n->op == "Relu" || n->op == "Gelu") && n->inputs.size() == 1) {
    act = n->op == "Relu"                                   ? "relu"
          : n->attr_string("approximate", "none") == "tanh" ? "gelu_tanh"
                                                            : "gelu";
    return read_once(pv, n->inputs[0]) ? n->inputs[0] : -1;
  }
  if (n->op != "Mul" || n->inputs.size() != 2) return -1;
  for (int side = 0; side < 2; ++side) {
    const int g = n->inputs[static_cast<size_t>(side)];
    const int s = n->inputs[static_cast<size_t>(1 - side)];
    const ir::Node* sig = pv.producer(s, "Sigmoid");
    if (sig == nullptr || sig->inputs.size() != 1 || sig->inputs[0] != g || !read_once(pv, s))
      continue;
    // g is read by the Sigmoid and this Mul, nothing else.
    if (pv.users(g).size() != 2 || pv.is_graph_output(g)) return -1;
    act = "silu";
    return g;
  }
  return -1;
}

// The MatMul computing v from x and a 2-D constant weight only it reads; nullptr otherwise.
const ir::Node* projection(const PatternView& pv, int v) {
  const ir::Node* mm = pv.producer(v, "MatMul");
  if (mm == nullptr || mm->inputs.size() != 2) return nullptr;
  const ir::Value& w = pv.value(mm->inputs[1]);
  if (!w.constant || w.shape.size() != 2 || !w.shape[0].is_constant() ||
      !w.shape[1].is_constant() || !read_once(pv, mm->inputs[1]))
    return nullptr;
  return mm;
}

// g and u as the halves of one projection's output (a Split in two or two Slices of the last
// axis, g the first half) that nothing else reads; nullptr otherwise.
const ir::Node* halves(const PatternView& pv, int g, int u) {
  int xg = -1, xu = -1;
  int64_t lo_g = 0, hi_g = 0, lo_u = 0, hi_u = 0;
  if (!last_axis_piece(pv, g, xg, lo_g, hi_g) || !last_axis_piece(pv, u, xu, lo_u, hi_u) ||
      xg != xu)
    return nullptr;
  const ir::Node* mm = projection(pv, xg);
  if (mm == nullptr) return nullptr;
  const int64_t n2 = pv.value(mm->inputs[1]).shape[1].offset;
  if (n2 % 2 != 0 || lo_g != 0 || hi_g != n2 / 2 || lo_u != n2 / 2 || hi_u != n2) return nullptr;
  // The product is read by the Split (once) or the two Slices, nothing else.
  const size_t readers = pv.producer(g) == pv.producer(u) ? 1 : 2;
  if (pv.users(xg).size() != readers || pv.is_graph_output(xg)) return nullptr;
  return mm;
}

void match(const PatternView& pv, const ir::Node& n, std::vector<GatedMlp>& plans) {
  if (!n.domain.empty() || n.op != "Mul" || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      n.inputs[0] == n.inputs[1])
    return;
  for (int side = 0; side < 2; ++side) {
    const int act_out = n.inputs[static_cast<size_t>(side)];
    const int up = n.inputs[static_cast<size_t>(1 - side)];
    GatedMlp p;
    if (!read_once(pv, act_out) || !read_once(pv, up)) continue;
    const int gate = gate_of(pv, act_out, p.act);
    if (gate < 0) continue;
    const ir::Node* mg = projection(pv, gate);
    const ir::Node* mu = projection(pv, up);
    if (mg == nullptr && mu == nullptr) mg = mu = halves(pv, gate, up);  // one, cut in two
    if (mg == nullptr || mu == nullptr || mg->inputs[0] != mu->inputs[0]) continue;
    const ir::Value &wg = pv.value(mg->inputs[1]), &wu = pv.value(mu->inputs[1]);
    if (mg != mu && (wg.dtype != wu.dtype || wg.shape != wu.shape)) continue;
    p.out = n.outputs[0];
    p.x = mg->inputs[0];
    p.wg = mg->inputs[1];
    p.wu = mu->inputs[1];
    p.name = mg->name;
    plans.push_back(std::move(p));
    return;
  }
}

// The [K, 2N] weight with the columns interleaved, (g[k, 0], u[k, 0], g[k, 1], ...), from the
// gate's and the up projection's [K, N] weights, or from one [K, 2N] weight whose first N
// columns are the gate's (g = u).
ir::Constant interleave_columns(const ir::Value& g, const ir::Value& u) {
  const bool one = &g == &u;
  const auto k = static_cast<size_t>(g.shape[0].offset);
  const auto n = static_cast<size_t>(g.shape[1].offset) / (one ? 2 : 1);
  const size_t elem = dtype_size(g.dtype), row = one ? 2 * n : n;  // elements per source row
  ir::Constant out;
  out.dims = {static_cast<int64_t>(k), static_cast<int64_t>(2 * n)};
  out.bytes.resize(2 * k * n * elem);
  const uint8_t* pg = g.constant->bytes.data();
  const uint8_t* pu = one ? pg + n * elem : u.constant->bytes.data();
  for (size_t r = 0; r < k; ++r)
    for (size_t c = 0; c < n; ++c) {
      uint8_t* dst = out.bytes.data() + (r * 2 * n + 2 * c) * elem;
      std::copy_n(pg + (r * row + c) * elem, elem, dst);
      std::copy_n(pu + (r * row + c) * elem, elem, dst + elem);
    }
  return out;
}

bool apply(ir::Graph& g, GatedMlp p) {
  const int pos = fused_node_index(g, p.out);
  if (pos < 0) return false;
  const ir::Value &wg = g.values[p.wg], &wu = g.values[p.wu];
  const size_t bytes =
      static_cast<size_t>(wg.shape[0].offset * wg.shape[1].offset) * dtype_size(wg.dtype);
  if (wg.constant->bytes.size() != bytes || wu.constant->bytes.size() != bytes) return false;
  const int64_t n = p.wg == p.wu ? wg.shape[1].offset / 2 : wg.shape[1].offset;
  // ".../mlp/gate_proj/MatMul" (or ".../mlp/gate_up_proj/MatMul") → ".../mlp/gate_up"
  std::string base = p.name;
  for (int up = 0; up < 2 && base.rfind('/') != std::string::npos && base.rfind('/') > 0; ++up)
    base.resize(base.rfind('/'));
  base += "/gate_up";
  ir::Constant w = interleave_columns(wg, wu);
  ir::Shape shape = {wg.shape[0], ir::DimExpr::constant(2 * n)};
  const int wv = graph_new_value(g, base + "/weight", wg.dtype, std::move(shape));
  g.values[wv].constant = std::move(w);
  ir::Node fused;
  fused.name = graph_unique_node_name(g, base);
  fused.domain = "kiln";
  fused.op = "GatedMatMul";
  fused.inputs = {p.x, wv};
  fused.outputs = {p.out};
  fused.attrs["activation"] = p.act;
  return replace_if_agrees(g, pos, std::move(fused));
}

}  // namespace

Status fuse_gated_mlp(ir::Graph& g) { return run_fusion<GatedMlp>(g, match, apply); }

}  // namespace kiln::compiler
