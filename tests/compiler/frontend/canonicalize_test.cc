// Pass test: the canonical graph must compute what the imported graph computed.
#include "compiler/frontend/canonicalize.h"

#include <gtest/gtest.h>

#include <random>

#include "compiler/frontend/onnx_import.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/onnx_builder.h"
#include "tests/support/op_cases.h"

namespace kiln::compiler {
namespace {

std::map<std::string, RefTensor> random_inputs(const ir::Graph& g, int64_t s, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  std::map<std::string, RefTensor> in;
  for (int v : g.inputs) {
    RefTensor t;
    for (const auto& d : g.values[v].shape) t.dims.push_back(d.eval(s));
    t.data.resize(static_cast<size_t>(t.numel()));
    for (double& x : t.data) x = static_cast<float>(dist(rng));
    in[g.values[v].name] = t;
  }
  return in;
}

void expect_same_function(const ir::Graph& before, const ir::Graph& after) {
  std::mt19937 rng(11);
  for (int64_t s : {1, 3, 8}) {
    auto in = random_inputs(before, s, rng);
    auto a = reference_run(before, s, in);
    auto b = reference_run(after, s, in);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    ASSERT_EQ(a->size(), b->size());
    for (const auto& [name, t] : *a) {
      ASSERT_TRUE(b->count(name)) << name;
      EXPECT_EQ(t.dims, b->at(name).dims);
      EXPECT_EQ(t.data, b->at(name).data) << name;  // same ops, same order: bit-identical
    }
  }
}

TEST(Canonicalize, RemovesNoOpsButKeepsTheOutputName) {
  auto b = testing::OnnxBuilder("m").input("x", {std::string("batch"), int64_t{4}})
               .node("Identity", {"x"}, {"i"}).node("Dropout", {"i"}, {"d"})
               .node("Relu", {"d"}, {"r"}).node("Identity", {"r"}, {"y"}).output("y");
  auto g = onnx_import_bytes(b.bytes(), "m", ".", {"batch", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ir::Graph before = *g;
  ASSERT_TRUE(canonicalize(*g).ok());
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op, "Relu");
  EXPECT_EQ(g->values[g->nodes[0].inputs[0]].name, "x");
  EXPECT_EQ(g->nodes[1].op, "Identity");
  EXPECT_EQ(g->values[g->outputs[0]].name, "y");
  expect_same_function(before, *g);
}

TEST(Canonicalize, RemovesCastsToTheirInputsOwnDtype) {
  // f32 → f32 goes (its reader reads x); f32 → f16 stays; a same-dtype Cast naming a graph
  // output stays for the name.
  auto b = testing::OnnxBuilder("m")
               .input("x", {std::string("batch"), int64_t{4}})
               .node("Cast", {"x"}, {"c"}, {{"to", int64_t{onnx::TensorProto::FLOAT}}})
               .node("Relu", {"c"}, {"r"})
               .node("Cast", {"r"}, {"h"}, {{"to", int64_t{onnx::TensorProto::FLOAT16}}})
               .node("Cast", {"r"}, {"y"}, {{"to", int64_t{onnx::TensorProto::FLOAT}}})
               .typed_output("h", onnx::TensorProto::FLOAT16)
               .output("y");
  auto g = onnx_import_bytes(b.bytes(), "m", ".", {"batch", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE(canonicalize(*g).ok());
  ASSERT_EQ(g->nodes.size(), 3u);
  EXPECT_EQ(g->nodes[0].op, "Relu");
  EXPECT_EQ(g->values[g->nodes[0].inputs[0]].name, "x");
  EXPECT_EQ(g->nodes[1].op, "Cast");
  EXPECT_EQ(g->values[g->nodes[1].outputs[0]].name, "h");
  EXPECT_EQ(g->nodes[2].op, "Cast");
  EXPECT_EQ(g->values[g->nodes[2].outputs[0]].name, "y");
}

TEST(Canonicalize, DropsDeadNodes) {
  auto b = testing::OnnxBuilder("m").input("x", {std::string("batch"), int64_t{4}})
               .node("Relu", {"x"}, {"y"}).node("Sigmoid", {"x"}, {"unused"}).output("y");
  auto g = onnx_import_bytes(b.bytes(), "m", ".", {"batch", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ir::Graph before = *g;
  ASSERT_TRUE(canonicalize(*g).ok());
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].op, "Relu");
  expect_same_function(before, *g);
}

TEST(Canonicalize, PreservesEveryOpCase) {
  for (const auto& c : testing::op_cases()) {
    SCOPED_TRACE(c.name);
    auto g = onnx_import_bytes(c.model.bytes(), c.name, ".", {"batch", {}});
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ir::Graph before = *g;
    ASSERT_TRUE(canonicalize(*g).ok());
    expect_same_function(before, *g);
  }
}

}  // namespace
}  // namespace kiln::compiler
