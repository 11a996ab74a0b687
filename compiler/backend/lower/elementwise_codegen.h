// Fused elementwise kernels: a chain of scalar ops (kernels/elementwise.cuh) over one output
// shape, inputs broadcast (numpy rules, right-aligned), each input and output of its own dtype.
// Floats compute in fp32, integers and bools in long long (exact int64 arithmetic).
//
// Three code paths, chosen by elementwise_path():
//  - flat vector: every input has the output's layout or one element; 16-byte vectors over the
//    flat index, a scalar tail;
//  - row vector: the output's innermost dim is a multiple of the vector width; broadcast inputs
//    are read once per vector (an input broadcast along the innermost dim) or as a vector;
//  - scalar: anything else, one element per step.
// A launch configuration (EwConfig) sets the block size, a narrower vector and the grid size;
// elementwise_candidates lists those the launch tuner times against the default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/dtype.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/lower/lower_context.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// The compute type of an operand or an op result.
enum class EwType { kFloat, kInt };

// One operand of an elementwise op: a kernel input, an earlier op's result, or a literal baked
// into the code (a float, an integer, or an integer expression of S from a symbolic constant).
struct EwOperand {
  enum class Kind { kInput, kTemp, kScalar, kIntScalar, kIntExpr };
  Kind kind = Kind::kInput;
  int index = 0;  // input index or temp (op) index
  float scalar = 0.0f;
  int64_t iscalar = 0;
  ir::DimExpr expr;
  static EwOperand input(int i) { return make(Kind::kInput, i); }
  static EwOperand temp(int i) { return make(Kind::kTemp, i); }
  static EwOperand constant(float v) {
    EwOperand o = make(Kind::kScalar, 0);
    o.scalar = v;
    return o;
  }
  static EwOperand int_constant(int64_t v) {
    EwOperand o = make(Kind::kIntScalar, 0);
    o.iscalar = v;
    return o;
  }
  static EwOperand int_expr(ir::DimExpr d) {
    EwOperand o = make(Kind::kIntExpr, 0);
    o.expr = d;
    return o;
  }

 private:
  static EwOperand make(Kind k, int i) {
    EwOperand o;
    o.kind = k;
    o.index = i;
    return o;
  }
};

// One scalar op kiln::op_<fn> ("add", "gelu_tanh", "where", ...); its result is temp #i.
// Operands are converted to `in` (Where's condition to kInt); an integer result is wrapped to
// the width of `wrap` when that is i32, i8 or u8.
struct EwOp {
  std::string fn;
  std::vector<EwOperand> args;
  EwType in = EwType::kFloat;
  EwType out = EwType::kFloat;
  DType wrap = DType::kUnspecified;
};

// A fused group over one output shape; outputs name the temps that are stored, in order.
// Empty dtype lists mean all f32.
struct EwGroup {
  std::vector<ir::Shape> inputs;
  std::vector<DType> input_dtypes;
  ir::Shape out_shape;
  std::vector<EwOp> ops;
  std::vector<int> outputs;
  std::vector<DType> output_dtypes;
};

enum class EwPath { kScalar, kFlatVector, kRowVector };
EwPath elementwise_path(const EwGroup& group);
// Elements per thread step on the vector paths (16 bytes of the narrowest dtype, at most 8);
// 1 on the scalar path.
int elementwise_vector_width(const EwGroup& group);

// The op function of a plain elementwise ONNX op ("Add" → "add"); empty when there is none.
std::string_view ew_function_for_op(std::string_view onnx_op);
int ew_function_arity(std::string_view fn);  // 0 when unknown

// A launch configuration of a group's kernel. `vec`: elements per thread step, the path's
// vector width or a narrower power of two (1 takes the scalar path, which is always correct);
// `items`: thread steps per thread the grid is sized for (the grid-stride loop covers the rest,
// so any grid is correct). Named "block=256 vec=4 items=1".
struct EwConfig {
  uint32_t block = 256;
  int vec = 1;
  uint32_t items = 1;
};
// The default: 256 threads, the path's vector width (1 on the scalar path), one step each.
EwConfig elementwise_default_config(const EwGroup& group);
std::string elementwise_config_label(const EwConfig& config);

KernelDef codegen_elementwise(const EwGroup& group);  // in the default configuration
KernelDef codegen_elementwise(const EwGroup& group, const EwConfig& config);

// Alternatives to the default for the launch tuner (compiler/backend/launch_plan.h), in a fixed
// order: 128, 512 and 1024 threads; 256 threads with the grid sized for 4 steps per thread; and on
// the vector paths half the vector width (8 bytes of the narrowest dtype instead of 16). When the
// work does not depend on S, those that launch the same blocks as the default or leave most of
// a block idle are left out. Empty when the element count is not linear in S.
std::vector<LaunchCandidate> elementwise_candidates(const EwGroup& group);

// Generates the group's kernel and emits its launch for node `node`; `inputs`/`outputs` are
// IR values (resolved here). Missing dtype lists are filled from the values.
Status emit_elementwise(LowerContext& cx, int node, const EwGroup& group,
                        const std::vector<int>& inputs, const std::vector<int>& outputs,
                        const std::string& nodes);

}  // namespace kiln::compiler
