#include "compiler/ir/ir.h"

#include <fmt/format.h>

#include <set>

namespace kiln::ir {

std::string DimExpr::to_string() const {
  if (coef == 0) return std::to_string(offset);
  std::string s;
  if (coef == 1) {
    s = "S";
  } else if (coef == -1) {
    s = "-S";
  } else {
    s = std::to_string(coef) + "*S";
  }
  if (offset > 0) s += "+" + std::to_string(offset);
  if (offset < 0) s += std::to_string(offset);  // carries its '-'
  return s;
}

std::optional<DimExpr> dim_mul(const DimExpr& a, const DimExpr& b) {
  if (!a.is_constant() && !b.is_constant()) return std::nullopt;
  const DimExpr& c = a.is_constant() ? a : b;  // the constant factor
  const DimExpr& e = a.is_constant() ? b : a;
  DimExpr r;
  if (__builtin_mul_overflow(e.coef, c.offset, &r.coef)) return std::nullopt;
  if (__builtin_mul_overflow(e.offset, c.offset, &r.offset)) return std::nullopt;
  return r;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i].to_string();
  }
  return s + "]";
}

std::optional<DimExpr> shape_numel(const Shape& shape) {
  DimExpr n = DimExpr::constant(1);
  for (const DimExpr& d : shape) {
    auto m = dim_mul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return fallback;
}

double Node::attr_float(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<double>(&it->second)) return *v;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return {};
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<std::string>(&it->second)) return *v;
  return fallback;
}

int Graph::find_value(std::string_view name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int>(i);
  return -1;
}

int Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

namespace {

std::string node_label(const Graph& g, size_t i) {
  return fmt::format("node {} '{}' ({})", i, g.nodes[i].name, g.nodes[i].op);
}

Status verify_value(const Value& v, int id) {
  if (v.name.empty()) return invalid_argument(fmt::format("value {} has no name", id));
  if (v.dtype == DType::kUnspecified || dtype_size(v.dtype) == 0)
    return invalid_argument(fmt::format("value '{}' has no dtype", v.name));
  if (!v.constant) return Status::ok_status();
  const Constant& c = *v.constant;
  if (c.dims.size() != v.shape.size())
    return invalid_argument(fmt::format("constant '{}' has {} dims but shape {}", v.name,
                                        c.dims.size(), shape_to_string(v.shape)));
  int64_t numel = 1;
  for (size_t a = 0; a < c.dims.size(); ++a) {
    if (c.dims[a] < 0 || v.shape[a] != DimExpr::constant(c.dims[a]))
      return invalid_argument(fmt::format("constant '{}' has dims that disagree with shape {}",
                                          v.name, shape_to_string(v.shape)));
    if (__builtin_mul_overflow(numel, c.dims[a], &numel))
      return invalid_argument(fmt::format("constant '{}': element count overflows", v.name));
  }
  const auto want = static_cast<uint64_t>(numel) * dtype_size(v.dtype);
  if (c.bytes.size() != want)
    return invalid_argument(fmt::format("constant '{}' holds {} bytes, its shape {} needs {}",
                                        v.name, c.bytes.size(), shape_to_string(v.shape), want));
  return Status::ok_status();
}

}  // namespace

Status graph_verify(const Graph& g) {
  const int nv = static_cast<int>(g.values.size());
  std::set<std::string_view> names;
  for (int i = 0; i < nv; ++i) {
    KILN_RETURN_IF_ERROR(verify_value(g.values[i], i));
    if (!names.insert(g.values[i].name).second)
      return invalid_argument(fmt::format("value name '{}' is used twice", g.values[i].name));
    const int p = g.values[i].producer;
    if (p < -1 || p >= static_cast<int>(g.nodes.size()))
      return invalid_argument(
          fmt::format("value '{}' has producer {} out of range", g.values[i].name, p));
  }
  // available[v]: the value exists at the current point of the topological walk.
  std::vector<char> available(nv, 0), is_input(nv, 0);
  for (int id : g.inputs) {
    if (id < 0 || id >= nv)
      return invalid_argument(fmt::format("graph input id {} out of range", id));
    const Value& v = g.values[id];
    if (v.producer != -1)
      return invalid_argument(
          fmt::format("graph input '{}' is produced by node {}", v.name, v.producer));
    if (v.constant) return invalid_argument(fmt::format("graph input '{}' is a constant", v.name));
    if (is_input[id])
      return invalid_argument(fmt::format("graph input '{}' is listed twice", v.name));
    is_input[id] = available[id] = 1;
  }
  for (int i = 0; i < nv; ++i) {
    const Value& v = g.values[i];
    if (v.ints && !v.constant && v.producer == -1 && !is_input[i]) {
      if (v.shape.size() > 1 ||
          (v.shape.size() == 1 &&
           v.shape[0] != DimExpr::constant(static_cast<int64_t>(v.ints->size()))))
        return invalid_argument(fmt::format("symbolic constant '{}' has {} elements but shape {}",
                                            v.name, v.ints->size(), shape_to_string(v.shape)));
      available[i] = 1;  // a symbolic constant: evaluated at the size
      continue;
    }
    if (!v.constant) continue;
    if (v.producer == -1) {
      available[i] = 1;
    } else if (g.nodes[v.producer].op != "Constant") {
      return invalid_argument(fmt::format("value '{}' holds constant data but is produced by {}",
                                          v.name, node_label(g, v.producer)));
    }
  }

  std::vector<int> produced_by(nv, -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    for (int id : node.inputs) {
      if (id == -1) continue;
      if (id < -1 || id >= nv)
        return invalid_argument(fmt::format("{}: input id {} out of range", node_label(g, n), id));
      if (!available[id]) {
        const char* why = produced_by[id] == -1 && g.values[id].producer > static_cast<int>(n)
                              ? "is produced later (not in topological order)"
                              : "is not a graph input, constant or earlier node output";
        return invalid_argument(
            fmt::format("{}: input '{}' {}", node_label(g, n), g.values[id].name, why));
      }
    }
    if (node.outputs.empty())
      return invalid_argument(fmt::format("{} has no outputs", node_label(g, n)));
    for (int id : node.outputs) {
      if (id < 0 || id >= nv)
        return invalid_argument(fmt::format("{}: output id {} out of range", node_label(g, n), id));
      const Value& v = g.values[id];
      if (is_input[id] || (v.constant && v.producer == -1) || produced_by[id] != -1)
        return invalid_argument(
            fmt::format("{}: output '{}' already has a producer", node_label(g, n), v.name));
      if (v.producer != static_cast<int>(n))
        return invalid_argument(fmt::format("{}: output '{}' records producer {}", node_label(g, n),
                                            v.name, v.producer));
      produced_by[id] = static_cast<int>(n);
      available[id] = 1;
    }
  }
  for (int i = 0; i < nv; ++i)
    if (g.values[i].producer != -1 && produced_by[i] != g.values[i].producer)
      return invalid_argument(fmt::format("value '{}' records producer {} that does not output it",
                                          g.values[i].name, g.values[i].producer));
  for (int id : g.outputs) {
    if (id < 0 || id >= nv)
      return invalid_argument(fmt::format("graph output id {} out of range", id));
    if (!available[id])
      return invalid_argument(
          fmt::format("graph output '{}' is produced by nothing", g.values[id].name));
  }
  return Status::ok_status();
}

namespace {

std::string compact_shape(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + s[i].to_string();
  return r + "]";
}

std::string type_text(const Value& v) {
  return std::string(dtype_name(v.dtype)) + compact_shape(v.shape);
}

std::string attr_text(const AttrValue& a) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(const std::string& v) const { return fmt::format("\"{}\"", v); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<double>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
  };
  return std::visit(Visitor{}, a);
}

std::string value_ref(const Graph& g, int id) {
  if (id < 0 || id >= static_cast<int>(g.values.size())) return id == -1 ? "none" : "%?";
  return "%" + g.values[id].name;
}

}  // namespace

std::string graph_to_text(const Graph& g) {
  std::string out = fmt::format("graph {}\n", g.name);
  for (int id : g.inputs)
    out += fmt::format("input {}:{}\n", value_ref(g, id), type_text(g.values[id]));
  for (const Value& v : g.values) {
    if (v.constant && v.producer == -1)
      out += fmt::format("%{} = const {}\n", v.name, type_text(v));
    if (!v.constant && v.producer == -1 && v.ints) {
      std::vector<std::string> e;
      for (const DimExpr& d : *v.ints) e.push_back(d.to_string());
      out += fmt::format("%{} = ints {} [{}]\n", v.name, type_text(v), fmt::join(e, ","));
    }
  }
  for (const Node& n : g.nodes) {
    std::vector<std::string> outs, ins, attrs;
    for (int id : n.outputs) {
      bool ok = id >= 0 && id < static_cast<int>(g.values.size());
      outs.push_back(ok ? value_ref(g, id) + ":" + type_text(g.values[id]) : value_ref(g, id));
    }
    for (int id : n.inputs) ins.push_back(value_ref(g, id));
    for (const auto& [k, v] : n.attrs) attrs.push_back(k + "=" + attr_text(v));  // map: sorted
    out +=
        fmt::format("{} = {}({})", fmt::join(outs, ", "), n.qualified_op(), fmt::join(ins, ", "));
    if (!attrs.empty()) out += fmt::format(" {{{}}}", fmt::join(attrs, ", "));
    out += "\n";
  }
  std::vector<std::string> outs;
  for (int id : g.outputs) outs.push_back(value_ref(g, id));
  out += fmt::format("output {}\n", fmt::join(outs, ", "));
  return out;
}

}  // namespace kiln::ir
