#include "compiler/ir/op_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

std::string node_label(const ir::Node& n) {
  return fmt::format("node '{}' ({})", n.name, n.qualified_op());
}

std::vector<OpDef> build_table() {
  std::vector<OpDef> defs;
  ops_register_elementwise(defs);
  ops_register_reduce(defs);
  ops_register_norm(defs);
  ops_register_matmul(defs);
  ops_register_layout(defs);
  ops_register_gather(defs);
  ops_register_shape(defs);
  ops_register_attention(defs);
  ops_register_rotary(defs);
  ops_register_contrib(defs);
  std::sort(defs.begin(), defs.end(), [](const OpDef& a, const OpDef& b) {
    return std::tie(a.domain, a.op) < std::tie(b.domain, b.op);
  });
  return defs;
}

const std::vector<OpDef>& table() {
  static const std::vector<OpDef> defs = build_table();
  return defs;
}

}  // namespace

const OpDef* op_find(std::string_view domain, std::string_view op) {
  if (domain == "ai.onnx") domain = kDomainOnnx;
  for (const OpDef& d : table())
    if (d.domain == domain && d.op == op) return &d;
  return nullptr;
}

std::vector<const OpDef*> op_all() {
  std::vector<const OpDef*> out;
  for (const OpDef& d : table()) out.push_back(&d);
  return out;
}

std::optional<std::vector<ir::DimExpr>> InferContext::input_ints(size_t i) const {
  if (!has_input(i)) return std::nullopt;
  const ir::Value& v = input(i);
  if (v.ints) return v.ints;
  if (!v.constant || v.shape.size() > 1) return std::nullopt;
  if (v.dtype != DType::kI64 && v.dtype != DType::kI32 && v.dtype != DType::kBool &&
      v.dtype != DType::kI8 && v.dtype != DType::kU8)
    return std::nullopt;
  std::optional<RefTensor> t = input_constant(i);
  if (!t) return std::nullopt;
  std::vector<ir::DimExpr> out;
  out.reserve(t->data.size());
  for (double x : t->data) out.push_back(ir::DimExpr::constant(ref_to_int(x)));  // saturating
  return out;
}

std::optional<RefTensor> InferContext::input_constant(size_t i) const {
  if (!has_input(i) || !input(i).constant) return std::nullopt;
  Result<RefTensor> t = reference_decode_constant(input(i));
  if (!t.ok()) return std::nullopt;
  return std::move(t).value();
}

Status InferContext::require(size_t min_in, size_t max_in, size_t min_out, size_t max_out) const {
  auto range = [](size_t lo, size_t hi) {
    return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (n_.inputs.size() > max_in)
    return error(
        fmt::format("has {} inputs, expected {}", n_.inputs.size(), range(min_in, max_in)));
  for (size_t i = 0; i < min_in; ++i)
    if (!has_input(i)) return error(fmt::format("required input {} is missing", i));
  if (n_.outputs.size() < min_out || n_.outputs.size() > max_out)
    return error(
        fmt::format("has {} outputs, expected {}", n_.outputs.size(), range(min_out, max_out)));
  for (size_t i = 0; i < n_.inputs.size(); ++i)
    if (has_input(i) && input(i).dtype == DType::kUnspecified)
      return error(fmt::format("input '{}' has no dtype", input(i).name));
  return Status::ok_status();
}

void InferContext::set_output(size_t k, DType dtype, ir::Shape shape,
                              std::optional<std::vector<ir::DimExpr>> ints) {
  ir::Value& v = g_.values[n_.outputs[k]];
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.ints = std::move(ints);
}

Status InferContext::error(std::string_view msg) const {
  return invalid_argument(fmt::format("{}: {}", node_label(n_), msg));
}

Status InferContext::unsupported(std::string_view msg) const {
  return unimplemented(fmt::format("{}: {}", node_label(n_), msg));
}

}  // namespace kiln::compiler
