#include "compiler/ir_shape_inference.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

const DimExpr S = DimExpr::size();
DimExpr C(int64_t v) { return DimExpr::constant(v); }

// A graph with the given typed inputs and one node `op` over them, producing `n_out` outputs.
struct OneNode {
  Graph g;
  explicit OneNode(const std::string& op, std::vector<std::pair<Shape, DType>> ins,
                   size_t n_out = 1) {
    Node n;
    n.name = "n0";
    n.op = op;
    for (size_t i = 0; i < ins.size(); ++i) {
      Value v;
      v.name = "in" + std::to_string(i);
      v.shape = ins[i].first;
      v.dtype = ins[i].second;
      n.inputs.push_back(g.add_value(v));
      g.inputs.push_back(n.inputs.back());
    }
    for (size_t k = 0; k < n_out; ++k) {
      Value v;
      v.name = "out" + std::to_string(k);
      v.producer = 0;
      n.outputs.push_back(g.add_value(v));
      g.outputs.push_back(n.outputs.back());
    }
    g.nodes.push_back(n);
  }
  OneNode(const std::string& op, std::vector<Shape> shapes) : OneNode(op, f32(shapes)) {}
  static std::vector<std::pair<Shape, DType>> f32(const std::vector<Shape>& shapes) {
    std::vector<std::pair<Shape, DType>> r;
    for (const auto& s : shapes) r.emplace_back(s, DType::kF32);
    return r;
  }
  Node& node() { return g.nodes[0]; }
  const Value& out(size_t k = 0) { return g.values[g.nodes[0].outputs[k]]; }
  Result<Shape> infer() {
    Status s = infer_shapes(g);
    if (!s.ok()) return s;
    return out().shape;
  }
};

Shape infer_ok(OneNode&& t) {
  Result<Shape> r = t.infer();
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(t.out().dtype, DType::kF32);
  return r.ok() ? *r : Shape{};
}

void expect_error(OneNode&& t, StatusCode code, std::vector<std::string> needles) {
  Status s = infer_shapes(t.g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const auto& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
}

TEST(OpSupported, KnownAndUnknown) {
  for (const char* op : {"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh",
                         "Softmax", "Identity", "Dropout", "Constant"})
    EXPECT_TRUE(op_supported(op)) << op;
  for (const char* op : {"", "Erf", "LayerNormalization", "matmul", "If"})
    EXPECT_FALSE(op_supported(op)) << op;
}

TEST(InferShapes, MatMul) {
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{S, C(64)}, {C(64), C(128)}})), (Shape{S, C(128)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(64)}, {C(64), C(128)}})), (Shape{C(128)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{S, C(64)}, {C(64)}})), (Shape{S}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(64)}, {C(64)}})), Shape{});
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(2), C(1), S, C(64)}, {C(3), C(64), C(32)}})),
            (Shape{C(2), C(3), S, C(32)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(4), S, C(8)}, {C(8), S}})), (Shape{C(4), S, S}));
}

TEST(InferShapes, MatMulErrors) {
  expect_error(OneNode("MatMul", {{S, C(64)}, {C(32), C(128)}}), StatusCode::kInvalidArgument,
               {"node 'n0' (MatMul)", "inner dims 64 and 32 differ", "[S, 64]", "[32, 128]"});
  expect_error(OneNode("MatMul", {{C(2), S, C(8)}, {C(3), C(8), C(4)}}),
               StatusCode::kInvalidArgument, {"do not broadcast", "2 vs 3"});
  expect_error(OneNode("MatMul", {{}, {C(3)}}), StatusCode::kInvalidArgument, {"rank >= 1"});
  expect_error(OneNode("MatMul", {{S, C(8)}}), StatusCode::kInvalidArgument, {"has 1 inputs"});
}

TEST(InferShapes, Gemm) {
  EXPECT_EQ(infer_ok(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}})), (Shape{S, C(32)}));
  {
    OneNode t("Gemm", {{C(64), S}, {C(32), C(64)}, {C(32)}});
    t.node().attrs["transA"] = int64_t{1};
    t.node().attrs["transB"] = int64_t{1};
    EXPECT_EQ(infer_ok(std::move(t)), (Shape{S, C(32)}));
  }
  for (const Shape& c : {Shape{}, Shape{C(1)}, Shape{C(1), C(32)}, Shape{S, C(1)}, Shape{S, C(32)}})
    EXPECT_EQ(infer_ok(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}, c})), (Shape{S, C(32)}))
        << shape_to_string(c);
}

TEST(InferShapes, GemmErrors) {
  expect_error(OneNode("Gemm", {{S, C(64)}, {C(32), C(64)}}), StatusCode::kInvalidArgument,
               {"node 'n0' (Gemm)", "inner dims 64 and 32 differ", "transB=0"});
  expect_error(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}, {C(33)}}), StatusCode::kInvalidArgument,
               {"C [33] does not broadcast to [M, N] = [S, 32]"});
  expect_error(OneNode("Gemm", {{C(2), S, C(64)}, {C(64), C(32)}}), StatusCode::kInvalidArgument,
               {"must be 2-D", "[2, S, 64]"});
}

TEST(InferShapes, Elementwise) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    EXPECT_EQ(infer_ok(OneNode(op, {{S, C(128)}, {C(128)}})), (Shape{S, C(128)})) << op;
    EXPECT_EQ(infer_ok(OneNode(op, {{S, C(1)}, {C(1), C(128)}})), (Shape{S, C(128)})) << op;
    EXPECT_EQ(infer_ok(OneNode(op, {{C(1)}, {S}})), (Shape{S})) << op;
    EXPECT_EQ(infer_ok(OneNode(op, {{}, {S, C(2)}})), (Shape{S, C(2)})) << op;
  }
  expect_error(OneNode("Add", {{S}, {DimExpr::size(2)}}), StatusCode::kInvalidArgument,
               {"node 'n0' (Add)", "[S] and [2*S] do not broadcast", "S vs 2*S"});
  expect_error(OneNode("Mul", {{S, C(4)}, {C(3)}}), StatusCode::kInvalidArgument,
               {"(Mul)", "4 vs 3"});
  for (const char* op : {"Relu", "Sigmoid", "Tanh"})
    EXPECT_EQ(infer_ok(OneNode(op, {{S, C(7)}})), (Shape{S, C(7)})) << op;
}

TEST(InferShapes, Softmax) {
  EXPECT_EQ(infer_ok(OneNode("Softmax", {{S, C(32)}})), (Shape{S, C(32)}));
  OneNode t("Softmax", {{S, C(32)}});
  t.node().attrs["axis"] = int64_t{0};
  EXPECT_EQ(infer_ok(std::move(t)), (Shape{S, C(32)}));
  OneNode bad("Softmax", {{S, C(32)}});
  bad.node().attrs["axis"] = int64_t{2};
  expect_error(std::move(bad), StatusCode::kInvalidArgument,
               {"(Softmax)", "axis 2 is out of range", "[S, 32]"});
  OneNode neg("Softmax", {{S, C(32)}});
  neg.node().attrs["axis"] = int64_t{-3};
  expect_error(std::move(neg), StatusCode::kInvalidArgument, {"axis -3 is out of range"});
}

TEST(InferShapes, IdentityKeepsAnyDtype) {
  OneNode t("Identity", {{Shape{S, C(3)}, DType::kI64}});
  ASSERT_TRUE(infer_shapes(t.g).ok());
  EXPECT_EQ(t.out().dtype, DType::kI64);
  EXPECT_EQ(t.out().shape, (Shape{S, C(3)}));
}

TEST(InferShapes, Dropout) {
  EXPECT_EQ(infer_ok(OneNode("Dropout", {{S, C(8)}})), (Shape{S, C(8)}));
  expect_error(OneNode("Dropout", OneNode::f32({{S, C(8)}}), 2), StatusCode::kUnimplemented,
               {"node 'n0' (Dropout)", "mask output 'out1'"});
  // training_mode: a constant false is inference, anything else is not supported.
  for (uint8_t flag : {0, 1}) {
    OneNode t("Dropout", {{S, C(8)}});
    Value tm;
    tm.name = "training";
    tm.dtype = DType::kBool;
    tm.constant = Constant{{}, {flag}};
    t.node().inputs = {t.node().inputs[0], -1, t.g.add_value(tm)};
    Status s = infer_shapes(t.g);
    if (flag == 0) {
      EXPECT_TRUE(s.ok()) << s.to_string();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
      EXPECT_NE(s.message().find("training_mode 'training'"), std::string::npos) << s.message();
    }
  }
}

TEST(InferShapes, ConstantNode) {
  OneNode t("Constant", std::vector<Shape>{});
  Value& v = t.g.values[t.node().outputs[0]];
  v.dtype = DType::kI64;
  v.constant = Constant{{2}, std::vector<uint8_t>(16, 0)};
  ASSERT_TRUE(infer_shapes(t.g).ok());
  EXPECT_EQ(t.out().shape, (Shape{C(2)}));
  OneNode empty("Constant", std::vector<Shape>{});
  expect_error(std::move(empty), StatusCode::kInvalidArgument, {"(Constant)", "no constant data"});
}

TEST(InferShapes, MathOpsAreF32Only) {
  expect_error(OneNode("Add", {{Shape{S}, DType::kF32}, {Shape{S}, DType::kF16}}),
               StatusCode::kUnimplemented, {"node 'n0' (Add)", "input 'in1' is f16", "f32"});
  expect_error(OneNode("MatMul", {{Shape{S, C(4)}, DType::kBF16}, {Shape{C(4)}, DType::kBF16}}),
               StatusCode::kUnimplemented, {"input 'in0' is bf16"});
  expect_error(OneNode("Relu", {{Shape{S}, DType::kI64}}), StatusCode::kUnimplemented,
               {"input 'in0' is i64"});
}

TEST(InferShapes, UnsupportedOpAndMissingInput) {
  expect_error(OneNode("Erf", {{S}}), StatusCode::kUnimplemented,
               {"node 'n0' (Erf)", "unsupported"});
  OneNode t("Gemm", {{S, C(4)}, {C(4), C(2)}});
  t.node().inputs[1] = -1;
  expect_error(std::move(t), StatusCode::kInvalidArgument, {"required input 1 is missing"});
}

TEST(InferShapes, ChainsThroughAGraph) {
  OneNode t("MatMul", {{S, C(64)}, {C(64), C(16)}});
  Value y;
  y.name = "y";
  y.producer = 1;
  Node relu;
  relu.name = "act";
  relu.op = "Relu";
  relu.inputs = {t.node().outputs[0]};
  relu.outputs = {t.g.add_value(y)};
  t.g.nodes.push_back(relu);
  ASSERT_TRUE(infer_shapes(t.g).ok());
  EXPECT_EQ(t.g.values[relu.outputs[0]].shape, (Shape{S, C(16)}));
  EXPECT_TRUE(graph_verify(t.g).ok());
}

}  // namespace
}  // namespace kiln::ir
