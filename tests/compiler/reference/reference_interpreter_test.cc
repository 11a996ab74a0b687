#include "compiler/reference/reference_interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/onnx_tensor.h"
#include "compiler/ir/graph_infer.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using ir::DimExpr;
using ir::Shape;

using kiln::testing::source_root;

RefTensor tensor(std::vector<int64_t> dims, std::vector<double> data) {
  RefTensor t;
  t.dims = std::move(dims);
  t.data = std::move(data);
  return t;
}

// Reads an ONNX backend-test TensorProto file into a RefTensor (float32 only).
std::pair<std::string, RefTensor> read_pb(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  onnx::TensorProto t;
  EXPECT_TRUE(t.ParseFromIstream(&f)) << p;
  Result<OnnxConstant> c = onnx_tensor_to_constant(t, t.name(), p.parent_path());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dtype, DType::kF32);
  RefTensor r;
  r.dims = c->constant.dims;
  r.data.resize(c->constant.bytes.size() / 4);
  for (size_t i = 0; i < r.data.size(); ++i) {
    float v;
    std::memcpy(&v, c->constant.bytes.data() + 4 * i, 4);
    r.data[i] = v;
  }
  return {t.name(), r};
}

void expect_near(const RefTensor& got, const RefTensor& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.dims, want.dims) << what;
  ASSERT_EQ(got.data.size(), want.data.size()) << what;
  for (size_t i = 0; i < got.data.size(); ++i)
    ASSERT_LE(std::abs(got.data[i] - want.data[i]), atol + rtol * std::abs(want.data[i]))
        << what << " element " << i << ": got " << got.data[i] << ", want " << want.data[i];
}

// ---- against the numpy-computed backend-test data ----------------------------------------------

class MlpSoftmax : public ::testing::TestWithParam<int> {};

TEST_P(MlpSoftmax, MatchesNumpyOutputs) {
  const fs::path dir = source_root() / "tests/models/mlp_softmax";
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"batch", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const fs::path data = dir / ("test_data_set_" + std::to_string(GetParam()));
  auto [in_name, x] = read_pb(data / "input_0.pb");
  EXPECT_EQ(in_name, "x");
  Result<std::map<std::string, RefTensor>> out = reference_run(*g, x.dims[0], {{in_name, x}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 2u);
  for (const char* file : {"output_0.pb", "output_1.pb"}) {
    auto [name, want] = read_pb(data / file);
    ASSERT_TRUE(out->contains(name)) << name;
    EXPECT_EQ(out->at(name).dtype, DType::kF32);
    // The expected values are float64 results rounded to float32: rtol 1e-5 is ample.
    expect_near(out->at(name), want, 1e-5, 1e-7, name);
  }
}

INSTANTIATE_TEST_SUITE_P(TestDataSets, MlpSoftmax, ::testing::Values(0, 1));

// ---- hand-computed cases -----------------------------------------------------------------------

// A graph of one node `op` over f32 inputs (shapes in S), output shape inferred.
struct OneNode {
  ir::Graph g;
  OneNode(const std::string& op, const std::vector<Shape>& shapes,
          std::map<std::string, ir::AttrValue> attrs = {}) {
    ir::Node n;
    n.name = "n0";
    n.op = op;
    n.attrs = std::move(attrs);
    for (size_t i = 0; i < shapes.size(); ++i) {
      ir::Value v;
      v.name = std::string(1, static_cast<char>('a' + i));
      v.dtype = DType::kF32;
      v.shape = shapes[i];
      n.inputs.push_back(g.add_value(v));
      g.inputs.push_back(n.inputs.back());
    }
    ir::Value y;
    y.name = "y";
    y.producer = 0;
    n.outputs.push_back(g.add_value(y));
    g.outputs.push_back(n.outputs.back());
    g.nodes.push_back(n);
    Status s = graph_infer(g, InferOptions{});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  RefTensor run(int64_t size, const std::vector<RefTensor>& ins) {
    std::map<std::string, RefTensor> m;
    for (size_t i = 0; i < ins.size(); ++i) m[std::string(1, static_cast<char>('a' + i))] = ins[i];
    Result<std::map<std::string, RefTensor>> r = reference_run(g, size, m);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->at("y") : RefTensor{};
  }
};

const DimExpr S = DimExpr::size();
DimExpr C(int64_t v) { return DimExpr::constant(v); }

TEST(Reference, MatMul) {
  OneNode t("MatMul", {{S, C(2)}, {C(2), C(3)}});
  RefTensor y = t.run(2, {tensor({2, 2}, {1, 2, 3, 4}), tensor({2, 3}, {1, 0, 2, 0, 1, 3})});
  expect_near(y, tensor({2, 3}, {1, 2, 8, 3, 4, 18}), 0, 0, "matmul");
  OneNode v("MatMul", {{C(2)}, {C(2), C(3)}});
  expect_near(v.run(1, {tensor({2}, {1, 2}), tensor({2, 3}, {1, 0, 2, 0, 1, 3})}),
              tensor({3}, {1, 2, 8}), 0, 0, "vector-matrix");
  // Batched with broadcast: a [2, 1, 2] (two 1x2 rows) times b [2, 1] (shared).
  OneNode bt("MatMul", {{C(2), C(1), C(2)}, {C(2), C(1)}});
  expect_near(bt.run(1, {tensor({2, 1, 2}, {1, 2, 3, 4}), tensor({2, 1}, {10, 1})}),
              tensor({2, 1, 1}, {12, 34}), 0, 0, "batched");
  OneNode b2("MatMul", {{C(1), C(1), C(2)}, {C(2), C(2), C(1)}});
  expect_near(b2.run(1, {tensor({1, 1, 2}, {1, 2}), tensor({2, 2, 1}, {1, 1, 2, 3})}),
              tensor({2, 1, 1}, {3, 8}), 0, 0, "broadcast a");
}

TEST(Reference, Gemm) {
  // A^T [2, S] with S = 2, B^T [3, 2], C [3], alpha 2, beta 0.5.
  OneNode t("Gemm", {{C(2), S}, {C(3), C(2)}, {C(3)}},
            {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 2.0}, {"beta", 0.5}});
  // A = [[1, 3], [2, 4]] (so A^T stored as [[1, 2], [3, 4]]), B = [[1, 0, 1], [0, 1, 1]].
  RefTensor y = t.run(2, {tensor({2, 2}, {1, 2, 3, 4}), tensor({3, 2}, {1, 0, 0, 1, 1, 1}),
                          tensor({3}, {10, 20, 30})});
  // A = rows [1,3],[2,4]; A·B = [[1,3,4],[2,4,6]]; 2*that + 0.5*C.
  expect_near(y, tensor({2, 3}, {7, 16, 23, 9, 18, 27}), 0, 1e-12, "gemm");
  OneNode col("Gemm", {{S, C(1)}, {C(1), C(2)}, {S, C(1)}});
  expect_near(col.run(2, {tensor({2, 1}, {1, 2}), tensor({1, 2}, {3, 4}), tensor({2, 1}, {1, -1})}),
              tensor({2, 2}, {4, 5, 5, 7}), 0, 0, "C column broadcast");
  OneNode noc("Gemm", {{S, C(1)}, {C(1), C(1)}});
  expect_near(noc.run(3, {tensor({3, 1}, {1, 2, 3}), tensor({1, 1}, {-2})}),
              tensor({3, 1}, {-2, -4, -6}), 0, 0, "no C");
}

TEST(Reference, ElementwiseBroadcast) {
  const RefTensor a = tensor({2, 1}, {1, 2}), b = tensor({3}, {10, 20, 40});
  const std::map<std::string, std::vector<double>> want = {
      {"Add", {11, 21, 41, 12, 22, 42}},
      {"Sub", {-9, -19, -39, -8, -18, -38}},
      {"Mul", {10, 20, 40, 20, 40, 80}},
      {"Div", {0.1, 0.05, 0.025, 0.2, 0.1, 0.05}}};
  for (const auto& [op, w] : want) {
    OneNode t(op, {{S, C(1)}, {C(3)}});
    expect_near(t.run(2, {a, b}), tensor({2, 3}, w), 1e-15, 0, op);
  }
}

TEST(Reference, Unary) {
  const RefTensor x = tensor({1, 4}, {-2, 0, 0.5, 800});
  expect_near(OneNode("Relu", {{S, C(4)}}).run(1, {x}), tensor({1, 4}, {0, 0, 0.5, 800}), 0, 0,
              "relu");
  expect_near(OneNode("Tanh", {{S, C(4)}}).run(1, {x}),
              tensor({1, 4}, {std::tanh(-2.0), 0, std::tanh(0.5), 1}), 1e-15, 0, "tanh");
  const RefTensor big = tensor({1, 4}, {-800, 0, 2, 800});
  expect_near(OneNode("Sigmoid", {{S, C(4)}}).run(1, {big}),
              tensor({1, 4}, {std::exp(-800.0), 0.5, 1 / (1 + std::exp(-2.0)), 1}), 1e-15, 0,
              "sigmoid");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RefTensor r = OneNode("Relu", {{S}}).run(1, {tensor({1}, {nan})});
  EXPECT_TRUE(std::isnan(r.data[0])) << "NaN must propagate through Relu";
}

TEST(Reference, SoftmaxIsStable) {
  OneNode t("Softmax", {{S, C(2)}});
  const double e = 1 / (1 + std::exp(1.0));  // softmax([0, 1])[0]
  RefTensor y = t.run(2, {tensor({2, 2}, {1000, 1001, -1000, -999})});
  expect_near(y, tensor({2, 2}, {e, 1 - e, e, 1 - e}), 1e-14, 0, "softmax large logits");
  OneNode ax0("Softmax", {{S, C(2)}}, {{"axis", int64_t{0}}});
  RefTensor z = ax0.run(2, {tensor({2, 2}, {0, 5, 1, 5})});
  expect_near(z, tensor({2, 2}, {e, 0.5, 1 - e, 0.5}), 1e-14, 0, "softmax axis 0");
  OneNode mid("Softmax", {{C(1), S, C(1)}}, {{"axis", int64_t{1}}});
  expect_near(mid.run(3, {tensor({1, 3, 1}, {0, 0, 0})}),
              tensor({1, 3, 1}, {1. / 3, 1. / 3, 1. / 3}), 1e-15, 0, "softmax middle axis");
}

TEST(Reference, IdentityDropoutAndConstants) {
  OneNode t("Dropout", {{S, C(2)}});
  expect_near(t.run(1, {tensor({1, 2}, {3, -4})}), tensor({1, 2}, {3, -4}), 0, 0, "dropout");
  OneNode i("Identity", {{S}});
  expect_near(i.run(2, {tensor({2}, {1, 2})}), tensor({2}, {1, 2}), 0, 0, "identity");
  // A constant operand, stored as f32 bytes.
  OneNode c("Add", {{S, C(2)}, {C(2)}});
  ir::Value& k = c.g.values[1];
  const float kv[2] = {0.5f, -1.25f};
  k.constant = ir::Constant{{2},
                            std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(kv),
                                                 reinterpret_cast<const uint8_t*>(kv) + 8)};
  c.g.inputs = {0};
  Result<std::map<std::string, RefTensor>> r =
      reference_run(c.g, 1, {{"a", tensor({1, 2}, {1, 1})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_near(r->at("y"), tensor({1, 2}, {1.5, -0.25}), 0, 0, "constant operand");
}

// An f32 constant converted straight to f16 / bf16 (what precision lowering does to the weights)
// rounds every value exactly as decoding it to float64 and encoding that does: random values over
// every exponent, ties, subnormals of both 16-bit types, infinities and NaN.
TEST(Reference, F32ConstantEncodesAsTheFloat64Path) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -2.5f,
                           65504.0f,
                           65520.0f,
                           1e-8f,
                           6e-8f,
                           -3e-5f,
                           1e30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           1.0009765625f,
                           1.00048828125f,
                           1.00146484375f};  // the last three: f16 ties
  std::srand(7);
  for (int i = 0; i < 20000; ++i) {
    uint32_t bits = (static_cast<uint32_t>(std::rand()) << 16) ^ static_cast<uint32_t>(std::rand());
    float f;
    std::memcpy(&f, &bits, 4);
    xs.push_back(f);
  }
  ir::Value v;
  v.name = "w";
  v.dtype = DType::kF32;
  v.constant = ir::Constant{
      {static_cast<int64_t>(xs.size())},
      std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(xs.data()),
                           reinterpret_cast<const uint8_t*>(xs.data()) + 4 * xs.size())};
  Result<RefTensor> t = reference_decode_constant(v);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (DType to : {DType::kF16, DType::kBF16}) {
    Result<std::vector<uint8_t>> slow = reference_encode(*t, to);
    Result<std::vector<uint8_t>> fast = reference_encode_f32_constant(v, to);
    ASSERT_TRUE(slow.ok() && fast.ok()) << dtype_name(to);
    EXPECT_EQ(*fast, *slow) << dtype_name(to);
  }
  // Not an f32 constant of its dims, or not a 16-bit float target: refused.
  ir::Value bad = v;
  bad.constant->bytes.pop_back();
  Result<std::vector<uint8_t>> r = reference_encode_f32_constant(bad, DType::kF16);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("constant 'w'"), std::string::npos) << r.status().message();
  EXPECT_FALSE(reference_encode_f32_constant(v, DType::kF32).ok());
  EXPECT_FALSE(reference_encode_f32_constant(v, DType::kI32).ok());
}

// ---- input checks ------------------------------------------------------------------------------

void expect_run_error(const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& in,
                      const std::vector<std::string>& needles) {
  Result<std::map<std::string, RefTensor>> r = reference_run(g, size, in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  for (const auto& n : needles)
    EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
}

TEST(Reference, InputErrors) {
  OneNode t("Relu", {{S, C(2)}});
  expect_run_error(t.g, 2, {}, {"missing input 'a'"});
  expect_run_error(t.g, 2, {{"a", tensor({2, 2}, {1, 2, 3, 4})}, {"b", tensor({1}, {1})}},
                   {"unknown input 'b'", "graph inputs: a"});
  expect_run_error(t.g, 3, {{"a", tensor({2, 2}, {1, 2, 3, 4})}},
                   {"input 'a' has dims [2, 2]", "[S, 2] = [3, 2] at S=3"});
  expect_run_error(t.g, 2, {{"a", tensor({2, 2}, {1, 2, 3})}}, {"input 'a' holds 3 values"});
  RefTensor h = tensor({2, 2}, {1, 2, 3, 4});
  h.dtype = DType::kF16;
  expect_run_error(t.g, 2, {{"a", h}}, {"input 'a' is f16, the graph expects f32"});
  expect_run_error(t.g, 0, {{"a", tensor({0, 2}, {})}}, {"size 0 must be >= 1"});
}

}  // namespace
}  // namespace kiln::compiler
