// Fused elementwise codegen (compiler/lower/elementwise_codegen): indexing and literals.
#include "compiler/lower/elementwise_codegen.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using ir::DimExpr;

EwGroup bias_relu_group() {
  EwGroup g;
  g.inputs = {{DimExpr::size(), DimExpr::constant(16)}, {DimExpr::constant(16)}};
  g.out_shape = {DimExpr::size(), DimExpr::constant(16)};
  g.ops = {{"add", {EwOperand::input(0), EwOperand::input(1)}}, {"relu", {EwOperand::temp(0)}}};
  g.outputs = {1};
  return g;
}

TEST(ElementwiseCodegen, ElementwiseBroadcastIndexing) {
  KernelDef k = codegen_elementwise(bias_relu_group());
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_NE(k.body.find("in0[i]"), std::string::npos) << k.body;       // same shape: flat index
  EXPECT_NE(k.body.find("in1[c1 * in1_st0]"), std::string::npos) << k.body;  // row broadcast
  EXPECT_NE(k.body.find("kiln::op_add(x0, x1)"), std::string::npos);
  EXPECT_NE(k.body.find("kiln::op_relu(t0)"), std::string::npos);
  EXPECT_NE(k.body.find("out0[i] = t1"), std::string::npos);
}

TEST(ElementwiseCodegen, ScalarOperandIsExactBitPattern) {
  EwGroup g = bias_relu_group();
  g.ops[0].args[1] = EwOperand::constant(0.1f);
  KernelDef k = codegen_elementwise(g);
  EXPECT_NE(k.body.find("__int_as_float(0x3dcccccd)"), std::string::npos) << k.body;
}

TEST(ElementwiseCodegen, ElementwiseFunctionsMatchOnnxOps) {
  EXPECT_EQ(ew_function_for_op("Add"), "add");
  EXPECT_EQ(ew_function_for_op("Relu"), "relu");
  EXPECT_EQ(ew_function_for_op("MatMul"), "");
  EXPECT_EQ(ew_function_arity("add"), 2);
  EXPECT_EQ(ew_function_arity("tanh"), 1);
  EXPECT_EQ(ew_function_arity("nope"), 0);
}

}  // namespace
}  // namespace kiln::compiler
