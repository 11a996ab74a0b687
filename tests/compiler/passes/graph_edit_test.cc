// Tests for compiler/passes/graph_edit.h: every helper keeps the graph verifiable (topological
// order, producers) and computes what it says.
#include "compiler/passes/graph_edit.h"

#include <gtest/gtest.h>

#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

// x → Neg → a → Abs → y, plus an unused Relu(x) → dead.
ir::Graph small_graph() {
  ir::Graph g;
  g.name = "g";
  g.opsets[""] = 17;
  const ir::Shape s = {ir::DimExpr::size(), ir::DimExpr::constant(4)};
  const int x = graph_new_value(g, "x", DType::kF32, s);
  const int a = graph_new_value(g, "a", DType::kF32, s);
  const int y = graph_new_value(g, "y", DType::kF32, s);
  const int dead = graph_new_value(g, "dead", DType::kF32, s);
  g.inputs = {x};
  g.outputs = {y};
  graph_insert_node(
      g, 0, {.name = "neg", .op = "Neg", .domain = "", .inputs = {x}, .outputs = {a}, .attrs = {}});
  graph_insert_node(
      g, 1, {.name = "abs", .op = "Abs", .domain = "", .inputs = {a}, .outputs = {y}, .attrs = {}});
  graph_insert_node(
      g, 2,
      {.name = "relu", .op = "Relu", .domain = "", .inputs = {x}, .outputs = {dead}, .attrs = {}});
  return g;
}

TEST(GraphEdit, NewValueNamesAreUnique) {
  ir::Graph g;
  const int a = graph_new_value(g, "t", DType::kF32, {});
  const int b = graph_new_value(g, "t", DType::kF32, {});
  const int c = graph_new_value(g, "t", DType::kI64, {ir::DimExpr::size()});
  EXPECT_EQ(g.values[a].name, "t");
  EXPECT_EQ(g.values[b].name, "t_1");
  EXPECT_EQ(g.values[c].name, "t_2");
  EXPECT_EQ(g.values[c].dtype, DType::kI64);
  EXPECT_EQ(g.values[c].producer, -1);
  EXPECT_FALSE(g.values[c].constant.has_value());
}

TEST(GraphEdit, NewConstantRoundTrips) {
  ir::Graph g;
  const int c = graph_new_constant(g, "w", DType::kF32, {2, 2}, {1.5, -2.0, 0.25, 8.0});
  ASSERT_TRUE(g.values[c].constant.has_value());
  EXPECT_EQ(g.values[c].shape, (ir::Shape{ir::DimExpr::constant(2), ir::DimExpr::constant(2)}));
  Result<RefTensor> t = reference_decode_constant(g.values[c]);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t->data, (std::vector<double>{1.5, -2.0, 0.25, 8.0}));
  const int s = graph_new_constant(g, "w", DType::kI64, {}, {7});
  EXPECT_EQ(g.values[s].name, "w_1");
  EXPECT_TRUE(g.values[s].shape.empty());
  EXPECT_EQ(g.values[s].constant->bytes.size(), 8u);
  EXPECT_TRUE(ir::graph_verify(g).ok());
}

TEST(GraphEdit, InsertKeepsProducersRight) {
  ir::Graph g = small_graph();
  ASSERT_TRUE(ir::graph_verify(g).ok());
  // Insert Relu(a) → r before Abs, and make Abs read r.
  const int a = g.find_value("a"), r = graph_new_value(g, "r", DType::kF32, g.values[a].shape);
  const int pos = graph_insert_node(
      g, 1,
      {.name = "mid", .op = "Relu", .domain = "", .inputs = {a}, .outputs = {r}, .attrs = {}});
  EXPECT_EQ(pos, 1);
  g.nodes[2].inputs = {r};
  EXPECT_EQ(g.values[r].producer, 1);
  EXPECT_EQ(g.values[g.find_value("y")].producer, 2);
  EXPECT_EQ(g.values[g.find_value("dead")].producer, 3);
  EXPECT_TRUE(ir::graph_verify(g).ok()) << ir::graph_verify(g).message();
  // Past the end appends.
  const int z = graph_new_value(g, "z", DType::kF32, g.values[a].shape);
  EXPECT_EQ(
      graph_insert_node(
          g, 99,
          {.name = "tail", .op = "Neg", .domain = "", .inputs = {r}, .outputs = {z}, .attrs = {}}),
      4);
  EXPECT_EQ(g.values[z].producer, 4);
}

TEST(GraphEdit, ReplaceNodeKeepsOrderAndProducer) {
  ir::Graph g = small_graph();
  const int a = g.find_value("a"), y = g.find_value("y");
  graph_replace_node(
      g, 1, {.name = "sq", .op = "Relu", .domain = "", .inputs = {a}, .outputs = {y}, .attrs = {}});
  EXPECT_EQ(g.nodes[1].op, "Relu");
  EXPECT_EQ(g.values[y].producer, 1);
  EXPECT_TRUE(ir::graph_verify(g).ok());
}

TEST(GraphEdit, ReplaceUsesRewiresInputsAndOutputs) {
  ir::Graph g = small_graph();
  const int x = g.find_value("x"), a = g.find_value("a"), y = g.find_value("y");
  graph_replace_uses(g, a, x);
  EXPECT_EQ(g.nodes[1].inputs, std::vector<int>{x});
  graph_replace_uses(g, y, a);
  EXPECT_EQ(g.outputs, std::vector<int>{a});
  EXPECT_TRUE(ir::graph_verify(g).ok());
}

TEST(GraphEdit, UsersListsEveryRead) {
  ir::Graph g = small_graph();
  const int x = g.find_value("x"), a = g.find_value("a"), y = g.find_value("y");
  g.nodes[1].inputs = {a, a};  // a node reading twice appears twice
  const auto users = graph_users(g);
  EXPECT_EQ(users[x], (std::vector<int>{0, 2}));
  EXPECT_EQ(users[a], (std::vector<int>{1, 1}));
  EXPECT_TRUE(users[y].empty());
}

TEST(GraphEdit, RemoveDeadDropsChainsOfUnusedNodes) {
  ir::Graph g = small_graph();
  // dead → Neg → dead2: both go; Neg/Abs stay.
  const int d = g.find_value("dead");
  const int d2 = graph_new_value(g, "dead2", DType::kF32, g.values[d].shape);
  graph_insert_node(
      g, 3,
      {.name = "neg2", .op = "Neg", .domain = "", .inputs = {d}, .outputs = {d2}, .attrs = {}});
  graph_remove_dead(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].name, "neg");
  EXPECT_EQ(g.nodes[1].name, "abs");
  EXPECT_EQ(g.values[d].producer, -1);
  EXPECT_EQ(g.values[d2].producer, -1);
  EXPECT_EQ(g.values[g.find_value("y")].producer, 1);
  EXPECT_TRUE(ir::graph_verify(g).ok());
}

TEST(GraphEdit, RemoveDeadKeepsGraphOutputsEvenWithoutReaders) {
  ir::Graph g = small_graph();
  g.outputs.push_back(g.find_value("dead"));
  graph_remove_dead(g);
  EXPECT_EQ(g.nodes.size(), 3u);
}

TEST(GraphEdit, UniqueNodeName) {
  ir::Graph g = small_graph();
  EXPECT_EQ(graph_unique_node_name(g, "fresh"), "fresh");
  EXPECT_EQ(graph_unique_node_name(g, "neg"), "neg_1");
  g.nodes[2].name = "neg_1";
  EXPECT_EQ(graph_unique_node_name(g, "neg"), "neg_2");
}

}  // namespace
}  // namespace kiln::compiler
