#include "compiler/passes/position_tables.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/passes/kv_paged.h"
#include "compiler/passes/size_tables.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

// Whether node `n` keeps tokens apart: row t of each output is computed from row t of its
// token-axis inputs (the file comment's list).
bool per_token(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1) return false;
  const std::string& op = n.op;
  if (onnx_elementwise_op(op) || op == "Transpose" || op == "Unsqueeze" || op == "Squeeze" ||
      op == "Reshape" || op == "Expand" || op == "Concat")
    return true;
  if (op == "MatMul") {
    const ir::Shape& a = g.values[n.inputs[0]].shape;
    return !a.empty() && a.back().is_constant();
  }
  return false;
}

// The token axis of a table-shaped value: the one axis of extent `tokens`, extents of 1 before
// it, constants after; -1 when `s` is not such a shape.
int token_axis(const ir::Shape& s, const DimExpr& tokens) {
  int axis = -1;
  for (size_t a = 0; a < s.size(); ++a) {
    if (s[a].is_constant()) {
      if (axis < 0 && s[a].offset != 1) return -1;
      continue;
    }
    if (axis >= 0 || !(s[a] == tokens)) return -1;
    axis = static_cast<int>(a);
  }
  return axis;
}

// Elements per token of a value of shape `s` with token axis `axis`.
int64_t row_elements(const ir::Shape& s, int axis) {
  int64_t n = 1;
  for (size_t a = static_cast<size_t>(axis) + 1; a < s.size(); ++a) n *= s[a].offset;
  return n;
}

RefTensor positions_tensor(DType dtype, const std::vector<int64_t>& p) {
  RefTensor t;
  t.dtype = dtype;
  t.dims = {1, static_cast<int64_t>(p.size())};
  t.data.assign(p.begin(), p.end());
  return t;
}

// Positions to check the tables with: out of order, repeated, the first and the last.
std::vector<std::vector<int64_t>> check_positions(int64_t positions) {
  std::vector<std::vector<int64_t>> out = {{positions - 1}};
  std::vector<int64_t> mixed;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 6; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    mixed.push_back(static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(positions)));
  }
  mixed.push_back(0);
  mixed.push_back(mixed.front());
  out.push_back(mixed);
  return out;
}

// Row t of `small` (the value at positions p) is row p[t] of `full` (at positions 0 .. P - 1).
bool rows_match(const RefTensor& full, const RefTensor& small, const std::vector<int64_t>& p,
                int64_t row) {
  if (static_cast<int64_t>(small.data.size()) != static_cast<int64_t>(p.size()) * row) return false;
  for (size_t t = 0; t < p.size(); ++t)
    if (!std::equal(small.data.begin() + static_cast<int64_t>(t) * row,
                    small.data.begin() + static_cast<int64_t>(t + 1) * row,
                    full.data.begin() + p[t] * row))
      return false;
  return true;
}

}  // namespace

Result<int> fold_position_tables(ir::Graph& g, int64_t positions) {
  const int pos = g.find_value(kPositionIds);
  if (pos < 0 || positions < 1 || g.values[pos].producer >= 0 ||
      !dtype_is_integer(g.values[pos].dtype) || g.values[pos].shape.size() != 2)
    return 0;
  const DimExpr tokens = g.values[pos].shape[1];
  // Values computed from the positions and constants alone, in topological order.
  std::vector<bool> derived(g.values.size(), false);
  derived[pos] = true;
  for (const ir::Node& n : g.nodes) {
    bool any = false, all = true;
    for (int v : n.inputs) {
      if (v < 0 || value_known(g.values[v])) continue;
      any |= derived[v];
      all &= derived[v];
    }
    if (any && all && per_token(g, n))
      for (int o : n.outputs) derived[o] = true;
  }
  // The values read at run time, as in size_tables: each becomes a table, or its producer stays
  // and its inputs are considered in turn.
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[v] = true;
  const std::vector<int> tables = table_values(
      g, derived, [&](int v) { return v >= 0 && v != pos && derived[v]; },
      [&](int v) {
        const ir::Value& val = g.values[v];
        const int axis = token_axis(val.shape, tokens);
        return axis >= 0 && !is_output[v] && dtype_size(val.dtype) > 0 &&
               positions * row_elements(val.shape, axis) *
                       static_cast<int64_t>(dtype_size(val.dtype)) <=
                   kMaxTableBytes;
      });
  if (tables.empty()) return 0;

  // Every position, then the checks: the same rows in another order, at other step sizes.
  const DType pt = g.values[pos].dtype;
  std::vector<int64_t> every(static_cast<size_t>(positions));
  for (int64_t i = 0; i < positions; ++i) every[static_cast<size_t>(i)] = i;
  auto full =
      reference_run_values(g, positions, {{kPositionIds, positions_tensor(pt, every)}}, tables);
  if (!full.ok()) return 0;  // a value the reference cannot compute stays a run-time value
  std::vector<bool> drop(g.values.size(), false);
  for (const std::vector<int64_t>& p : check_positions(positions)) {
    auto small = reference_run_values(g, static_cast<int64_t>(p.size()),
                                      {{kPositionIds, positions_tensor(pt, p)}}, tables);
    if (!small.ok()) return 0;
    for (int v : tables) {
      const ir::Shape& s = g.values[v].shape;
      if (!rows_match(full->at(v), small->at(v), p, row_elements(s, token_axis(s, tokens))))
        drop[v] = true;
    }
  }

  // Each table [P, row dims...], gathered with the flat positions [T]; a Reshape (a view) gives
  // the value its own shape back.
  int flat = -1;
  int made = 0;
  for (int v : tables) {
    if (drop[v]) continue;
    const ir::Value val = g.values[v];
    const int axis = token_axis(val.shape, tokens);
    std::vector<int64_t> dims = {positions};
    ir::Shape rows = {tokens};
    for (size_t a = static_cast<size_t>(axis) + 1; a < val.shape.size(); ++a) {
      dims.push_back(val.shape[a].offset);
      rows.push_back(val.shape[a]);
    }
    if (flat < 0) {
      std::map<DType, int> made;
      flat = flat_positions(g, pos, pt, made);
    }
    const int table =
        graph_new_constant(g, val.name + "/position_table", val.dtype, dims, full->at(v).data);
    const bool same_shape = rows == val.shape;
    const int gathered = same_shape ? graph_new_value(g, val.name + "/rows", val.dtype, val.shape)
                                    : graph_new_value(g, val.name + "/rows_flat", val.dtype, rows);
    size_t at = static_cast<size_t>(g.values[flat].producer) + 1;
    at = static_cast<size_t>(
             graph_insert_node(g, at,
                               {.name = graph_unique_node_name(g, val.name + "/position_table"),
                                .op = "Gather",
                                .domain = "",
                                .inputs = {table, flat},
                                .outputs = {gathered},
                                .attrs = {{"axis", int64_t{0}}}})) +
         1;
    int out = gathered;
    if (!same_shape) {
      std::vector<double> target;
      for (const DimExpr& d : val.shape) target.push_back(d.is_constant() ? double(d.offset) : -1);
      const int shape = graph_new_constant(g, val.name + "/rows_shape", DType::kI64,
                                           {static_cast<int64_t>(target.size())}, target);
      out = graph_new_value(g, val.name + "/rows", val.dtype, val.shape);
      graph_insert_node(g, at,
                        {.name = graph_unique_node_name(g, val.name + "/rows"),
                         .op = "Reshape",
                         .domain = "",
                         .inputs = {gathered, shape},
                         .outputs = {out},
                         .attrs = {}});
    }
    graph_replace_uses(g, v, out);
    ++made;
  }
  graph_remove_dead(g);
  KILN_RETURN_IF_ERROR(ir::graph_verify(g));
  return made;
}

}  // namespace kiln::compiler
