#include "compiler/ir/ir.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::ir {
namespace {

TEST(DimExpr, ToString) {
  EXPECT_EQ(DimExpr::constant(128).to_string(), "128");
  EXPECT_EQ(DimExpr::constant(0).to_string(), "0");
  EXPECT_EQ(DimExpr::constant(-5).to_string(), "-5");
  EXPECT_EQ(DimExpr::size().to_string(), "S");
  EXPECT_EQ(DimExpr::size(4).to_string(), "4*S");
  EXPECT_EQ(DimExpr::size(2, 1).to_string(), "2*S+1");
  EXPECT_EQ(DimExpr::size(2, -3).to_string(), "2*S-3");
  EXPECT_EQ(DimExpr::size(-1).to_string(), "-S");
  EXPECT_EQ(DimExpr::size(-3, 7).to_string(), "-3*S+7");
  EXPECT_EQ(DimExpr::size(1, 1).to_string(), "S+1");
}

TEST(DimExpr, EvalAndEquality) {
  EXPECT_EQ(DimExpr::size(2, 1).eval(5), 11);
  EXPECT_EQ(DimExpr::constant(7).eval(100), 7);
  EXPECT_TRUE(DimExpr::constant(7).is_constant());
  EXPECT_FALSE(DimExpr::size().is_constant());
  EXPECT_EQ(DimExpr::size(), (DimExpr{1, 0}));
  EXPECT_NE(DimExpr::size(), DimExpr::constant(1));
}

TEST(DimExpr, Mul) {
  EXPECT_EQ(dim_mul(DimExpr::constant(3), DimExpr::constant(4)), DimExpr::constant(12));
  EXPECT_EQ(dim_mul(DimExpr::constant(3), DimExpr::size(2, 1)), DimExpr::size(6, 3));
  EXPECT_EQ(dim_mul(DimExpr::size(2, 1), DimExpr::constant(3)), DimExpr::size(6, 3));
  EXPECT_EQ(dim_mul(DimExpr::size(), DimExpr::size()), std::nullopt);
  // Overflow is not linear either.
  EXPECT_EQ(dim_mul(DimExpr::constant(int64_t{1} << 40), DimExpr::constant(int64_t{1} << 40)),
            std::nullopt);
  EXPECT_EQ(dim_mul(DimExpr::constant(int64_t{1} << 40), DimExpr::size(int64_t{1} << 40)),
            std::nullopt);
}

TEST(Shape, ToStringAndNumel) {
  EXPECT_EQ(shape_to_string({DimExpr::size(), DimExpr::constant(128)}), "[S, 128]");
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_numel({DimExpr::size(), DimExpr::constant(128)}), DimExpr::size(128));
  EXPECT_EQ(shape_numel({DimExpr::constant(2), DimExpr::size(1, 1), DimExpr::constant(3)}),
            DimExpr::size(6, 6));
  EXPECT_EQ(shape_numel({}), DimExpr::constant(1));
  EXPECT_EQ(shape_numel({DimExpr::size(), DimExpr::size()}), std::nullopt);
}

TEST(Node, AttrGetters) {
  Node n;
  n.attrs["i"] = int64_t{3};
  n.attrs["f"] = 0.5;
  n.attrs["s"] = std::string("x");
  n.attrs["ints"] = std::vector<int64_t>{1, 2};
  EXPECT_EQ(n.attr_int("i", 9), 3);
  EXPECT_EQ(n.attr_int("missing", 9), 9);
  EXPECT_EQ(n.attr_int("f", 9), 9);  // wrong type: fallback
  EXPECT_DOUBLE_EQ(n.attr_float("f", 1.0), 0.5);
  EXPECT_DOUBLE_EQ(n.attr_float("i", 1.0), 3.0);  // ints read as floats
  EXPECT_DOUBLE_EQ(n.attr_float("missing", 1.0), 1.0);
  EXPECT_EQ(n.attr_ints("ints"), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(n.attr_ints("missing").empty());
  EXPECT_TRUE(n.attr_ints("i").empty());
}

Value make_value(const std::string& name, Shape shape, DType dt = DType::kF32) {
  Value v;
  v.name = name;
  v.dtype = dt;
  v.shape = std::move(shape);
  return v;
}

// x:f32[S,64] -> MatMul(x, w:[64,128]) -> h -> Relu -> y
Graph small_graph() {
  Graph g;
  g.name = "small";
  const int x = g.add_value(make_value("x", {DimExpr::size(), DimExpr::constant(64)}));
  Value w = make_value("w", {DimExpr::constant(64), DimExpr::constant(128)});
  w.constant = Constant{{64, 128}, std::vector<uint8_t>(64 * 128 * 4, 0)};
  const int wi = g.add_value(std::move(w));
  Value h = make_value("h", {DimExpr::size(), DimExpr::constant(128)});
  h.producer = 0;
  const int hi = g.add_value(std::move(h));
  Value y = make_value("y", {DimExpr::size(), DimExpr::constant(128)});
  y.producer = 1;
  const int yi = g.add_value(std::move(y));
  Node mm;
  mm.name = "fc";
  mm.op = "MatMul";
  mm.inputs = {x, wi};
  mm.outputs = {hi};
  Node relu;
  relu.name = "act";
  relu.op = "Relu";
  relu.inputs = {hi};
  relu.outputs = {yi};
  g.nodes = {mm, relu};
  g.inputs = {x};
  g.outputs = {yi};
  return g;
}

TEST(Graph, FindAndAddValue) {
  Graph g = small_graph();
  EXPECT_EQ(g.find_value("x"), 0);
  EXPECT_EQ(g.find_value("y"), 3);
  EXPECT_EQ(g.find_value("nope"), -1);
  EXPECT_EQ(g.add_value(make_value("z", {})), 4);
  EXPECT_EQ(g.find_value("z"), 4);
}

TEST(GraphVerify, AcceptsValidGraph) {
  Status s = graph_verify(small_graph());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

void expect_invalid(const Graph& g, const std::string& needle) {
  Status s = graph_verify(g);
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(GraphVerify, InputIdOutOfRange) {
  Graph g = small_graph();
  g.nodes[1].inputs = {17};
  expect_invalid(g, "input id 17 out of range");
}

TEST(GraphVerify, ValueProducedTwice) {
  Graph g = small_graph();
  g.nodes[1].outputs = {2};  // Relu also claims 'h'
  expect_invalid(g, "'h' already has a producer");
}

TEST(GraphVerify, ProducerFieldInconsistent) {
  Graph g = small_graph();
  g.values[3].producer = 0;  // 'y' says MatMul produced it
  expect_invalid(g, "'y' records producer 0");
  Graph g2 = small_graph();
  g2.values.push_back(make_value("ghost", {}));
  g2.values.back().producer = 1;  // claims Relu, which does not output it
  expect_invalid(g2, "'ghost' records producer 1");
}

TEST(GraphVerify, NotTopological) {
  Graph g = small_graph();
  std::swap(g.nodes[0], g.nodes[1]);
  g.values[2].producer = 1;
  g.values[3].producer = 0;
  expect_invalid(g, "not in topological order");
}

TEST(GraphVerify, MissingDtype) {
  Graph g = small_graph();
  g.values[2].dtype = DType::kUnspecified;
  expect_invalid(g, "'h' has no dtype");
}

TEST(GraphVerify, GraphInputProducedByNode) {
  Graph g = small_graph();
  g.inputs.push_back(3);
  expect_invalid(g, "graph input 'y' is produced by node 1");
}

TEST(GraphVerify, DuplicateNamesAndBadConstants) {
  Graph g = small_graph();
  g.values[2].name = "x";
  expect_invalid(g, "'x' is used twice");
  Graph g2 = small_graph();
  g2.values[1].constant->bytes.resize(12);
  expect_invalid(g2, "constant 'w' holds 12 bytes");
  Graph g3 = small_graph();
  g3.values[1].shape[0] = DimExpr::size();
  expect_invalid(g3, "constant 'w' has dims that disagree");
}

TEST(GraphVerify, DanglingInputAndOutput) {
  Graph g = small_graph();
  const int orphan = g.add_value(make_value("orphan", {}));
  g.nodes[1].inputs = {orphan};
  expect_invalid(g, "input 'orphan' is not a graph input");
  Graph g2 = small_graph();
  g2.outputs.push_back(g2.add_value(make_value("lost", {})));
  expect_invalid(g2, "graph output 'lost' is produced by nothing");
}

TEST(GraphToText, GoldenText) {
  Graph g = small_graph();
  g.nodes[0].attrs["zeta"] = 0.5;
  g.nodes[0].attrs["alpha"] = int64_t{2};
  g.nodes[0].attrs["perm"] = std::vector<int64_t>{1, 0};
  g.nodes[0].attrs["mode"] = std::string("fast");
  EXPECT_EQ(graph_to_text(g),
            "graph small\n"
            "input %x:f32[S,64]\n"
            "%w = const f32[64,128]\n"
            "%h:f32[S,128] = MatMul(%x, %w) {alpha=2, mode=\"fast\", perm=[1,0], zeta=0.5}\n"
            "%y:f32[S,128] = Relu(%h)\n"
            "output %y\n");
  EXPECT_EQ(graph_to_text(g), graph_to_text(g));
}

TEST(GraphToText, OmittedInputAndScalar) {
  Graph g = small_graph();
  g.nodes[1].inputs = {2, -1};
  g.values[3].shape = {};
  const std::string text = graph_to_text(g);
  EXPECT_NE(text.find("%y:f32[] = Relu(%h, none)\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::ir
