#include "compiler/passes/size_tables.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

bool depends_on_size(const std::vector<DimExpr>& v) {
  return std::any_of(v.begin(), v.end(), [](const DimExpr& d) { return !d.is_constant(); });
}

// A symbolic shape value whose contents change with S (e.g. [2, S, 64]).
bool size_ints(const ir::Value& v) { return v.ints && depends_on_size(*v.ints); }

// Input k of `n` holds only constants that do not move with S.
bool fixed_input(const ir::Graph& g, const ir::Node& n, size_t k) {
  if (k >= n.inputs.size() || n.inputs[k] < 0) return true;
  const ir::Value& v = g.values[n.inputs[k]];
  return !size_ints(v);
}

// The first axis of `s` whose extent depends on S; -1 when none.
int size_axis(const ir::Shape& s) {
  for (size_t a = 0; a < s.size(); ++a)
    if (!s[a].is_constant()) return static_cast<int>(a);
  return -1;
}

int64_t const_product(const ir::Shape& s, int end) {
  int64_t p = 1;
  for (int a = 0; a < end; ++a) p *= s[a].offset;
  return p;
}

// Reshape keeps first rows first when both shapes have at most one size axis, the same extent
// there and the same number of elements before it.
bool reshape_keeps_prefix(const ir::Shape& in, const ir::Shape& out) {
  const int ai = size_axis(in), ao = size_axis(out);
  if (ai < 0 && ao < 0) return true;
  if (ai < 0 || ao < 0 || !(in[ai] == out[ao])) return false;
  for (size_t a = ai + 1; a < in.size(); ++a)
    if (!in[a].is_constant()) return false;
  for (size_t a = ao + 1; a < out.size(); ++a)
    if (!out[a].is_constant()) return false;
  return const_product(in, ai) == const_product(out, ao);
}

// Whether node `n`, all of whose inputs depend on S alone, computes values whose smaller-size
// forms are the first rows of their max-size forms (the file comment's list). S may enter as
// data nowhere: only at the inputs that give extents.
bool keeps_prefix(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.size() != 1) return false;
  // The inputs that may carry S as an extent, per op.
  std::vector<size_t> extents;
  const std::string& op = n.op;
  const ir::Shape& out = g.values[n.outputs[0]].shape;
  auto in_shape = [&](size_t k) -> const ir::Shape& { return g.values[n.inputs[k]].shape; };
  if (onnx_elementwise_op(op) || op == "Transpose" || op == "Unsqueeze" || op == "Squeeze" ||
      op == "ConstantOfShape" || op == "Expand" || op == "Trilu") {
    if (op == "ConstantOfShape") extents = {0};
    if (op == "Expand") extents = {1};
  } else if (op == "Reshape") {
    if (!reshape_keeps_prefix(in_shape(0), out)) return false;
    extents = {1};
  } else if (op == "Range") {
    // From a constant start by a positive step: element i is start + i·step at every size.
    if (n.inputs.size() != 3 || n.inputs[2] < 0) return false;
    auto step = reference_known_ints(g.values[n.inputs[2]]);
    if (!step || step->size() != 1 || !(*step)[0].is_constant() || (*step)[0].offset <= 0)
      return false;
    extents = {1};
  } else if (op == "MatMul") {
    const ir::Shape& a = in_shape(0);
    if (a.empty() || !a.back().is_constant()) return false;
  } else if (op == "Concat") {
    const auto axis = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(out.size()));
    if (!axis || !out[*axis].is_constant()) return false;
  } else if (op == "Gather" || op == "GatherElements") {
    const ir::Shape& data = in_shape(0);
    const auto axis = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(data.size()));
    if (!axis || !data[*axis].is_constant()) return false;
  } else if (op == "Slice") {
    // Starts constant and not negative, unit steps; ends may be S.
    if (n.inputs.size() < 3 || n.inputs[1] < 0) return false;
    auto starts = reference_known_ints(g.values[n.inputs[1]]);
    if (!starts || depends_on_size(*starts)) return false;
    for (const DimExpr& s : *starts)
      if (s.offset < 0) return false;
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      auto steps = reference_known_ints(g.values[n.inputs[4]]);
      if (!steps) return false;
      for (const DimExpr& s : *steps)
        if (!(s == DimExpr::constant(1))) return false;
    }
    extents = {2};
  } else {
    return false;
  }
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (std::find(extents.begin(), extents.end(), k) == extents.end() && !fixed_input(g, n, k))
      return false;
  return true;
}

// A value that can be a table: one axis whose extent c·S + d grows with S, extents of 1 before
// it (so its first rows are the first elements of the buffer; with `broadcast`, other extents
// there are allowed, the table holding the first of those equal blocks), a dtype the tables
// store, and not too large at max_size.
bool table_layout(const ir::Value& v, int64_t max_size, bool broadcast) {
  const int a = size_axis(v.shape);
  if (a < 0 || v.shape[a].coef <= 0 || dtype_size(v.dtype) == 0) return false;
  for (int k = 0; k < a; ++k)
    if (!(v.shape[k] == DimExpr::constant(1)) && !broadcast) return false;
  int64_t n = v.shape[a].eval(max_size);
  for (size_t k = a + 1; k < v.shape.size(); ++k) {
    if (!v.shape[k].is_constant()) return false;
    n *= v.shape[k].offset;
  }
  return n > 0 && n * static_cast<int64_t>(dtype_size(v.dtype)) <= kMaxTableBytes;
}

// Every reader of `v` is an elementwise op (broadcasting its inputs) whose output has v's shape
// and that reads a run-time value of that shape too: v may then be replaced by one block along
// its leading axes, when all blocks are equal, and each reader's output keeps its shape.
bool broadcast_readers(const ir::Graph& g, int v, const std::vector<int>& readers,
                       const std::vector<bool>& size_only) {
  if (readers.empty()) return false;
  const ir::Shape& shape = g.values[v].shape;
  for (int u : readers) {
    const ir::Node& n = g.nodes[u];
    if (!n.domain.empty() || !onnx_elementwise_op(n.op) || n.op == "Cast" || n.op == "Identity" ||
        n.outputs.size() != 1 || !(g.values[n.outputs[0]].shape == shape))
      return false;
    bool full = false;
    for (int w : n.inputs) full |= w >= 0 && w != v && !size_only[w] && g.values[w].shape == shape;
    if (!full) return false;
  }
  return true;
}

// The leading blocks of `t` (one per index of the axes before `axis`) are all equal.
bool blocks_equal(const RefTensor& t, int axis) {
  int64_t blocks = 1;
  for (int k = 0; k < axis; ++k) blocks *= t.dims[k];
  const auto block = static_cast<int64_t>(t.data.size()) / std::max<int64_t>(blocks, 1);
  for (int64_t b = 1; b < blocks; ++b)
    if (!std::equal(t.data.begin(), t.data.begin() + block, t.data.begin() + b * block))
      return false;
  return true;
}

bool gather_op(const std::string& op) {
  return op == "Gather" || op == "GatherElements" || op == "GatherND";
}

// The first block of `t` along the axes before `axis` (t itself when they are all 1).
RefTensor first_block(const RefTensor& t, int axis) {
  RefTensor b = t;
  int64_t n = 1;
  for (size_t k = axis; k < t.dims.size(); ++k) n *= t.dims[k];
  for (int k = 0; k < axis; ++k) b.dims[k] = 1;
  b.data.resize(static_cast<size_t>(n));
  return b;
}

// `small` (v at size s) is the first rows of `full` (v at max_size), block by block.
bool prefix_matches(const ir::Value& v, const RefTensor& full, const RefTensor& small, int64_t s) {
  const int a = size_axis(v.shape);
  if (small.dims.size() != full.dims.size() || small.dims[a] != v.shape[a].eval(s)) return false;
  int64_t blocks = 1, inner = 1;
  for (int k = 0; k < a; ++k) blocks *= full.dims[k];
  for (size_t k = a + 1; k < full.dims.size(); ++k) inner *= full.dims[k];
  const int64_t rows = small.dims[a], full_rows = full.dims[a];
  if (static_cast<int64_t>(small.data.size()) != blocks * rows * inner) return false;
  for (int64_t b = 0; b < blocks; ++b)
    if (!std::equal(small.data.begin() + b * rows * inner,
                    small.data.begin() + (b + 1) * rows * inner,
                    full.data.begin() + b * full_rows * inner))
      return false;
  return true;
}

}  // namespace

bool value_known(const ir::Value& v) { return v.constant || (v.producer < 0 && v.ints); }

std::vector<int> table_values(const ir::Graph& g, const std::vector<bool>& sources_only,
                              const std::function<bool(int)>& computed,
                              const std::function<bool(int)>& fits) {
  std::vector<int> work;
  for (const ir::Node& n : g.nodes) {
    bool runtime = false;
    for (int o : n.outputs) runtime |= o >= 0 && !sources_only[o];
    if (!runtime) continue;
    for (int v : n.inputs)
      if (computed(v)) work.push_back(v);
  }
  std::vector<bool> seen(g.values.size(), false);
  std::vector<int> tables;
  while (!work.empty()) {
    const int v = work.back();
    work.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    if (fits(v)) {
      tables.push_back(v);
      continue;
    }
    for (int w : g.nodes[g.values[v].producer].inputs)
      if (computed(w)) work.push_back(w);
  }
  std::sort(tables.begin(), tables.end());
  return tables;
}

Result<int> fold_size_tables(ir::Graph& g, int64_t max_size) {
  if (max_size < 1) return 0;
  // Values that depend on S alone, in topological order.
  std::vector<bool> size_only(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) size_only[v] = value_known(g.values[v]);
  for (const ir::Node& n : g.nodes) {
    bool all = !n.inputs.empty();
    for (int v : n.inputs) all &= v < 0 || size_only[v];
    if (all && keeps_prefix(g, n))
      for (int o : n.outputs) size_only[o] = true;
  }
  // The values that stay read at run time: those of run-time nodes and graph outputs. Each
  // computed one becomes a table, or, when it cannot, its producer stays and its inputs are
  // considered in turn.
  const auto users = graph_users(g);
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[v] = true;
  auto computed = [&](int v) { return v >= 0 && size_only[v] && !value_known(g.values[v]); };
  auto runtime_node = [&](int u) {
    for (int o : g.nodes[u].outputs)
      if (o >= 0 && !size_only[o]) return true;
    return false;
  };
  const std::vector<int> tables = table_values(g, size_only, computed, [&](int v) {
    const ir::Value& val = g.values[v];
    bool lookup = false;
    for (int u : users[v])
      lookup |= gather_op(g.nodes[u].op) && g.nodes[u].inputs[0] == v && runtime_node(u);
    return (table_layout(val, max_size, false) ||
            (table_layout(val, max_size, true) && broadcast_readers(g, v, users[v], size_only))) &&
           !is_output[v] && !(lookup && dtype_is_float(val.dtype));
  });
  if (tables.empty()) return 0;

  // Evaluate at max_size; check a few smaller sizes against the first rows.
  auto full = reference_run_values(g, max_size, {}, tables);
  if (!full.ok()) return 0;  // a value the reference cannot compute stays a run-time value
  std::vector<bool> drop(g.values.size(), false);
  std::set<int64_t> checks = {1, 2, 3, max_size / 2 + 1, max_size - 1};
  for (int64_t s : checks) {
    if (s < 1 || s >= max_size) continue;
    auto small = reference_run_values(g, s, {}, tables);
    if (!small.ok()) return 0;
    for (int v : tables)
      if (!prefix_matches(g.values[v], full->at(v), small->at(v), s)) drop[v] = true;
  }

  int made = 0;
  for (int v : tables) {
    const ir::Value val = g.values[v];
    const int axis = size_axis(val.shape);
    if (drop[v] || !blocks_equal(full->at(v), axis)) continue;
    const RefTensor t = first_block(full->at(v), axis);
    ir::Shape shape = val.shape;
    for (int k = 0; k < axis; ++k) shape[k] = DimExpr::constant(1);
    const int table = graph_new_constant(g, val.name + "/table", val.dtype, t.dims, t.data);
    const int starts = graph_new_constant(g, val.name + "/table_starts", DType::kI64, {1}, {0.0});
    const int axes =
        graph_new_constant(g, val.name + "/table_axes", DType::kI64, {1}, {double(axis)});
    const int ends =
        graph_new_value(g, val.name + "/table_ends", DType::kI64, {DimExpr::constant(1)});
    g.values[ends].ints = std::vector<DimExpr>{val.shape[axis]};
    const int rows = graph_new_value(g, val.name + "/rows", val.dtype, shape);
    ir::Node slice;
    slice.name = graph_unique_node_name(g, val.name + "/size_table");
    slice.op = "Slice";
    slice.inputs = {table, starts, ends, axes};
    slice.outputs = {rows};
    graph_insert_node(g, 0, slice);
    graph_replace_uses(g, v, rows);
    ++made;
  }
  graph_remove_dead(g);
  KILN_RETURN_IF_ERROR(ir::graph_verify(g));
  return made;
}

}  // namespace kiln::compiler
