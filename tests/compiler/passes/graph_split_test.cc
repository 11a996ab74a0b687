// graph_split: pieces in execution order, ASAP placement, and structural hashes that are equal
// exactly for structurally identical pieces.
#include "compiler/passes/graph_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/passes/graph_edit.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

// x[S, 16] → layers × (MatMul W_l → kiln.Attention(q, q, q) → Add residual → Relu) → y.
// `scale_of(l)` is the attention scale of layer l (a structural attribute).
ir::Graph layered(int layers, double (*scale_of)(int) = nullptr) {
  ir::Graph g;
  g.name = "layers";
  const ir::Shape heads = {DimExpr::constant(1), DimExpr::constant(1), DimExpr::size(),
                           DimExpr::constant(16)};
  int x = graph_new_value(g, "x", DType::kF32, heads);
  g.inputs.push_back(x);
  for (int l = 0; l < layers; ++l) {
    std::vector<double> w(16 * 16, 0.01 * (l + 1));  // different weights per layer
    const int wid = graph_new_constant(g, "w" + std::to_string(l), DType::kF32, {16, 16}, w);
    const int q = graph_new_value(g, "q" + std::to_string(l), DType::kF32, heads);
    ir::Node mm{"mm" + std::to_string(l), "MatMul", "", {x, wid}, {q}, {}};
    graph_insert_node(g, g.nodes.size(), mm);
    const int a = graph_new_value(g, "a" + std::to_string(l), DType::kF32, heads);
    ir::Node at{"attn" + std::to_string(l), "Attention", "kiln", {q, q, q}, {a}, {}};
    at.attrs["scale"] = scale_of ? scale_of(l) : 0.25;
    at.attrs["causal"] = int64_t{1};
    graph_insert_node(g, g.nodes.size(), at);
    const int r = graph_new_value(g, "r" + std::to_string(l), DType::kF32, heads);
    graph_insert_node(g, g.nodes.size(), {"add" + std::to_string(l), "Add", "", {a, x}, {r}, {}});
    const int y = graph_new_value(g, "y" + std::to_string(l), DType::kF32, heads);
    graph_insert_node(g, g.nodes.size(), {"relu" + std::to_string(l), "Relu", "", {r}, {y}, {}});
    x = y;
  }
  g.outputs.push_back(x);
  return g;
}

std::vector<std::string> kinds(const std::vector<Piece>& pieces) {
  std::vector<std::string> k;
  for (const Piece& p : pieces) k.push_back(p.kind == Piece::Kind::kSplit ? "split" : "compute");
  return k;
}

TEST(GraphSplit, FourLayersHaveThreeUniqueComputePieces) {
  ir::Graph g = layered(4);
  ASSERT_TRUE(ir::graph_verify(g).ok());
  auto pieces = graph_split(g, {"attention"});
  ASSERT_TRUE(pieces.ok()) << pieces.status().message();
  EXPECT_EQ(kinds(*pieces),
            (std::vector<std::string>{"compute", "split", "compute", "split", "compute", "split",
                                      "compute", "split", "compute"}));
  // First: mm0. Middle: add, relu, next mm. Last: add3, relu3.
  EXPECT_EQ((*pieces)[0].nodes.size(), 1u);
  EXPECT_EQ((*pieces)[2].nodes.size(), 3u);
  EXPECT_EQ((*pieces)[8].nodes.size(), 2u);
  EXPECT_EQ((*pieces)[2].hash, (*pieces)[4].hash);
  EXPECT_EQ((*pieces)[4].hash, (*pieces)[6].hash);
  EXPECT_NE((*pieces)[0].hash, (*pieces)[2].hash);
  EXPECT_NE((*pieces)[8].hash, (*pieces)[2].hash);
  EXPECT_EQ((*pieces)[1].hash, (*pieces)[3].hash);  // identical attentions
  EXPECT_EQ(unique_compute_pieces(*pieces), 3);
  // A middle piece reads the attention output and the residual; it exports the next q and y.
  EXPECT_EQ((*pieces)[2].inputs.size(), 2u);
  EXPECT_EQ((*pieces)[2].outputs.size(), 2u);
  EXPECT_EQ((*pieces)[8].outputs, std::vector<int>{g.outputs[0]});
}

TEST(GraphSplit, AttributesAreStructure) {
  ir::Graph g = layered(3, [](int l) { return l == 1 ? 0.5 : 0.25; });
  auto pieces = graph_split(g, {"attention"});
  ASSERT_TRUE(pieces.ok());
  EXPECT_NE((*pieces)[1].hash, (*pieces)[3].hash);  // scales differ
  EXPECT_EQ((*pieces)[1].hash, (*pieces)[5].hash);
}

TEST(GraphSplit, NoSplittingOpsIsOnePiece) {
  ir::Graph g = layered(2);
  auto pieces = graph_split(g, {});
  ASSERT_TRUE(pieces.ok());
  ASSERT_EQ(pieces->size(), 1u);
  EXPECT_EQ((*pieces)[0].nodes.size(), g.nodes.size());
}

TEST(GraphSplit, NodesGoToTheEarliestPiece) {
  // A node that depends only on the graph input but comes late in the node list still runs in
  // the first piece.
  ir::Graph g = layered(2);
  const ir::Shape heads = g.values[g.inputs[0]].shape;
  const int side = graph_new_value(g, "side", DType::kF32, heads);
  graph_insert_node(g, g.nodes.size(), {"early", "Relu", "", {g.inputs[0]}, {side}, {}});
  g.outputs.push_back(side);
  auto pieces = graph_split(g, {"attention"});
  ASSERT_TRUE(pieces.ok());
  const int early = static_cast<int>(g.nodes.size()) - 1;
  const auto& first = (*pieces)[0].nodes;
  EXPECT_NE(std::find(first.begin(), first.end(), early), first.end());
  // And the reordered graph is still valid and keeps every node.
  ir::Graph ordered = graph_in_piece_order(g, *pieces);
  EXPECT_TRUE(ir::graph_verify(ordered).ok());
  EXPECT_EQ(ordered.nodes.size(), g.nodes.size());
}

TEST(GraphSplit, OtherSplittingOps) {
  ir::Graph g = layered(2);
  auto pieces = graph_split(g, {"Relu"});
  ASSERT_TRUE(pieces.ok());
  int splits = 0;
  for (const Piece& p : *pieces) splits += p.kind == Piece::Kind::kSplit;
  EXPECT_EQ(splits, 2);
}

}  // namespace
}  // namespace kiln::compiler
