#include "compiler/ir_shape_inference.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>

namespace kiln::ir {

namespace {

// The dtypes the math ops are implemented for. f16/bf16 arrive with the precision pass.
constexpr std::array<DType, 1> kMathDTypes = {DType::kF32};

std::string where(const Node& n) { return fmt::format("node '{}' ({})", n.name, n.op); }

Status check_arity(const Node& n, size_t min_in, size_t max_in, size_t min_out, size_t max_out) {
  if (n.inputs.size() < min_in || n.inputs.size() > max_in)
    return invalid_argument(fmt::format(
        "{}: has {} inputs, expected {}", where(n), n.inputs.size(),
        min_in == max_in ? fmt::format("{}", min_in) : fmt::format("{} to {}", min_in, max_in)));
  if (n.outputs.size() < min_out || n.outputs.size() > max_out)
    return invalid_argument(
        fmt::format("{}: has {} outputs, expected {}", where(n), n.outputs.size(),
                    min_out == max_out ? fmt::format("{}", min_out)
                                       : fmt::format("{} to {}", min_out, max_out)));
  for (int id : n.outputs)
    if (id < 0) return invalid_argument(fmt::format("{}: has an omitted output", where(n)));
  return Status::ok_status();
}

bool has_input(const Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] >= 0; }

// The i-th input, which must be present and typed.
Result<const Value*> input(const Graph& g, const Node& n, size_t i) {
  if (!has_input(n, i))
    return invalid_argument(fmt::format("{}: required input {} is missing", where(n), i));
  const int id = n.inputs[i];
  if (id >= static_cast<int>(g.values.size()))
    return invalid_argument(fmt::format("{}: input id {} out of range", where(n), id));
  const Value& v = g.values[id];
  if (v.dtype == DType::kUnspecified)
    return invalid_argument(fmt::format("{}: input '{}' has no dtype", where(n), v.name));
  return &v;
}

// Checks that every present input is a supported math dtype and that they all agree.
Status check_math_dtypes(const Graph& g, const Node& n) {
  const Value* first = nullptr;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!has_input(n, i)) continue;
    KILN_ASSIGN_OR_RETURN(const Value* v, input(g, n, i));
    if (std::find(kMathDTypes.begin(), kMathDTypes.end(), v->dtype) == kMathDTypes.end())
      return unimplemented(fmt::format("{}: input '{}' is {}; only f32 is supported for now",
                                       where(n), v->name, dtype_name(v->dtype)));
    if (first && v->dtype != first->dtype)
      return invalid_argument(fmt::format("{}: inputs '{}' ({}) and '{}' ({}) differ in dtype",
                                          where(n), first->name, dtype_name(first->dtype), v->name,
                                          dtype_name(v->dtype)));
    if (!first) first = v;
  }
  return Status::ok_status();
}

void set_output(Graph& g, const Node& n, size_t k, DType dtype, Shape shape) {
  Value& v = g.values[n.outputs[k]];
  v.dtype = dtype;
  v.shape = std::move(shape);
}

// numpy multidirectional broadcasting: dims equal, or one side the constant 1.
Result<Shape> broadcast(const Node& n, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const DimExpr one = DimExpr::constant(1);
    const DimExpr da = i < r - a.size() ? one : a[i - (r - a.size())];
    const DimExpr db = i < r - b.size() ? one : b[i - (r - b.size())];
    if (da == db || db == one) {
      out[i] = da;
    } else if (da == one) {
      out[i] = db;
    } else {
      return invalid_argument(
          fmt::format("{}: shapes {} and {} do not broadcast (axis {}: {} vs {})", where(n),
                      shape_to_string(a), shape_to_string(b), i, da.to_string(), db.to_string()));
    }
  }
  return out;
}

Status infer_elementwise_binary(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_math_dtypes(g, n));
  KILN_ASSIGN_OR_RETURN(const Value* a, input(g, n, 0));
  KILN_ASSIGN_OR_RETURN(const Value* b, input(g, n, 1));
  KILN_ASSIGN_OR_RETURN(Shape out, broadcast(n, a->shape, b->shape));
  set_output(g, n, 0, a->dtype, std::move(out));
  return Status::ok_status();
}

Status infer_elementwise_unary(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 1, 1, 1, 1));
  KILN_RETURN_IF_ERROR(check_math_dtypes(g, n));
  KILN_ASSIGN_OR_RETURN(const Value* x, input(g, n, 0));
  set_output(g, n, 0, x->dtype, x->shape);
  return Status::ok_status();
}

Status infer_matmul(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_math_dtypes(g, n));
  KILN_ASSIGN_OR_RETURN(const Value* av, input(g, n, 0));
  KILN_ASSIGN_OR_RETURN(const Value* bv, input(g, n, 1));
  Shape a = av->shape, b = bv->shape;
  if (a.empty() || b.empty())
    return invalid_argument(fmt::format("{}: inputs must have rank >= 1, got {} and {}", where(n),
                                        shape_to_string(a), shape_to_string(b)));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), DimExpr::constant(1));
  if (b_vec) b.push_back(DimExpr::constant(1));
  const DimExpr ka = a.back(), kb = b[b.size() - 2];
  if (ka != kb)
    return invalid_argument(fmt::format("{}: inner dims {} and {} differ (shapes {} and {})",
                                        where(n), ka.to_string(), kb.to_string(),
                                        shape_to_string(av->shape), shape_to_string(bv->shape)));
  KILN_ASSIGN_OR_RETURN(Shape out,
                        broadcast(n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2)));
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  set_output(g, n, 0, av->dtype, std::move(out));
  return Status::ok_status();
}

Status infer_gemm(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 2, 3, 1, 1));
  KILN_RETURN_IF_ERROR(check_math_dtypes(g, n));
  KILN_ASSIGN_OR_RETURN(const Value* av, input(g, n, 0));
  KILN_ASSIGN_OR_RETURN(const Value* bv, input(g, n, 1));
  const Shape &a = av->shape, &b = bv->shape;
  if (a.size() != 2 || b.size() != 2)
    return invalid_argument(fmt::format("{}: A and B must be 2-D, got {} and {}", where(n),
                                        shape_to_string(a), shape_to_string(b)));
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const DimExpr m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  const DimExpr kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  if (ka != kb)
    return invalid_argument(
        fmt::format("{}: inner dims {} and {} differ (A {}, B {}, transA={}, transB={})", where(n),
                    ka.to_string(), kb.to_string(), shape_to_string(a), shape_to_string(b),
                    ta ? 1 : 0, tb ? 1 : 0));
  if (has_input(n, 2)) {
    KILN_ASSIGN_OR_RETURN(const Value* cv, input(g, n, 2));
    const Shape& c = cv->shape;
    const Shape target = {m, nn};
    bool ok = c.size() <= 2;
    for (size_t i = 0; ok && i < c.size(); ++i) {
      const DimExpr& t = target[2 - c.size() + i];
      ok = c[i] == t || c[i] == DimExpr::constant(1);
    }
    if (!ok)
      return invalid_argument(fmt::format("{}: C {} does not broadcast to [M, N] = {}", where(n),
                                          shape_to_string(c), shape_to_string(target)));
  }
  set_output(g, n, 0, av->dtype, {m, nn});
  return Status::ok_status();
}

Status infer_softmax(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 1, 1, 1, 1));
  KILN_RETURN_IF_ERROR(check_math_dtypes(g, n));
  KILN_ASSIGN_OR_RETURN(const Value* x, input(g, n, 0));
  const auto rank = static_cast<int64_t>(x->shape.size());
  const int64_t axis = n.attr_int("axis", -1);
  if (axis < -rank || axis >= rank)
    return invalid_argument(fmt::format("{}: axis {} is out of range for input {}", where(n), axis,
                                        shape_to_string(x->shape)));
  set_output(g, n, 0, x->dtype, x->shape);
  return Status::ok_status();
}

Status infer_identity(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 1, 1, 1, 1));
  KILN_ASSIGN_OR_RETURN(const Value* x, input(g, n, 0));
  set_output(g, n, 0, x->dtype, x->shape);
  return Status::ok_status();
}

Status infer_dropout(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 1, 3, 1, 2));
  if (n.outputs.size() == 2)
    return unimplemented(fmt::format("{}: the mask output '{}' is not supported (inference only)",
                                     where(n), g.values[n.outputs[1]].name));
  if (has_input(n, 2)) {  // training_mode: only a constant false is inference
    KILN_ASSIGN_OR_RETURN(const Value* t, input(g, n, 2));
    const bool is_false =
        t->constant && std::all_of(t->constant->bytes.begin(), t->constant->bytes.end(),
                                   [](uint8_t b) { return b == 0; });
    if (!is_false)
      return unimplemented(
          fmt::format("{}: training_mode '{}' is not a constant false; only inference is supported",
                      where(n), t->name));
  }
  KILN_ASSIGN_OR_RETURN(const Value* x, input(g, n, 0));
  set_output(g, n, 0, x->dtype, x->shape);
  return Status::ok_status();
}

Status infer_constant(Graph& g, const Node& n) {
  KILN_RETURN_IF_ERROR(check_arity(n, 0, 0, 1, 1));
  Value& v = g.values[n.outputs[0]];
  if (!v.constant || v.dtype == DType::kUnspecified)
    return invalid_argument(
        fmt::format("{}: output '{}' carries no constant data", where(n), v.name));
  v.shape.clear();
  for (int64_t d : v.constant->dims) v.shape.push_back(DimExpr::constant(d));
  return Status::ok_status();
}

using InferFn = Status (*)(Graph&, const Node&);
struct OpRule {
  std::string_view op;
  InferFn fn;
};
constexpr std::array<OpRule, 13> kRules = {{
    {"MatMul", infer_matmul},
    {"Gemm", infer_gemm},
    {"Add", infer_elementwise_binary},
    {"Sub", infer_elementwise_binary},
    {"Mul", infer_elementwise_binary},
    {"Div", infer_elementwise_binary},
    {"Relu", infer_elementwise_unary},
    {"Sigmoid", infer_elementwise_unary},
    {"Tanh", infer_elementwise_unary},
    {"Softmax", infer_softmax},
    {"Identity", infer_identity},
    {"Dropout", infer_dropout},
    {"Constant", infer_constant},
}};

InferFn find_rule(std::string_view op) {
  for (const OpRule& r : kRules)
    if (r.op == op) return r.fn;
  return nullptr;
}

}  // namespace

bool op_supported(const std::string& op) { return find_rule(op) != nullptr; }

Status infer_shapes(Graph& g) {
  const int nv = static_cast<int>(g.values.size());
  for (const Node& n : g.nodes) {
    InferFn fn = find_rule(n.op);
    if (!fn) return unimplemented(fmt::format("{}: unsupported op", where(n)));
    for (int id : n.inputs)
      if (id < -1 || id >= nv)
        return invalid_argument(fmt::format("{}: input id {} out of range", where(n), id));
    for (int id : n.outputs)
      if (id < -1 || id >= nv)
        return invalid_argument(fmt::format("{}: output id {} out of range", where(n), id));
    KILN_RETURN_IF_ERROR(fn(g, n));
  }
  return Status::ok_status();
}

}  // namespace kiln::ir
