#include "compiler/passes/paged_rotary.h"

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/passes/graph_edit.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {
namespace {

bool is_kiln(const ir::Node* n, std::string_view op) {
  return n != nullptr && n->domain == "kiln" && n->op == op;
}

bool is_one(const ir::DimExpr& d) { return d == ir::DimExpr::constant(1); }

// The dims of `s` that are not 1, in order.
ir::Shape non_one(const ir::Shape& s) {
  ir::Shape out;
  for (const ir::DimExpr& d : s)
    if (!is_one(d)) out.push_back(d);
  return out;
}

// A view that keeps every row of the last axis whole and every token where it is among the other
// non-1 dims: a Transpose that leaves the last axis last, or a Reshape/Squeeze/Unsqueeze that
// only adds or drops dims of 1.
bool row_keeping_view(const PatternView& pv, const ir::Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1) return false;
  const ir::Shape& in = pv.value(n.inputs[0]).shape;
  const ir::Shape& out = pv.value(n.outputs[0]).shape;
  if (in.empty() || out.empty() || in.back() != out.back()) return false;
  if (n.op == "Transpose") {
    const std::vector<int64_t> perm = n.attr_ints("perm");
    return !perm.empty() && perm.back() == static_cast<int64_t>(in.size()) - 1;
  }
  if (n.op == "Reshape" || n.op == "Squeeze" || n.op == "Unsqueeze")
    return non_one(in) == non_one(out);
  return false;
}

// Where attention input `v` comes from a kiln.Rotary through row-keeping views that nothing else
// reads: the Rotary's node index and the chain's first view (-1: the Rotary feeds the attention).
struct RotarySource {
  int rotary = -1;
  int first_view = -1;
};

std::optional<RotarySource> rotary_source(const PatternView& pv, int v) {
  RotarySource src;
  while (true) {
    if (pv.users(v).size() != 1 || pv.is_graph_output(v)) return std::nullopt;
    const ir::Node* p = pv.producer(v);
    if (p == nullptr) return std::nullopt;
    if (is_kiln(p, "Rotary")) {
      src.rotary = pv.producer_index(v);
      return src;
    }
    if (!row_keeping_view(pv, *p)) return std::nullopt;
    src.first_view = pv.producer_index(v);
    v = p->inputs[0];
  }
}

// The one lead axis of X that holds the tokens (T, the step's size), and cos/sin of one row per
// token along it (or one row for all): then token t of the attention reads row t.
bool tables_per_token(const ir::Shape& x, const ir::Shape& table, const ir::DimExpr& tokens) {
  if (table.empty() || table.size() > x.size()) return false;
  int token_axes = 0;
  for (size_t a = 0; a + 1 < x.size(); ++a) token_axes += x[a] == tokens;
  if (token_axes != 1) return false;
  for (size_t j = 0; j + 1 < table.size(); ++j) {
    const size_t a = x.size() - table.size() + j;
    if (!is_one(table[j]) && (table[j] != tokens || x[a] != tokens)) return false;
  }
  return true;
}

// a and b hold the same data: one value, equal constants, or the same op with the same attributes
// over inputs that hold the same data (the tables of Q's and K's Rotary, legalized separately).
bool same_data(const ir::Graph& g, int a, int b, int depth = 8) {
  if (a == b) return true;
  if (a < 0 || b < 0 || depth == 0) return false;
  const ir::Value& va = g.values[static_cast<size_t>(a)];
  const ir::Value& vb = g.values[static_cast<size_t>(b)];
  if (va.dtype != vb.dtype || va.shape != vb.shape) return false;
  if (va.constant || vb.constant)
    return va.constant && vb.constant && va.constant->bytes == vb.constant->bytes;
  if (va.producer < 0 || vb.producer < 0) return false;
  const ir::Node& na = g.nodes[static_cast<size_t>(va.producer)];
  const ir::Node& nb = g.nodes[static_cast<size_t>(vb.producer)];
  if (na.op != nb.op || na.domain != nb.domain || na.attrs != nb.attrs ||
      na.inputs.size() != nb.inputs.size() || na.outputs.size() != nb.outputs.size())
    return false;
  for (size_t o = 0; o < na.outputs.size(); ++o)
    if ((na.outputs[o] == a) != (nb.outputs[o] == b)) return false;
  for (size_t i = 0; i < na.inputs.size(); ++i)
    if (!same_data(g, na.inputs[i], nb.inputs[i], depth - 1)) return false;
  return true;
}

struct Fold {
  int attention = -1;
  RotarySource q, k;
  int x_q = -1, x_k = -1, cos = -1, sin = -1;
  int64_t rotary_dim = 0, interleaved = 0, width = 0;
};

std::vector<Fold> find_folds(const ir::Graph& g) {
  std::vector<Fold> folds;
  const PatternView pv(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.domain != "kiln" || n.op != "PagedAttention" || n.inputs.size() != 3) continue;
    const std::optional<RotarySource> q = rotary_source(pv, n.inputs[0]);
    const std::optional<RotarySource> k = rotary_source(pv, n.inputs[1]);
    if (!q || !k || q->rotary == k->rotary) continue;
    const ir::Node& rq = g.nodes[static_cast<size_t>(q->rotary)];
    const ir::Node& rk = g.nodes[static_cast<size_t>(k->rotary)];
    if (!same_data(g, rq.inputs[1], rk.inputs[1]) || !same_data(g, rq.inputs[2], rk.inputs[2]))
      continue;
    const int64_t d = g.values[n.inputs[0]].shape.back().offset;
    const auto dim = [d](const ir::Node& r) {
      const int64_t v = r.attr_int("rotary_dim", 0);
      return v == 0 ? d : v;
    };
    if (dim(rq) != dim(rk) || rq.attr_int("interleaved", 0) != rk.attr_int("interleaved", 0))
      continue;
    const ir::DimExpr tokens = g.values[n.inputs[0]].shape[2];
    const ir::Shape& table = g.values[rq.inputs[1]].shape;
    if (!tables_per_token(g.values[rq.inputs[0]].shape, table, tokens) ||
        !tables_per_token(g.values[rk.inputs[0]].shape, table, tokens) ||
        !table.back().is_constant())
      continue;
    folds.push_back({.attention = static_cast<int>(i),
                     .q = *q,
                     .k = *k,
                     .x_q = rq.inputs[0],
                     .x_k = rk.inputs[0],
                     .cos = rq.inputs[1],
                     .sin = rq.inputs[2],
                     .rotary_dim = dim(rq),
                     .interleaved = rq.attr_int("interleaved", 0),
                     .width = table.back().offset});
  }
  return folds;
}

// The table as [1, 1, rows, W] (rows: T or 1), a Reshape inserted before node `pos`.
int table_as_rows(ir::Graph& g, int table, int64_t width, size_t pos) {
  ir::Shape rows = {ir::DimExpr::constant(1), ir::DimExpr::constant(1), ir::DimExpr::constant(1),
                    ir::DimExpr::constant(width)};
  for (const ir::DimExpr& d : g.values[table].shape)
    if (!d.is_constant()) rows[2] = d;
  const std::string base = g.values[table].name + "/rows";
  const int shape = graph_new_constant(g, base + "/shape", DType::kI64, {4},
                                       {1, 1, -1, static_cast<double>(width)});
  const int out = graph_new_value(g, base, g.values[table].dtype, rows);
  ir::Node n;
  n.name = graph_unique_node_name(g, base);
  n.op = "Reshape";
  n.inputs = {table, shape};
  n.outputs = {out};
  graph_insert_node(g, pos, std::move(n));
  return out;
}

}  // namespace

Status fold_paged_rotary(ir::Graph& g) {
  const std::vector<Fold> folds = find_folds(g);
  if (folds.empty()) return Status::ok_status();
  // Attention of every layer reads the same tables, but each layer's Rotary reads its own copy
  // (an exporter's per-layer Unsqueeze of one cos/sin): the folds whose tables hold the same data
  // share the first one's [1, 1, T, W] views, so the tables are reshaped (and cast to the compute
  // dtype, later) once per step, not once per layer.
  std::vector<size_t> first(folds.size());
  for (size_t i = 0; i < folds.size(); ++i) {
    first[i] = i;
    for (size_t j = 0; j < i; ++j)
      if (first[j] == j && folds[j].width == folds[i].width &&
          same_data(g, folds[j].cos, folds[i].cos) && same_data(g, folds[j].sin, folds[i].sin)) {
        first[i] = j;
        break;
      }
  }
  // The attention nodes are found again by their output (node indexes move as nodes go in).
  std::vector<int> outputs;
  for (const Fold& f : folds)
    outputs.push_back(g.nodes[static_cast<size_t>(f.attention)].outputs[0]);
  // Views first, from the last attention back: nothing is inserted yet, the indexes hold.
  for (auto f = folds.rbegin(); f != folds.rend(); ++f) {
    // The views (or the attention) read X where they read the Rotary's output.
    for (const auto& [src, x, input] : {std::tuple{f->q, f->x_q, 0}, std::tuple{f->k, f->x_k, 1}}) {
      if (src.first_view >= 0)
        g.nodes[static_cast<size_t>(src.first_view)].inputs[0] = x;
      else
        g.nodes[static_cast<size_t>(f->attention)].inputs[static_cast<size_t>(input)] = x;
    }
  }
  // Then the tables: one pair of views per group, before the group's first attention.
  std::vector<std::pair<int, int>> rows(folds.size(), {-1, -1});
  for (size_t i = 0; i < folds.size(); ++i) {
    const Fold& f = folds[i];
    if (first[i] == i) {
      const auto pos = static_cast<size_t>(g.values[static_cast<size_t>(outputs[i])].producer);
      rows[i].first = table_as_rows(g, f.cos, f.width, pos);
      rows[i].second = table_as_rows(g, f.sin, f.width, pos + 1);
    }
    ir::Node& n = g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(outputs[i])].producer)];
    n.inputs.push_back(rows[first[i]].first);
    n.inputs.push_back(rows[first[i]].second);
    n.attrs["rotary_dim"] = f.rotary_dim;
    n.attrs["interleaved"] = f.interleaved;
  }
  graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
