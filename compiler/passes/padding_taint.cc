#include "compiler/passes/padding_taint.h"

#include <fmt/format.h>

#include <optional>
#include <set>

#include "compiler/ops/op_util.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

namespace {

// The integer contents of v when known at compile time (constant data or symbolic ints).
std::optional<std::vector<ir::DimExpr>> known_ints(const ir::Graph& g, int v) {
  if (v < 0) return std::nullopt;
  return reference_known_ints(g.values[static_cast<size_t>(v)]);
}

bool known_scalar(const ir::Graph& g, int v, const ir::DimExpr& want) {
  std::optional<std::vector<ir::DimExpr>> k = known_ints(g, v);
  return k && k->size() == 1 && k->front() == want;
}

bool is_runtime(const ir::Graph& g, int v) { return !known_ints(g, v).has_value(); }

int64_t norm_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// The S-dependent length of `data`'s axis, or nullopt when the axis is constant or out of range.
std::optional<ir::DimExpr> size_axis(const ir::Graph& g, int data, int64_t axis) {
  const ir::Shape& s = g.values[static_cast<size_t>(data)].shape;
  const int64_t a = norm_axis(axis, s.size());
  if (a < 0 || a >= static_cast<int64_t>(s.size()) || s[static_cast<size_t>(a)].is_constant())
    return std::nullopt;
  return s[static_cast<size_t>(a)];
}

// The value holding component m of index tuples of `tuple` elements (GatherND's last axis): the
// indices themselves when a tuple has one element, else, recursively, the piece of a last-axis
// Concat that holds it; -1 when the graph does not show it.
int tuple_component(const ir::Graph& g, int idx, int64_t m, int64_t tuple) {
  if (tuple == 1) return idx;
  const ir::Value& v = g.values[static_cast<size_t>(idx)];
  if (v.producer < 0) return -1;
  const ir::Node& p = g.nodes[static_cast<size_t>(v.producer)];
  if (!p.domain.empty() || p.op != "Concat" ||
      norm_axis(p.attr_int("axis", 0), v.shape.size()) != static_cast<int64_t>(v.shape.size()) - 1)
    return -1;
  int64_t at = 0;
  for (int in : p.inputs) {
    const ir::DimExpr w = g.values[static_cast<size_t>(in)].shape.back();
    if (!w.is_constant()) return -1;
    if (m < at + w.offset) return tuple_component(g, in, m - at, w.offset);
    at += w.offset;
  }
  return -1;
}

// Why node `n` makes real rows read padding, or empty.
std::string source_reason(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) return {};
  const int data = n.inputs[0];
  if ((n.op == "Gather" || n.op == "GatherElements") && n.inputs.size() == 2) {
    const int idx = n.inputs[1];
    std::optional<ir::DimExpr> len = size_axis(g, data, n.attr_int("axis", 0));
    if (!len || !is_runtime(g, idx) || indices_within_real(g, idx, *len)) return {};
    return fmt::format(
        "{} '{}' gathers along an axis of {} elements with run-time indices '{}', "
        "which may point at padding rows",
        n.op, n.name, len->to_string(), g.values[static_cast<size_t>(idx)].name);
  }
  if (n.op == "GatherND" && n.inputs.size() == 2 && is_runtime(g, n.inputs[1])) {
    const ir::Shape& is = g.values[static_cast<size_t>(n.inputs[1])].shape;
    if (is.empty() || !is.back().is_constant() || n.attr_int("batch_dims", 0) != 0) return {};
    const int64_t tuple = is.back().offset;
    for (int64_t m = 0; m < tuple; ++m) {
      std::optional<ir::DimExpr> len = size_axis(g, data, m);
      if (!len) continue;
      const int part = tuple_component(g, n.inputs[1], m, tuple);
      if (part >= 0 && (!is_runtime(g, part) || indices_within_real(g, part, *len))) continue;
      return fmt::format(
          "GatherND '{}' indexes axis {} of {} elements with run-time indices "
          "(tuple component {} of '{}'), which may point at padding rows",
          n.name, m, len->to_string(), m, g.values[static_cast<size_t>(n.inputs[1])].name);
    }
    return {};
  }
  if (n.op == "CumSum" && n.attr_int("reverse", 0) != 0 && n.inputs.size() == 2) {
    std::optional<std::vector<ir::DimExpr>> axis = known_ints(g, n.inputs[1]);
    if (!axis || axis->size() != 1 || !axis->front().is_constant()) return {};
    if (std::optional<ir::DimExpr> len = size_axis(g, data, axis->front().offset))
      return fmt::format(
          "reverse CumSum '{}' sums each real row with the rows after it, padding "
          "included, along an axis of {} elements",
          n.name, len->to_string());
  }
  return {};
}

// A position table (passes/size_tables.h): Slice(T, [0], [L], [axis]) of a constant integer
// table T whose every element in row j along `axis` is in [0, j] (Range(0, S, 1) computed at
// compile time, and what moves its elements): real row j < L(s) <= len(s) holds indices < len(s).
bool table_rows_within_real(const ir::Graph& g, const ir::Node& slice, const ir::DimExpr& len) {
  if (slice.inputs.size() != 3 && slice.inputs.size() != 4) return false;  // steps: 1
  const ir::Value& table = g.values[static_cast<size_t>(slice.inputs[0])];
  if (!table.constant || !known_scalar(g, slice.inputs[1], ir::DimExpr::constant(0))) return false;
  std::optional<std::vector<ir::DimExpr>> ends = known_ints(g, slice.inputs[2]);
  if (!ends || ends->size() != 1) return false;
  Result<RefTensor> t = reference_decode_constant(table);
  if (!t.ok() || t->dims.empty()) return false;
  int64_t axis = 0;
  if (slice.inputs.size() == 4) {
    std::optional<std::vector<ir::DimExpr>> a = known_ints(g, slice.inputs[3]);
    if (!a || a->size() != 1 || !a->front().is_constant()) return false;
    axis = norm_axis(a->front().offset, t->dims.size());
  }
  if (axis < 0 || axis >= static_cast<int64_t>(t->dims.size())) return false;
  int64_t inner = 1;
  for (size_t k = static_cast<size_t>(axis) + 1; k < t->dims.size(); ++k) inner *= t->dims[k];
  const int64_t rows = t->dims[static_cast<size_t>(axis)];
  if (inner <= 0 || rows <= 0) return false;
  for (size_t i = 0; i < t->data.size(); ++i) {
    const auto j = static_cast<double>((static_cast<int64_t>(i) / inner) % rows);
    if (!(t->data[i] >= 0 && t->data[i] <= j)) return false;
  }
  const ir::DimExpr& l = ends->front();
  return l.coef <= len.coef && l.eval(1) <= len.eval(1);
}

}  // namespace

bool indices_within_real(const ir::Graph& g, int indices, const ir::DimExpr& axis_len) {
  // Ops that move elements (values unchanged) without changing which positions are real.
  static const std::set<std::string> kMovers = {"Cast",   "Unsqueeze", "Squeeze",
                                                "Expand", "Transpose", "Identity"};
  int v = indices;
  for (int steps = 0; steps < 64 && v >= 0; ++steps) {
    const ir::Value& val = g.values[static_cast<size_t>(v)];
    if (!dtype_is_integer(val.dtype) || val.producer < 0) return false;
    const ir::Node& p = g.nodes[static_cast<size_t>(val.producer)];
    if (!p.domain.empty() || p.inputs.empty()) return false;
    if (p.op == "Range") {
      // Range(0, L, 1): real position j holds j < L(s) <= len(s) when L <= len at every S >= 1.
      std::optional<std::vector<ir::DimExpr>> limit = known_ints(g, p.inputs[1]);
      if (p.inputs.size() != 3 || !known_scalar(g, p.inputs[0], ir::DimExpr::constant(0)) ||
          !known_scalar(g, p.inputs[2], ir::DimExpr::constant(1)) || !limit || limit->size() != 1)
        return false;
      const ir::DimExpr& l = limit->front();
      return l.coef <= axis_len.coef && l.eval(1) <= axis_len.eval(1);
    }
    if (p.op == "Slice") return table_rows_within_real(g, p, axis_len);
    if (!kMovers.count(p.op)) return false;
    if (p.op == "Cast" && !dtype_is_integer(g.values[static_cast<size_t>(p.inputs[0])].dtype))
      return false;
    v = p.inputs[0];
  }
  return false;
}

PaddingTaint padding_taint(const ir::Graph& g) {
  PaddingTaint t;
  t.via.assign(g.values.size(), -1);
  t.why.assign(g.values.size(), {});
  for (const ir::Node& n : g.nodes) {  // nodes are in topological order
    int from = -1;
    for (int in : n.inputs)
      if (in >= 0 && t.tainted(in)) {
        from = in;
        break;
      }
    std::string why = from < 0 ? source_reason(g, n) : std::string();
    for (int out : n.outputs) {
      if (out < 0) continue;
      if (from >= 0) t.via[static_cast<size_t>(out)] = from;
      if (!why.empty()) {
        t.via[static_cast<size_t>(out)] = -2;
        t.why[static_cast<size_t>(out)] = why;
      }
    }
  }
  return t;
}

Status padding_taint_check(const ir::Graph& g) {
  const PaddingTaint t = padding_taint(g);
  for (int out : g.outputs) {
    if (!t.tainted(out)) continue;
    std::vector<std::string> path;  // output's producer first
    int v = out;
    for (;;) {
      path.push_back(g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(v)].producer)].name);
      if (t.via[static_cast<size_t>(v)] < 0) break;
      v = t.via[static_cast<size_t>(v)];
    }
    std::string chain;
    for (auto it = path.rbegin(); it != path.rend(); ++it)
      chain += (chain.empty() ? "'" : " → '") + *it + "'";
    return invalid_argument(fmt::format(
        "output '{}': a request padded to a captured size would put padding into its real rows: "
        "{}; path: {} → output. Compile with compilation.mode NONE and cudagraph_capture_sizes "
        "[] (every run at its exact size), or choose another size_dim",
        g.values[static_cast<size_t>(out)].name, t.why[static_cast<size_t>(v)], chain));
  }
  return Status::ok_status();
}

}  // namespace kiln::compiler
