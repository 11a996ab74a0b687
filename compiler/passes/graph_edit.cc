#include "compiler/passes/graph_edit.h"

#include <fmt/format.h>

#include <set>

#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

namespace {

void renumber_producers(ir::Graph& g) {
  for (ir::Value& v : g.values)
    if (v.producer >= 0) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(i);
}

}  // namespace

int graph_new_value(ir::Graph& g, const std::string& hint, DType dtype, ir::Shape shape) {
  std::string name = hint;
  for (int k = 1; g.find_value(name) >= 0; ++k) name = fmt::format("{}_{}", hint, k);
  ir::Value v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::move(shape);
  return g.add_value(std::move(v));
}

int graph_new_constant(ir::Graph& g, const std::string& hint, DType dtype,
                       std::vector<int64_t> dims, const std::vector<double>& data) {
  ir::Shape shape;
  for (int64_t d : dims) shape.push_back(ir::DimExpr::constant(d));
  const int id = graph_new_value(g, hint, dtype, shape);
  RefTensor t;
  t.dtype = dtype;
  t.dims = dims;
  t.data = data;
  Result<std::vector<uint8_t>> bytes = reference_encode(t, dtype);
  g.values[id].constant =
      ir::Constant{std::move(dims), bytes.ok() ? *bytes : std::vector<uint8_t>{}};
  return id;
}

int graph_insert_node(ir::Graph& g, size_t pos, ir::Node n) {
  if (pos > g.nodes.size()) pos = g.nodes.size();
  g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(pos), std::move(n));
  renumber_producers(g);
  return static_cast<int>(pos);
}

void graph_replace_node(ir::Graph& g, size_t pos, ir::Node n) {
  for (int o : g.nodes[pos].outputs)
    if (o >= 0) g.values[o].producer = -1;
  g.nodes[pos] = std::move(n);
  for (int o : g.nodes[pos].outputs)
    if (o >= 0) g.values[o].producer = static_cast<int>(pos);
}

void graph_replace_uses(ir::Graph& g, int from, int to) {
  for (ir::Node& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
  for (int& o : g.outputs)
    if (o == from) o = to;
}

std::vector<std::vector<int>> graph_users(const ir::Graph& g) {
  std::vector<std::vector<int>> users(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) users[in].push_back(static_cast<int>(i));
  return users;
}

bool graph_is_same_dtype_cast(const ir::Graph& g, const ir::Node& n) {
  return n.op == "Cast" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         n.inputs[0] >= 0 && n.outputs[0] >= 0 &&
         g.values[n.inputs[0]].dtype == g.values[n.outputs[0]].dtype;
}

void graph_remove_dead(ir::Graph& g) {
  std::vector<char> used(g.values.size(), 0);
  for (int o : g.outputs) used[o] = 1;
  std::vector<char> keep(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const ir::Node& n = g.nodes[i];
    bool needed = false;
    for (int o : n.outputs) needed |= o >= 0 && used[o];
    if (!needed) continue;
    keep[i] = 1;
    for (int in : n.inputs)
      if (in >= 0) used[in] = 1;
  }
  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  renumber_producers(g);
}

std::string graph_unique_node_name(const ir::Graph& g, const std::string& hint) {
  std::set<std::string_view> used;
  for (const ir::Node& n : g.nodes) used.insert(n.name);
  std::string name = hint;
  for (int k = 1; used.contains(name); ++k) name = fmt::format("{}_{}", hint, k);
  return name;
}

}  // namespace kiln::compiler
