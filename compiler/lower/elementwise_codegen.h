// Fused elementwise kernels: a chain of scalar ops over one output shape, inputs broadcast
// (numpy rules). (Starting point moved from kernel_codegen; f32 only so far.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir.h"
#include "compiler/launch_plan.h"
#include "compiler/lower/lower_context.h"

namespace kiln::compiler {

// One operand of an elementwise op: a kernel input, an earlier op's result, or a constant.
struct EwOperand {
  enum class Kind { kInput, kTemp, kScalar };
  Kind kind = Kind::kInput;
  int index = 0;  // input index or temp (op) index
  float scalar = 0.0f;
  static EwOperand input(int i) { return {Kind::kInput, i, 0.0f}; }
  static EwOperand temp(int i) { return {Kind::kTemp, i, 0.0f}; }
  static EwOperand constant(float v) { return {Kind::kScalar, 0, v}; }
};

// One scalar op from kernels/elementwise.cuh ("add", "relu", ...); its result is temp #i.
struct EwOp {
  std::string fn;
  std::vector<EwOperand> args;
};

// A fused chain of elementwise ops over one output shape. Inputs broadcast to out_shape
// (numpy rules, right-aligned); outputs name the temps that are stored, in order.
struct EwGroup {
  std::vector<ir::Shape> inputs;
  ir::Shape out_shape;
  std::vector<EwOp> ops;
  std::vector<int> outputs;
};

// The elementwise op names ("add", "relu", ...) codegen can emit, by ONNX op_type.
std::string_view ew_function_for_op(std::string_view onnx_op);  // empty when not elementwise
int ew_function_arity(std::string_view fn);                     // 0 when unknown

KernelDef codegen_elementwise(const EwGroup& group);

// Generates the group's kernel and emits its launch for node `node`; `inputs`/`outputs` are
// IR values (resolved here).
Status emit_elementwise(LowerContext& cx, int node, const EwGroup& group,
                        const std::vector<int>& inputs, const std::vector<int>& outputs,
                        const std::string& nodes);

}  // namespace kiln::compiler
