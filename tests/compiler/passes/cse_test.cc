// cse: a node with the same op, attributes and inputs as an earlier one is replaced by it (and
// chains of such nodes collapse, their inputs having become the same); other attributes, other
// inputs and graph outputs stay. Every rewritten graph computes what it did. Over
// the exported models, the dynamo 23 Llama's per-layer Cos/Sin tables become one pair.
#include "compiler/passes/cse.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/legalize_variants.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

struct Passed {
  ir::Graph before, after;
};

Passed run_cse(const std::string& text) {
  Passed p;
  p.before = import_text_ok(text, ImportOptions{"N", {}});
  p.after = p.before;
  const Status st = cse(p.after);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

TEST(Cse, RepeatedChainsCollapse) {
  const Passed p = run_cse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y) {
  c1 = Cos(x)
  s1 = Sin(x)
  c2 = Cos(x)
  s2 = Sin(x)
  a1 = Mul(c1, s1)
  a2 = Mul(c2, s2)
  y = Add(a1, a2)
})");
  EXPECT_EQ(count_ops(p.after, "Cos"), 1);
  EXPECT_EQ(count_ops(p.after, "Sin"), 1);
  EXPECT_EQ(count_ops(p.after, "Mul"), 1);  // a2 = Mul(c1, s1) once c2, s2 are c1, s1
  EXPECT_EQ(p.after.nodes.size(), 4u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 3, 7}));
}

TEST(Cse, DifferentAttributesInputsAndGraphOutputsStay) {
  const Passed p = run_cse(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x, float[N, 4] z) => (float[N, 4] y, float[N, 4] w, float[N, 4] w2) {
  a = Softmax<axis = 0>(x)
  b = Softmax<axis = 1>(x)
  c = Cos(x)
  d = Cos(z)
  e = Add(a, b)
  f = Add(c, d)
  y = Add(e, f)
  w = Relu(x)
  w2 = Relu(x)
})");
  EXPECT_EQ(p.after.nodes.size(), p.before.nodes.size());
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 3}));
}

TEST(Cse, DynamoLlamaRotaryTablesAreComputedOnce) {
  const auto dir = kiln::testing::exported_models_dir() / "llama_dynamo23";
  Result<ImportOptions> opts = kiln::testing::exported_import_options(dir);
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", *opts);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE(legalize_variants(*g).ok());
  ir::Graph before = *g;
  ASSERT_GT(count_ops(before, "Cos"), 1);  // one per RotaryEmbedding node
  ASSERT_TRUE(cse(*g).ok());
  EXPECT_EQ(count_ops(*g, "Cos"), 1);
  EXPECT_EQ(count_ops(*g, "Sin"), 1);
  EXPECT_TRUE(graphs_equivalent(before, *g, {1, 5}, 1e-9, 1e-9));
}

}  // namespace
}  // namespace kiln::compiler
