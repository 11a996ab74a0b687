// Elementwise family: elementwise nodes fused into one generated kernel per group.
//
// A group starts at the first pending elementwise node and takes, in graph order, every
// elementwise consumer of a value it computes whose output has the group's shape and whose other
// inputs are ready when the group runs (computed earlier, or constants). A value of the group is
// stored only when something outside the group reads it. One-element constants are baked into
// the code as literals; larger ones are kernel inputs. An Add that feeds a normalization is left
// to start its own group, where it becomes the norm's fused residual (reduce_codegen.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/elementwise_codegen.h"
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/backend/lower/reduce_codegen.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

constexpr size_t kMaxGroupOps = 64;  // keeps generated kernels small and registers in check

// clang-format off
constexpr const char* kEwOps[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Erf",
    "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Gelu", "Sin", "Cos", "Max", "Min", "Where", "Cast",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
    "IsNaN", "IsInf", "Clip", "Identity", "Dropout", "Expand",
};
// clang-format on

bool is_ew_node(const ir::Node& n) {
  if (!n.domain.empty()) return false;
  for (const char* op : kEwOps)
    if (n.op == op) return true;
  return false;
}

bool is_int_like(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kI8 || t == DType::kU8 ||
         t == DType::kBool;
}
EwType type_of(DType t) { return is_int_like(t) ? EwType::kInt : EwType::kFloat; }

// The data inputs of an elementwise node (Expand's target shape and Dropout's ratio and
// training_mode are not data).
std::vector<int> data_inputs(const ir::Node& n) {
  if (n.op == "Expand" || n.op == "Dropout") return {n.inputs[0]};
  std::vector<int> in;
  for (int v : n.inputs)
    if (v >= 0) in.push_back(v);
  return in;
}

class GroupBuilder {
 public:
  GroupBuilder(LowerContext& cx, int start) : cx_(cx), start_(start) {
    group_.out_shape = cx.shape(cx.node(start).outputs[0]);
  }

  // The node can join: its output has the group's shape and every data input is ready.
  bool can_absorb(int node) const {
    const ir::Node& n = cx_.node(node);
    // A group stays inside its piece, so that pieces keep their own steps.
    if (cx_.piece_of(node) != cx_.piece_of(start_) || cx_.done(node) || !is_ew_node(n) ||
        n.outputs.empty())
      return false;
    if (cx_.shape(n.outputs[0]) != group_.out_shape) return false;
    if (group_.ops.size() >= kMaxGroupOps) return false;
    if (kernel_ctype(cx_.dtype(n.outputs[0])).empty()) return false;
    if (n.op == "Add" && residual_norm_consumer(cx_, node) >= 0) return false;
    for (int v : data_inputs(n))
      if (!temp_of_.contains(v) && !cx_.is_constant(v) && !cx_.available_at(v, start_))
        return false;
    return true;
  }

  Status add(int node) {
    const ir::Node& n = cx_.node(node);
    std::vector<EwOperand> args;
    for (int v : data_inputs(n)) {
      KILN_ASSIGN_OR_RETURN(EwOperand o, operand(n, v));
      args.push_back(o);
    }
    KILN_RETURN_IF_ERROR(translate(n, std::move(args)));
    temp_of_[n.outputs[0]] = static_cast<int>(group_.ops.size()) - 1;
    members_.push_back(node);
    nodes_ += (nodes_.empty() ? "" : "+") + n.name;
    return Status::ok_status();
  }

  Status emit() {
    std::set<int> member_set(members_.begin(), members_.end());
    std::vector<int> outputs;
    for (int node : members_) {
      const int v = cx_.node(node).outputs[0];
      bool needed = cx_.is_graph_output(v);
      for (int c : cx_.consumers(v)) needed |= !member_set.contains(c);
      if (needed) {
        outputs.push_back(v);
        group_.outputs.push_back(temp_of_.at(v));
      }
    }
    for (int node : members_) cx_.mark_done(node);
    if (outputs.empty()) return Status::ok_status();  // nothing reads any of it
    return emit_elementwise(cx_, start_, group_, inputs_, outputs, nodes_);
  }

 private:
  // A temp, a literal (one-element constants) or a kernel input.
  Result<EwOperand> operand(const ir::Node& n, int v) {
    if (auto it = temp_of_.find(v); it != temp_of_.end()) return EwOperand::temp(it->second);
    const ir::Value& val = cx_.value(v);
    auto numel = ir::shape_numel(val.shape);
    const bool one = numel && *numel == ir::DimExpr::constant(1);
    if (val.constant && one) {
      KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(val));
      if (t.data.size() != 1)
        return invalid_argument(fmt::format("{}: constant '{}' holds {} values, expected 1",
                                            lower_error_prefix(n), val.name, t.data.size()));
      if (val.dtype == DType::kI64 && val.constant->bytes.size() == 8) {  // exact beyond 2^53
        int64_t x;
        std::memcpy(&x, val.constant->bytes.data(), 8);
        return EwOperand::int_constant(x);
      }
      if (is_int_like(val.dtype)) return EwOperand::int_constant(static_cast<int64_t>(t.data[0]));
      return EwOperand::constant(static_cast<float>(t.data[0]));
    }
    if (!val.constant && val.producer < 0 && val.ints) {
      if (val.ints->size() != 1)
        return lower_unsupported(
            n, fmt::format("input '{}' is a size-dependent vector of {} values; only one-element "
                           "symbolic constants can be baked into an elementwise kernel",
                           val.name, val.ints->size()));
      return EwOperand::int_expr(val.ints->front());
    }
    if (kernel_ctype(val.dtype).empty())
      return lower_unsupported(n, fmt::format("input '{}' is {}, which kernels do not read",
                                              val.name, dtype_name(val.dtype)));
    auto it = std::find(inputs_.begin(), inputs_.end(), v);
    if (it == inputs_.end()) {
      inputs_.push_back(v);
      group_.inputs.push_back(val.shape);
      group_.input_dtypes.push_back(val.dtype);
      it = inputs_.end() - 1;
    }
    return EwOperand::input(static_cast<int>(it - inputs_.begin()));
  }

  void push(std::string fn, std::vector<EwOperand> args, EwType in, EwType out, DType wrap) {
    group_.ops.push_back({std::move(fn), std::move(args), in, out, wrap});
  }

  // The node's ops; its result is the last op pushed.
  Status translate(const ir::Node& n, std::vector<EwOperand> args) {
    const DType out_dt = cx_.dtype(n.outputs[0]);
    const EwType out = type_of(out_dt);
    const EwType in = args.empty() ? out : type_of(cx_.dtype(data_inputs(n)[0]));
    const std::string& op = n.op;
    if (op == "Expand" || op == "Identity" || op == "Dropout") {  // Dropout: inference, a copy
      push("identity", args, in, in, DType::kUnspecified);
    } else if (op == "Cast") {
      if (out_dt == DType::kBool)
        push("to_bool", args, in, EwType::kInt, DType::kUnspecified);
      else
        push("identity", args, out, out, out_dt);
    } else if (op == "Gelu") {
      push(n.attr_string("approximate", "none") == "tanh" ? "gelu_tanh" : "gelu", args, in, out,
           DType::kUnspecified);
    } else if (op == "LeakyRelu") {
      args.push_back(EwOperand::constant(static_cast<float>(n.attr_float("alpha", 0.01))));
      push("leaky_relu", args, in, out, DType::kUnspecified);
    } else if (op == "IsInf") {
      for (const char* attr : {"detect_positive", "detect_negative"})
        args.push_back(EwOperand::constant(n.attr_int(attr, 1) != 0 ? 1.0f : 0.0f));
      push("is_inf", args, in, out, DType::kUnspecified);
    } else if (op == "Clip") {
      std::vector<EwOperand> full = {args[0]};
      const auto bound = [&](size_t k, const char* attr, double none) -> EwOperand {
        if (k < n.inputs.size() && n.inputs[k] >= 0) {
          // args holds the present inputs in order: x, then min and/or max.
          size_t pos = 1 + (k == 2 && n.inputs.size() > 1 && n.inputs[1] >= 0 ? 1 : 0);
          return args[pos];
        }
        if (in == EwType::kInt)
          return EwOperand::int_constant(none < 0 ? std::numeric_limits<int64_t>::min()
                                                  : std::numeric_limits<int64_t>::max());
        return EwOperand::constant(static_cast<float>(n.attr_float(attr, none)));
      };
      const double inf = std::numeric_limits<double>::infinity();
      full.push_back(bound(1, "min", -inf));
      full.push_back(bound(2, "max", inf));
      push("clip", full, in, in, DType::kUnspecified);
    } else if (op == "Where") {
      const EwType t = type_of(cx_.dtype(n.inputs[1]));
      push("where", args, t, t, DType::kUnspecified);
    } else if (op == "Max" || op == "Min") {
      if (args.size() == 1) {
        push("identity", args, in, in, DType::kUnspecified);
      } else {
        const std::string fn = op == "Max" ? "max" : "min";
        push(fn, {args[0], args[1]}, in, in, DType::kUnspecified);
        for (size_t k = 2; k < args.size(); ++k)
          push(fn, {EwOperand::temp(static_cast<int>(group_.ops.size()) - 1), args[k]}, in, in,
               DType::kUnspecified);
      }
    } else if (op == "And" || op == "Or" || op == "Xor" || op == "Not") {
      push(std::string(ew_function_for_op(op)), args, EwType::kInt, EwType::kInt,
           DType::kUnspecified);
    } else {
      const std::string_view fn = ew_function_for_op(op);
      if (fn.empty() || static_cast<int>(args.size()) != ew_function_arity(fn))
        return invalid_argument(fmt::format("{}: expected {} inputs, got {}", lower_error_prefix(n),
                                            ew_function_arity(fn), args.size()));
      // Pow's exponent follows the base's compute type; comparisons produce 0/1.
      push(std::string(fn), args, in, out, out == EwType::kInt ? out_dt : DType::kUnspecified);
    }
    return Status::ok_status();
  }

  LowerContext& cx_;
  int start_;
  EwGroup group_;
  std::vector<int> inputs_;   // external values, in kernel-parameter order
  std::vector<int> members_;  // absorbed nodes, in graph order
  std::map<int, int> temp_of_;
  std::string nodes_;
};

Status lower_elementwise(LowerContext& cx, int i) {
  if (cx.node(i).op == "Add" && cx.fuse()) {
    const int norm = residual_norm_consumer(cx, i);
    if (norm >= 0) return lower_norm_with_residual(cx, i, norm);
  }
  const ir::Node& first = cx.node(i);
  if (kernel_ctype(cx.dtype(first.outputs[0])).empty())
    return lower_unsupported(first, fmt::format("output '{}' is {}, which kernels do not store",
                                                cx.value(first.outputs[0]).name,
                                                dtype_name(cx.dtype(first.outputs[0]))));
  GroupBuilder b(cx, i);
  KILN_RETURN_IF_ERROR(b.add(i));
  // Candidates in graph order: a node joins only after every earlier one had its chance, so
  // all of its producers inside the group are already temps.
  std::set<int> candidates;
  auto enqueue = [&](int node) {
    for (int c : cx.consumers(cx.node(node).outputs[0]))
      if (c > i) candidates.insert(c);
  };
  if (cx.fuse()) enqueue(i);
  while (!candidates.empty()) {
    const int c = *candidates.begin();
    candidates.erase(candidates.begin());
    if (!b.can_absorb(c)) continue;
    KILN_RETURN_IF_ERROR(b.add(c));
    enqueue(c);
  }
  return b.emit();
}

// True when `c` is an Add another of whose inputs than `v` a MatMul or Gemm computes.
bool residual_of_gemm(const ir::Graph& g, const ir::Node& c, int v) {
  if (!c.domain.empty() || c.op != "Add") return false;
  for (int in : c.inputs) {
    if (in == v || in < 0 || g.values[in].producer < 0) continue;
    const ir::Node& p = g.nodes[static_cast<size_t>(g.values[in].producer)];
    if (p.domain.empty() && (p.op == "MatMul" || p.op == "Gemm")) return true;
  }
  return false;
}

}  // namespace

void elementwise_sink(const ir::Graph& g, std::vector<Piece>& pieces) {
  const std::vector<std::vector<int>> users = graph_users(g);
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  for (Piece& piece : pieces) {
    std::vector<int>& order = piece.nodes;
    for (size_t pos = order.size(); pos-- > 0;) {
      const ir::Node& n = g.nodes[static_cast<size_t>(order[pos])];
      if (!is_ew_node(n) || n.outputs.size() != 1 || outputs.contains(n.outputs[0])) continue;
      const int v = n.outputs[0];
      size_t first = order.size();
      bool movable = !users[static_cast<size_t>(v)].empty();
      for (int c : users[static_cast<size_t>(v)]) {
        const auto at = std::find(order.begin(), order.end(), c);
        const ir::Node& cn = g.nodes[static_cast<size_t>(c)];
        if (at == order.end() || !is_ew_node(cn) || residual_of_gemm(g, cn, v)) {
          movable = false;
          break;
        }
        first = std::min(first, static_cast<size_t>(at - order.begin()));
      }
      if (!movable || first <= pos + 1) continue;
      const int node = order[pos];
      order.erase(order.begin() + static_cast<long>(pos));
      order.insert(order.begin() + static_cast<long>(first - 1), node);
    }
  }
}

std::vector<LowerRule> elementwise_rules() {
  std::vector<LowerRule> rules;
  for (const char* op : kEwOps) rules.push_back({op, lower_elementwise});
  return rules;
}

}  // namespace kiln::compiler
