#include "compiler/ir/graph_infer.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "compiler/ir/op_registry.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

namespace {

// Folding runs the float64 reference; bigger results stay nodes (8 bytes per element here).
constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

int64_t node_opset(const ir::Graph& g, const ir::Node& n) {
  auto it = g.opsets.find(n.domain == "ai.onnx" ? std::string() : n.domain);
  return it == g.opsets.end() ? 1 : it->second;
}

bool is_int_dtype(DType d) {
  return d == DType::kI64 || d == DType::kI32 || d == DType::kI8 || d == DType::kU8 ||
         d == DType::kBool;
}

// Folds node `n` when every present input is constant: runs its reference kernel once.
Result<bool> fold_constant(ir::Graph& g, const ir::Node& n, const OpDef& def) {
  if (!def.foldable || !def.ref) return false;
  for (int id : n.inputs)
    if (id >= 0 && !g.values[id].constant) return false;
  for (int id : n.outputs) {
    const ir::Value& v = g.values[id];
    int64_t count = 1;
    for (const ir::DimExpr& d : v.shape) {
      if (!d.is_constant()) return false;
      if (__builtin_mul_overflow(count, d.offset, &count) || count > kMaxFoldElements) return false;
    }
  }
  std::vector<RefTensor> args(n.inputs.size());
  std::vector<const RefTensor*> in(n.inputs.size(), nullptr);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] < 0) continue;
    KILN_ASSIGN_OR_RETURN(args[i], reference_decode_constant(g.values[n.inputs[i]]));
    in[i] = &args[i];
  }
  KILN_ASSIGN_OR_RETURN(std::vector<RefTensor> out, def.ref(n, in));
  if (out.size() < n.outputs.size())
    return internal_error(
        fmt::format("folding computed {} outputs, the node has {}", out.size(), n.outputs.size()));
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    ir::Value& v = g.values[n.outputs[o]];
    std::vector<int64_t> dims;
    for (const ir::DimExpr& d : v.shape) dims.push_back(d.offset);
    if (out[o].dims != dims)
      return internal_error(fmt::format("folding output '{}' gave dims [{}], inference said {}",
                                        v.name, fmt::join(out[o].dims, ", "),
                                        ir::shape_to_string(v.shape)));
    KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, reference_encode(out[o], v.dtype));
    v.constant = ir::Constant{std::move(dims), std::move(bytes)};
    v.ints.reset();
  }
  return true;
}

// A symbolic integer result whose elements are all constant becomes real constant data.
Status settle_ints(ir::Value& v) {
  if (!v.ints || v.constant || !is_int_dtype(v.dtype)) return Status::ok_status();
  if (!std::all_of(v.ints->begin(), v.ints->end(),
                   [](const ir::DimExpr& d) { return d.is_constant(); }))
    return Status::ok_status();
  RefTensor t;
  t.dtype = v.dtype;
  if (!v.shape.empty()) t.dims = {static_cast<int64_t>(v.ints->size())};
  for (const ir::DimExpr& d : *v.ints) t.data.push_back(static_cast<double>(d.offset));
  KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, reference_encode(t, v.dtype));
  v.constant = ir::Constant{t.dims, std::move(bytes)};
  v.ints.reset();
  return Status::ok_status();
}

}  // namespace

Status graph_infer(ir::Graph& g, const InferOptions& opts) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    const std::string label = fmt::format("node '{}' ({})", n.name, n.qualified_op());
    if (n.op == "Constant" && n.domain.empty()) continue;  // imported as constant data
    const OpDef* def = op_find(n.domain, n.op);
    if (!def || !def->infer)
      return unimplemented(fmt::format("{}: kiln does not support this op", label));
    InferContext c(g, n, node_opset(g, n), opts.max_size);
    KILN_RETURN_IF_ERROR(def->infer(c));
    for (int id : n.outputs)
      if (g.values[id].dtype == DType::kUnspecified)
        return internal_error(
            fmt::format("{}: inference left output '{}' untyped", label, g.values[id].name));
    if (!opts.fold) continue;  // keep the node; its symbolic ints still inform later shapes
    Result<bool> folded = fold_constant(g, n, *def);
    if (!folded.ok()) return folded.status().with_context(label + ": constant folding");
    for (int id : n.outputs) KILN_RETURN_IF_ERROR(settle_ints(g.values[id]));
  }
  if (opts.fold) graph_drop_folded(g);
  return ir::graph_verify(g);
}

void graph_drop_folded(ir::Graph& g) {
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<ir::Node> kept;
  std::vector<int> new_index(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    const bool known = std::all_of(n.outputs.begin(), n.outputs.end(), [&](int id) {
      const ir::Value& v = g.values[id];
      return (v.constant || v.ints) && !outputs.contains(id);
    });
    if (known) {
      for (int id : n.outputs) g.values[id].producer = -1;
      continue;
    }
    for (int id : n.outputs) g.values[id].ints.reset();  // a kept node computes it at run time
    new_index[i] = static_cast<int>(kept.size());
    kept.push_back(n);
  }
  // Keep folded constant data only on values without a producer (graph_verify's rule); a
  // value still produced by a kept node keeps its node.
  for (ir::Value& v : g.values) {
    if (v.producer >= 0) {
      v.producer = new_index[v.producer];
      if (v.constant && kept[v.producer].op != "Constant") v.constant.reset();
    }
  }
  g.nodes = std::move(kept);
}

}  // namespace kiln::compiler
