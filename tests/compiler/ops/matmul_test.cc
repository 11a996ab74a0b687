// The matmul family (compiler/ops/matmul.cc): MatMul and Gemm shapes (symbolic in S), values on
// hand-checked cases, errors, and ONNX's own node tests. The shape cases come from the old
// single-table shape inference this family replaced.
#include <gtest/gtest.h>

#include "compiler/ir/graph_infer.h"
#include "tests/support/ir_harness.h"
#include "tests/support/onnx_node_test.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using ir::Shape;
using kiln::testing::C;
using kiln::testing::ref_error;
using kiln::testing::S;
using kiln::testing::T;
using kiln::testing::tensors_close;

// A graph with typed inputs a, b, c... and one node `op` over them, inferred by graph_infer.
struct OneNode {
  ir::Graph g;
  OneNode(const std::string& op, const std::vector<Shape>& shapes,
          std::map<std::string, ir::AttrValue> attrs = {}, DType dt = DType::kF32) {
    std::vector<kiln::testing::NodeInput> ins;
    for (size_t i = 0; i < shapes.size(); ++i) ins.push_back({input_name(i), shapes[i], dt});
    g = kiln::testing::one_node_graph("n0", "", op, ins, std::move(attrs), 17);
  }
  static std::string input_name(size_t i) { return std::string(1, static_cast<char>('a' + i)); }
  Status infer() { return graph_infer(g, InferOptions{}); }
  const ir::Value& out() const { return g.values[g.outputs[0]]; }
  RefTensor run(int64_t size, const std::vector<RefTensor>& ins) {
    std::map<std::string, RefTensor> m;
    for (size_t i = 0; i < ins.size(); ++i) m[input_name(i)] = ins[i];
    return kiln::testing::run_one_node(g, size, m);
  }
};

Shape infer_ok(OneNode&& t) {
  Status s = t.infer();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(t.out().dtype, DType::kF32);
  return s.ok() ? t.out().shape : Shape{};
}

void expect_error(OneNode&& t, StatusCode code, const std::vector<std::string>& needles) {
  kiln::testing::expect_error_status(t.infer(), code, needles);
}

// ---- shapes -----------------------------------------------------------------------------------

TEST(MatMul, Shapes) {
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{S, C(64)}, {C(64), C(128)}})), (Shape{S, C(128)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(64)}, {C(64), C(128)}})), (Shape{C(128)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{S, C(64)}, {C(64)}})), (Shape{S}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(64)}, {C(64)}})), Shape{});
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(2), C(1), S, C(64)}, {C(3), C(64), C(32)}})),
            (Shape{C(2), C(3), S, C(32)}));
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(4), S, C(8)}, {C(8), S}})), (Shape{C(4), S, S}));
  // S as the reduction length.
  EXPECT_EQ(infer_ok(OneNode("MatMul", {{C(4), S}, {S, C(2)}})), (Shape{C(4), C(2)}));
}

TEST(MatMul, ShapeErrors) {
  expect_error(OneNode("MatMul", {{S, C(64)}, {C(32), C(128)}}), StatusCode::kInvalidArgument,
               {"node 'n0' (MatMul)", "inner dims 64 and 32 differ", "[S, 64]", "[32, 128]"});
  expect_error(OneNode("MatMul", {{C(2), S, C(8)}, {C(3), C(8), C(4)}}),
               StatusCode::kInvalidArgument, {"do not broadcast", "2 vs 3"});
  expect_error(OneNode("MatMul", {{}, {C(3)}}), StatusCode::kInvalidArgument, {"rank >= 1"});
  expect_error(OneNode("MatMul", {{S, C(8)}}), StatusCode::kInvalidArgument,
               {"required input 1 is missing"});
  expect_error(OneNode("MatMul", {{S, C(8)}, {C(8), C(2)}}, {}, DType::kI64),
               StatusCode::kUnimplemented, {"input 'a' is i64"});
  OneNode mixed("MatMul", {{S, C(8)}, {C(8), C(2)}});
  mixed.g.values[1].dtype = DType::kF16;
  expect_error(std::move(mixed), StatusCode::kInvalidArgument,
               {"inputs 'a' (f32) and 'b' (f16) differ in dtype"});
}

TEST(Gemm, Shapes) {
  EXPECT_EQ(infer_ok(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}})), (Shape{S, C(32)}));
  EXPECT_EQ(infer_ok(OneNode("Gemm", {{C(64), S}, {C(32), C(64)}, {C(32)}},
                             {{"transA", int64_t{1}}, {"transB", int64_t{1}}})),
            (Shape{S, C(32)}));
  for (const Shape& c : {Shape{}, Shape{C(1)}, Shape{C(1), C(32)}, Shape{S, C(1)}, Shape{S, C(32)}})
    EXPECT_EQ(infer_ok(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}, c})), (Shape{S, C(32)}))
        << ir::shape_to_string(c);
}

TEST(Gemm, ShapeErrors) {
  expect_error(OneNode("Gemm", {{S, C(64)}, {C(32), C(64)}}), StatusCode::kInvalidArgument,
               {"node 'n0' (Gemm)", "inner dims 64 and 32 differ", "transB=0"});
  expect_error(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}, {C(33)}}), StatusCode::kInvalidArgument,
               {"C [33] does not broadcast to [M, N] = [S, 32]"});
  expect_error(OneNode("Gemm", {{S, C(64)}, {C(64), C(32)}, {C(2), S, C(32)}}),
               StatusCode::kInvalidArgument, {"C [2, S, 32] does not broadcast"});
  expect_error(OneNode("Gemm", {{C(2), S, C(64)}, {C(64), C(32)}}), StatusCode::kInvalidArgument,
               {"must be 2-D", "[2, S, 64]"});
  OneNode missing("Gemm", {{S, C(4)}, {C(4), C(2)}});
  missing.g.nodes[0].inputs[1] = -1;
  expect_error(std::move(missing), StatusCode::kInvalidArgument, {"required input 1 is missing"});
}

// ---- values -----------------------------------------------------------------------------------

TEST(MatMul, Values) {
  OneNode t("MatMul", {{S, C(2)}, {C(2), C(3)}});
  ASSERT_TRUE(t.infer().ok());
  EXPECT_TRUE(tensors_close(t.run(2, {T({2, 2}, {1, 2, 3, 4}), T({2, 3}, {1, 0, 2, 0, 1, 3})}),
                            T({2, 3}, {1, 2, 8, 3, 4, 18}), 0, 0, "matrix"));
  OneNode v("MatMul", {{C(2)}, {C(2), C(3)}});
  ASSERT_TRUE(v.infer().ok());
  EXPECT_TRUE(tensors_close(v.run(1, {T({2}, {1, 2}), T({2, 3}, {1, 0, 2, 0, 1, 3})}),
                            T({3}, {1, 2, 8}), 0, 0, "vector-matrix"));
  OneNode dot("MatMul", {{S}, {S}});
  ASSERT_TRUE(dot.infer().ok());
  EXPECT_TRUE(
      tensors_close(dot.run(3, {T({3}, {1, 2, 3}), T({3}, {4, 5, 6})}), T({}, {32}), 0, 0, "dot"));
  // a [2, 1, 2] (two 1x2 rows) times b [2, 1], shared by both batches.
  OneNode bt("MatMul", {{C(2), C(1), C(2)}, {C(2), C(1)}});
  ASSERT_TRUE(bt.infer().ok());
  EXPECT_TRUE(tensors_close(bt.run(1, {T({2, 1, 2}, {1, 2, 3, 4}), T({2, 1}, {10, 1})}),
                            T({2, 1, 1}, {12, 34}), 0, 0, "batched"));
  // a broadcast over b's batch of 2, and a batch dim of S on b.
  OneNode b2("MatMul", {{C(1), C(1), C(2)}, {S, C(2), C(1)}});
  ASSERT_TRUE(b2.infer().ok());
  EXPECT_TRUE(tensors_close(b2.run(2, {T({1, 1, 2}, {1, 2}), T({2, 2, 1}, {1, 1, 2, 3})}),
                            T({2, 1, 1}, {3, 8}), 0, 0, "broadcast a"));
}

TEST(Gemm, Values) {
  // A^T [2, S] with S = 2, B^T [3, 2], C [3], alpha 2, beta 0.5.
  OneNode t("Gemm", {{C(2), S}, {C(3), C(2)}, {C(3)}},
            {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 2.0}, {"beta", 0.5}});
  ASSERT_TRUE(t.infer().ok());
  // A = [[1, 3], [2, 4]] (stored transposed), B = [[1, 0, 1], [0, 1, 1]]:
  // A·B = [[1, 3, 4], [2, 4, 6]]; 2·A·B + 0.5·C.
  EXPECT_TRUE(tensors_close(
      t.run(2, {T({2, 2}, {1, 2, 3, 4}), T({3, 2}, {1, 0, 0, 1, 1, 1}), T({3}, {10, 20, 30})}),
      T({2, 3}, {7, 16, 23, 9, 18, 27}), 0, 1e-12, "gemm"));
  OneNode col("Gemm", {{S, C(1)}, {C(1), C(2)}, {S, C(1)}});
  ASSERT_TRUE(col.infer().ok());
  EXPECT_TRUE(tensors_close(col.run(2, {T({2, 1}, {1, 2}), T({1, 2}, {3, 4}), T({2, 1}, {1, -1})}),
                            T({2, 2}, {4, 5, 5, 7}), 0, 0, "C column broadcast"));
  OneNode scalar("Gemm", {{S, C(1)}, {C(1), C(2)}, {}});
  ASSERT_TRUE(scalar.infer().ok());
  EXPECT_TRUE(tensors_close(scalar.run(1, {T({1, 1}, {2}), T({1, 2}, {3, 4}), T({}, {-1})}),
                            T({1, 2}, {5, 7}), 0, 0, "scalar C"));
  OneNode noc("Gemm", {{S, C(1)}, {C(1), C(1)}});
  ASSERT_TRUE(noc.infer().ok());
  EXPECT_TRUE(tensors_close(noc.run(3, {T({3, 1}, {1, 2, 3}), T({1, 1}, {-2})}),
                            T({3, 1}, {-2, -4, -6}), 0, 0, "no C"));
}

TEST(MatMul, ChainsThroughAGraph) {
  ir::Graph g = kiln::testing::import_text_ok(R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 64] x, float[64, 16] w, double[N, 3] d, double[3, 2] e) =>
      (float[N, 16] y, double[N, 2] z) {
      h = MatMul(x, w)
      y = Relu(h)
      z = Gemm<alpha = 0.5>(d, e)
    })",
                                              ImportOptions{"N", {}});
  EXPECT_EQ(g.values[g.find_value("y")].shape, (Shape{S, C(16)}));
  EXPECT_EQ(g.values[g.find_value("z")].dtype, DType::kF64);
  EXPECT_TRUE(ir::graph_verify(g).ok());
}

// The kernels re-check what they rely on: they may be called with any tensors.
TEST(MatMul, ReferenceRechecksItsInputs) {
  const RefTensor a = T({2, 3}, {1, 2, 3, 4, 5, 6}), b = T({2, 2}, {1, 2, 3, 4});
  const RefTensor short_data = T({2, 2}, {1}), c = T({3}, {1, 2, 3}), scalar = T({}, {1});
  EXPECT_NE(ref_error("MatMul", {&a, &b}).find("inner dims of [2, 3] and [2, 2] differ"),
            std::string::npos);
  EXPECT_NE(ref_error("MatMul", {&b, &short_data}).find("input 1 holds 1 values"),
            std::string::npos);
  EXPECT_NE(ref_error("MatMul", {&scalar, &b}).find("rank 0"), std::string::npos);
  EXPECT_NE(ref_error("Gemm", {&b, &b, &c}).find("C [3] does not broadcast to [2, 2]"),
            std::string::npos);
  EXPECT_NE(ref_error("Gemm", {&c, &b}).find("must be 2-D"), std::string::npos);
  EXPECT_EQ(ref_error("Gemm", {&b, &b, &scalar}), "ok");
}

// ---- ONNX node tests --------------------------------------------------------------------------

class MatMulNodeTest : public ::testing::TestWithParam<const char*> {};

// Every output within rtol 1e-5, atol 1e-6: the expected data are float32 numpy results, which
// differ from a float64 product by a few float32 ulps.
TEST_P(MatMulNodeTest, MatchesOnnxData) {
  kiln::testing::check_onnx_node_test(GetParam(), {.rtol = 1e-5, .atol = 1e-6});
}

INSTANTIATE_TEST_SUITE_P(
    Onnx, MatMulNodeTest,
    ::testing::Values("test_matmul_2d", "test_matmul_3d", "test_matmul_4d",
                      "test_gemm_all_attributes", "test_gemm_alpha", "test_gemm_beta",
                      "test_gemm_default_matrix_bias", "test_gemm_default_no_bias",
                      "test_gemm_default_scalar_bias", "test_gemm_default_single_elem_vector_bias",
                      "test_gemm_default_vector_bias", "test_gemm_default_zero_bias",
                      "test_gemm_transposeA", "test_gemm_transposeB"),
    kiln::testing::NodeTestName());

}  // namespace
}  // namespace kiln::compiler
