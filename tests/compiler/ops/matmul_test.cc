// The matmul family (compiler/ops/matmul.cc): MatMul and Gemm shapes (symbolic in S), values on
// hand-checked cases, errors, and ONNX's own node tests. The shape cases come from the old
// single-table shape inference this family replaced.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/graph_infer.h"
#include "compiler/onnx_tensor.h"
#include "compiler/op_registry.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using ir::DimExpr;
using ir::Shape;
using kiln::testing::tensors_close;

const DimExpr S = DimExpr::size();
DimExpr C(int64_t v) { return DimExpr::constant(v); }

// A graph with typed inputs a, b, c... and one node `op` over them, inferred by graph_infer.
struct OneNode {
  ir::Graph g;
  OneNode(const std::string& op, const std::vector<Shape>& shapes,
          std::map<std::string, ir::AttrValue> attrs = {}, DType dt = DType::kF32) {
    ir::Node n;
    n.name = "n0";
    n.op = op;
    n.attrs = std::move(attrs);
    for (size_t i = 0; i < shapes.size(); ++i) {
      ir::Value v;
      v.name = std::string(1, static_cast<char>('a' + i));
      v.shape = shapes[i];
      v.dtype = dt;
      n.inputs.push_back(g.add_value(v));
      g.inputs.push_back(n.inputs.back());
    }
    ir::Value y;
    y.name = "y";
    y.producer = 0;
    n.outputs.push_back(g.add_value(y));
    g.outputs.push_back(n.outputs.back());
    g.nodes.push_back(n);
    g.opsets[""] = 17;
  }
  Status infer() { return graph_infer(g, InferOptions{}); }
  const ir::Value& out() const { return g.values[g.outputs[0]]; }
  RefTensor run(int64_t size, const std::vector<RefTensor>& ins) {
    std::map<std::string, RefTensor> m;
    for (size_t i = 0; i < ins.size(); ++i) m[std::string(1, static_cast<char>('a' + i))] = ins[i];
    Result<std::map<std::string, RefTensor>> r = reference_run(g, size, m);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->at("y") : RefTensor{};
  }
};

Shape infer_ok(OneNode&& t) {
  Status s = t.infer();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(t.out().dtype, DType::kF32);
  return s.ok() ? t.out().shape : Shape{};
}

void expect_error(OneNode&& t, StatusCode code, const std::vector<std::string>& needles) {
  Status s = t.infer();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const auto& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
}

RefTensor F(std::vector<int64_t> dims, std::vector<double> data) {
  RefTensor t;
  t.dims = std::move(dims);
  t.data = std::move(data);
  return t;
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
  EXPECT_TRUE(tensors_close(t.run(2, {F({2, 2}, {1, 2, 3, 4}), F({2, 3}, {1, 0, 2, 0, 1, 3})}),
                            F({2, 3}, {1, 2, 8, 3, 4, 18}), 0, 0, "matrix"));
  OneNode v("MatMul", {{C(2)}, {C(2), C(3)}});
  ASSERT_TRUE(v.infer().ok());
  EXPECT_TRUE(tensors_close(v.run(1, {F({2}, {1, 2}), F({2, 3}, {1, 0, 2, 0, 1, 3})}),
                            F({3}, {1, 2, 8}), 0, 0, "vector-matrix"));
  OneNode dot("MatMul", {{S}, {S}});
  ASSERT_TRUE(dot.infer().ok());
  EXPECT_TRUE(
      tensors_close(dot.run(3, {F({3}, {1, 2, 3}), F({3}, {4, 5, 6})}), F({}, {32}), 0, 0, "dot"));
  // a [2, 1, 2] (two 1x2 rows) times b [2, 1], shared by both batches.
  OneNode bt("MatMul", {{C(2), C(1), C(2)}, {C(2), C(1)}});
  ASSERT_TRUE(bt.infer().ok());
  EXPECT_TRUE(tensors_close(bt.run(1, {F({2, 1, 2}, {1, 2, 3, 4}), F({2, 1}, {10, 1})}),
                            F({2, 1, 1}, {12, 34}), 0, 0, "batched"));
  // a broadcast over b's batch of 2, and a batch dim of S on b.
  OneNode b2("MatMul", {{C(1), C(1), C(2)}, {S, C(2), C(1)}});
  ASSERT_TRUE(b2.infer().ok());
  EXPECT_TRUE(tensors_close(b2.run(2, {F({1, 1, 2}, {1, 2}), F({2, 2, 1}, {1, 1, 2, 3})}),
                            F({2, 1, 1}, {3, 8}), 0, 0, "broadcast a"));
}

TEST(Gemm, Values) {
  // A^T [2, S] with S = 2, B^T [3, 2], C [3], alpha 2, beta 0.5.
  OneNode t("Gemm", {{C(2), S}, {C(3), C(2)}, {C(3)}},
            {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 2.0}, {"beta", 0.5}});
  ASSERT_TRUE(t.infer().ok());
  // A = [[1, 3], [2, 4]] (stored transposed), B = [[1, 0, 1], [0, 1, 1]]:
  // A·B = [[1, 3, 4], [2, 4, 6]]; 2·A·B + 0.5·C.
  EXPECT_TRUE(tensors_close(
      t.run(2, {F({2, 2}, {1, 2, 3, 4}), F({3, 2}, {1, 0, 0, 1, 1, 1}), F({3}, {10, 20, 30})}),
      F({2, 3}, {7, 16, 23, 9, 18, 27}), 0, 1e-12, "gemm"));
  OneNode col("Gemm", {{S, C(1)}, {C(1), C(2)}, {S, C(1)}});
  ASSERT_TRUE(col.infer().ok());
  EXPECT_TRUE(tensors_close(col.run(2, {F({2, 1}, {1, 2}), F({1, 2}, {3, 4}), F({2, 1}, {1, -1})}),
                            F({2, 2}, {4, 5, 5, 7}), 0, 0, "C column broadcast"));
  OneNode scalar("Gemm", {{S, C(1)}, {C(1), C(2)}, {}});
  ASSERT_TRUE(scalar.infer().ok());
  EXPECT_TRUE(tensors_close(scalar.run(1, {F({1, 1}, {2}), F({1, 2}, {3, 4}), F({}, {-1})}),
                            F({1, 2}, {5, 7}), 0, 0, "scalar C"));
  OneNode noc("Gemm", {{S, C(1)}, {C(1), C(1)}});
  ASSERT_TRUE(noc.infer().ok());
  EXPECT_TRUE(tensors_close(noc.run(3, {F({3, 1}, {1, 2, 3}), F({1, 1}, {-2})}),
                            F({3, 1}, {-2, -4, -6}), 0, 0, "no C"));
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
  auto err = [](const std::string& op, const std::vector<const RefTensor*>& in) {
    ir::Node n;
    n.op = op;
    auto r = op_find("", op)->ref(n, in);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  const RefTensor a = F({2, 3}, {1, 2, 3, 4, 5, 6}), b = F({2, 2}, {1, 2, 3, 4});
  const RefTensor short_data = F({2, 2}, {1}), c = F({3}, {1, 2, 3}), scalar = F({}, {1});
  EXPECT_NE(err("MatMul", {&a, &b}).find("inner dims of [2, 3] and [2, 2] differ"),
            std::string::npos);
  EXPECT_NE(err("MatMul", {&b, &short_data}).find("input 1 holds 1 values"), std::string::npos);
  EXPECT_NE(err("MatMul", {&scalar, &b}).find("rank 0"), std::string::npos);
  EXPECT_NE(err("Gemm", {&b, &b, &c}).find("C [3] does not broadcast to [2, 2]"),
            std::string::npos);
  EXPECT_NE(err("Gemm", {&c, &b}).find("must be 2-D"), std::string::npos);
  EXPECT_EQ(err("Gemm", {&b, &b, &scalar}), "ok");
}

// ---- ONNX node tests --------------------------------------------------------------------------

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

RefTensor read_pb(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  onnx::TensorProto t;
  EXPECT_TRUE(t.ParseFromIstream(&f)) << p;
  Result<OnnxConstant> c = onnx_tensor_to_constant(t, p.string(), p.parent_path());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return {};
  ir::Value v;
  v.name = p.string();
  v.dtype = c->dtype;
  v.constant = c->constant;
  Result<RefTensor> r = reference_decode_constant(v);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : RefTensor{};
}

// Imports ONNX's node test `name`, runs the reference on test_data_set_0 and compares every
// output (rtol 1e-5, atol 1e-6: the expected data are float32 numpy results, which differ from
// a float64 product by a few float32 ulps).
void check_node_test(const std::string& name) {
  const fs::path dir = kNodeTests / name;
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " not installed";
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
  const fs::path data = dir / "test_data_set_0";
  std::map<std::string, RefTensor> in;
  for (size_t i = 0; i < g->inputs.size(); ++i)
    in[g->values[g->inputs[i]].name] = read_pb(data / fmt::format("input_{}.pb", i));
  auto out = reference_run(*g, 1, in);
  ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
  for (size_t j = 0; j < g->outputs.size(); ++j) {
    const std::string& o = g->values[g->outputs[j]].name;
    EXPECT_TRUE(tensors_close(out->at(o), read_pb(data / fmt::format("output_{}.pb", j)), 1e-5,
                              1e-6, name + " " + o));
  }
}

class MatMulNodeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MatMulNodeTest, MatchesOnnxData) { check_node_test(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Onnx, MatMulNodeTest,
    ::testing::Values("test_matmul_2d", "test_matmul_3d", "test_matmul_4d",
                      "test_gemm_all_attributes", "test_gemm_alpha", "test_gemm_beta",
                      "test_gemm_default_matrix_bias", "test_gemm_default_no_bias",
                      "test_gemm_default_scalar_bias", "test_gemm_default_single_elem_vector_bias",
                      "test_gemm_default_vector_bias", "test_gemm_default_zero_bias",
                      "test_gemm_transposeA", "test_gemm_transposeB"),
    [](const auto& info) { return std::string(info.param).substr(5); });

}  // namespace
}  // namespace kiln::compiler
