#include "compiler/passes/fuse_qkv.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/passes/graph_edit.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {
namespace {

// One projection feeding the attention: out = MatMul(a, w) (+ bias).
struct Projection {
  int matmul = -1;  // node index
  int a = -1, w = -1, bias = -1;
  int out = -1;  // the value the views start from: the MatMul's output, or the Add's
  int64_t n = 0;
};

bool is_view(const ir::Node& n) {
  return n.domain.empty() && (n.op == "Reshape" || n.op == "Transpose" || n.op == "Squeeze" ||
                              n.op == "Unsqueeze" || n.op == "Flatten");
}

// Read once, by a node, and not a graph output.
bool read_once(const PatternView& pv, int v) {
  return pv.users(v).size() == 1 && !pv.is_graph_output(v);
}

// A constant only one node reads.
bool own_constant(const PatternView& pv, int v) {
  return v >= 0 && pv.value(v).constant.has_value() && read_once(pv, v);
}

// A rotary embedding of the projection (its X; the cos/sin tables stay as they are).
bool is_rotary(const ir::Node& n) { return n.domain == "kiln" && n.op == "Rotary"; }

std::optional<Projection> projection_of(const PatternView& pv, int v) {
  // Back through the views and a rotary embedding.
  while (const ir::Node* p = pv.producer(v)) {
    if (!(is_view(*p) || is_rotary(*p)) || !read_once(pv, v)) break;
    v = p->inputs[0];
  }
  if (!read_once(pv, v)) return std::nullopt;
  Projection pr;
  pr.out = v;
  const ir::Node* node = pv.producer(v);
  if (node != nullptr && node->domain.empty() && node->op == "Add" && node->inputs.size() == 2) {
    for (int side = 0; side < 2; ++side) {
      const ir::Node* mm = pv.producer(node->inputs[side], "MatMul");
      if (mm == nullptr || !read_once(pv, node->inputs[side])) continue;
      pr.bias = node->inputs[1 - side];
      node = mm;
      break;
    }
    if (pr.bias < 0) return std::nullopt;
  }
  if (node == nullptr || !node->domain.empty() || node->op != "MatMul") return std::nullopt;
  pr.matmul = pv.producer_index(node->outputs[0]);
  pr.a = node->inputs[0];
  pr.w = node->inputs[1];
  const ir::Value& w = pv.value(pr.w);
  if (!own_constant(pv, pr.w) || w.shape.size() != 2 || !w.shape[0].is_constant() ||
      !w.shape[1].is_constant())
    return std::nullopt;
  pr.n = w.shape[1].offset;
  if (pr.bias >= 0) {
    const ir::Value& b = pv.value(pr.bias);
    // A bias may be shared (the importer merges equal initializers: zero biases): the fused
    // one copies it, and the original stays for its other readers.
    if (!b.constant || b.dtype != w.dtype || b.shape != ir::Shape{ir::DimExpr::constant(pr.n)})
      return std::nullopt;
  }
  return pr;
}

std::vector<std::vector<Projection>> find_groups(const ir::Graph& g) {
  std::vector<std::vector<Projection>> groups;
  const PatternView pv(g);
  for (const ir::Node& n : g.nodes) {
    if (n.domain != "kiln" || (n.op != "Attention" && n.op != "PagedAttention") ||
        n.inputs.size() < 3)
      continue;
    std::vector<Projection> group;
    for (int i = 0; i < 3; ++i) {
      std::optional<Projection> p = projection_of(pv, n.inputs[static_cast<size_t>(i)]);
      if (!p) continue;
      const bool same =
          group.empty() || (p->a == group[0].a && (p->bias >= 0) == (group[0].bias >= 0) &&
                            pv.value(p->w).dtype == pv.value(group[0].w).dtype &&
                            pv.value(p->w).shape[0] == pv.value(group[0].w).shape[0]);
      const bool fresh = std::none_of(group.begin(), group.end(),
                                      [&](const Projection& q) { return q.matmul == p->matmul; });
      if (same && fresh) group.push_back(*p);
    }
    if (group.size() >= 2) groups.push_back(std::move(group));
  }
  return groups;
}

// The constants side by side along their last axis: [R, N1] ... → [R, N1 + ...] (R = 1 for
// the 1-D biases).
ir::Constant concat_columns(const ir::Graph& g, const std::vector<int>& parts, size_t elem) {
  const auto rows = static_cast<size_t>(
      g.values[parts[0]].shape.size() == 2 ? g.values[parts[0]].shape[0].offset : 1);
  ir::Constant out;
  int64_t total = 0;
  for (int p : parts) total += g.values[p].shape.back().offset;
  out.dims = g.values[parts[0]].shape.size() == 2
                 ? std::vector<int64_t>{static_cast<int64_t>(rows), total}
                 : std::vector<int64_t>{total};
  out.bytes.reserve(rows * static_cast<size_t>(total) * elem);
  for (size_t r = 0; r < rows; ++r)
    for (int p : parts) {
      const size_t row_bytes = static_cast<size_t>(g.values[p].shape.back().offset) * elem;
      const uint8_t* src = g.values[p].constant->bytes.data() + r * row_bytes;
      out.bytes.insert(out.bytes.end(), src, src + row_bytes);
    }
  return out;
}

int new_constant(ir::Graph& g, const std::string& hint, DType dtype, ir::Constant c) {
  ir::Shape shape;
  for (int64_t d : c.dims) shape.push_back(ir::DimExpr::constant(d));
  const int id = graph_new_value(g, hint, dtype, std::move(shape));
  g.values[id].constant = std::move(c);
  return id;
}

ir::Node onnx_node(const ir::Graph& g, const std::string& name, const std::string& op,
                   std::vector<int> inputs, std::vector<int> outputs) {
  ir::Node n;
  n.name = graph_unique_node_name(g, name);
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

int first_matmul(const std::vector<Projection>& group) {
  int first = group[0].matmul;
  for (const Projection& p : group) first = std::min(first, p.matmul);
  return first;
}

// Rewrites one group: the fused MatMul (+ Add) and the Split go where the first projection's
// MatMul was; the projections' outputs are replaced by the Split's.
void apply_group(ir::Graph& g, const std::vector<Projection>& group) {
  const DType wt = g.values[group[0].w].dtype;
  const size_t elem = dtype_size(wt);
  std::vector<int> ws, bs;
  int64_t total = 0;
  for (const Projection& p : group) {
    ws.push_back(p.w);
    if (p.bias >= 0) bs.push_back(p.bias);
    total += p.n;
  }
  // ".../self_attn/q_proj/MatMul" → ".../self_attn/qkv"
  std::string base = g.nodes[static_cast<size_t>(first_matmul(group))].name;
  for (int up = 0; up < 2 && base.rfind('/') != std::string::npos && base.rfind('/') > 0; ++up)
    base.resize(base.rfind('/'));
  base += "/qkv";
  const int w = new_constant(g, base + "/weight", wt, concat_columns(g, ws, elem));
  // The projections' output before any view: A's shape with the last dim N.
  ir::Shape out_shape = g.values[group[0].a].shape;
  out_shape.back() = ir::DimExpr::constant(total);
  const DType yt = g.values[group[0].out].dtype;
  auto pos = static_cast<size_t>(first_matmul(group));
  int y = graph_new_value(g, base, yt, out_shape);
  std::vector<ir::Node> nodes;
  nodes.push_back(onnx_node(g, base + "/MatMul", "MatMul", {group[0].a, w}, {y}));
  if (!bs.empty()) {
    const int b = new_constant(g, base + "/bias", wt, concat_columns(g, bs, elem));
    const int yb = graph_new_value(g, base + "/biased", yt, out_shape);
    nodes.push_back(onnx_node(g, base + "/Add", "Add", {y, b}, {yb}));
    y = yb;
  }
  std::vector<int64_t> sizes;
  std::vector<int> outs;
  for (const Projection& p : group) {
    sizes.push_back(p.n);
    ir::Shape s = out_shape;
    s.back() = ir::DimExpr::constant(p.n);
    outs.push_back(graph_new_value(g, base + "/part", yt, s));
  }
  std::vector<double> size_data(sizes.begin(), sizes.end());
  const int split_sizes = graph_new_constant(g, base + "/sizes", DType::kI64,
                                             {static_cast<int64_t>(sizes.size())}, size_data);
  nodes.push_back(onnx_node(g, base + "/Split", "Split", {y, split_sizes}, outs));
  nodes.back().attrs["axis"] = int64_t{-1};
  for (size_t i = 0; i < group.size(); ++i) graph_replace_uses(g, group[i].out, outs[i]);
  for (ir::Node& n : nodes) graph_insert_node(g, pos++, std::move(n));
}

}  // namespace

Status fuse_qkv(ir::Graph& g) {
  const std::vector<std::vector<Projection>> groups = find_groups(g);
  if (groups.empty()) return Status::ok_status();
  // Node indexes shift as nodes go in: rewrite from the last group back.
  std::vector<std::vector<Projection>> order = groups;
  std::sort(order.begin(), order.end(),
            [](const auto& x, const auto& y) { return first_matmul(x) > first_matmul(y); });
  for (const auto& group : order) apply_group(g, group);
  graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
