// Elementwise family: chains of elementwise nodes fused into one generated kernel.
// (Starting point moved from lowering.cc: f32, Add/Sub/Mul/Div/Relu/Sigmoid/Tanh.)
#include <fmt/format.h>

#include <algorithm>

#include "compiler/lower/elementwise_codegen.h"
#include "compiler/lower/lower_rules.h"

namespace kiln::compiler {
namespace {

Status lower_elementwise(LowerContext& cx, int i) {
  EwGroup group;
  std::vector<int> inputs;  // external values, in kernel-parameter order
  std::string nodes;
  group.out_shape = cx.shape(cx.node(i).outputs[0]);
  std::vector<int> temp_of(cx.graph().values.size(), -1);
  int node = i;
  while (true) {
    const ir::Node& n = cx.node(node);
    for (int v : n.inputs)
      if (v >= 0 && cx.dtype(v) != DType::kF32)
        return lower_unsupported(n, fmt::format("tensor '{}' is {}; only f32 is supported",
                                                cx.value(v).name, dtype_name(cx.dtype(v))));
    EwOp op{std::string(ew_function_for_op(n.op)), {}};
    if (static_cast<int>(n.inputs.size()) != ew_function_arity(op.fn))
      return invalid_argument(fmt::format("{}: expected {} inputs, got {}", lower_error_prefix(n),
                                          ew_function_arity(op.fn), n.inputs.size()));
    for (int v : n.inputs) {
      if (temp_of[v] >= 0) {
        op.args.push_back(EwOperand::temp(temp_of[v]));
        continue;
      }
      auto it = std::find(inputs.begin(), inputs.end(), v);
      if (it == inputs.end()) {
        inputs.push_back(v);
        group.inputs.push_back(cx.shape(v));
        it = inputs.end() - 1;
      }
      op.args.push_back(EwOperand::input(static_cast<int>(it - inputs.begin())));
    }
    group.ops.push_back(std::move(op));
    temp_of[n.outputs[0]] = static_cast<int>(group.ops.size()) - 1;
    nodes += (nodes.empty() ? "" : "+") + n.name;
    cx.mark_done(node);

    // Absorb the next node of a chain: same output shape, its other inputs ready now.
    int next = cx.sole_consumer(n.outputs[0]);
    if (next < 0 || ew_function_for_op(cx.node(next).op).empty() ||
        cx.shape(cx.node(next).outputs[0]) != group.out_shape)
      break;
    bool ready = true;
    for (int v : cx.node(next).inputs) ready &= temp_of[v] >= 0 || cx.available_at(v, i);
    if (!ready) break;
    node = next;
  }
  const int last = cx.node(node).outputs[0];
  group.outputs = {temp_of[last]};
  return emit_elementwise(cx, i, group, inputs, {last}, nodes);
}

}  // namespace

std::vector<LowerRule> elementwise_rules() {
  std::vector<LowerRule> rules;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Identity"})
    rules.push_back({op, lower_elementwise});
  return rules;
}

}  // namespace kiln::compiler
