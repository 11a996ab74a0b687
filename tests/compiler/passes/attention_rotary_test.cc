// attention_rotary over every exported model (tests/models/exported): where Q and K of a
// kiln.Attention come from kiln.Rotary nodes over one pair of tables (the Llama, Mistral, Qwen2,
// Phi-3 and GPT-NeoX exports: TorchScript eager/SDPA, dynamo 18/23 with and without a mask,
// Optimum), the Rotary nodes go and the attention takes the tables as inputs 5 and 6; the graph
// computes what it computed before, in float64. Not yet: the dynamo 18 exports of GPT-NeoX and
// Phi-3, whose K reaches attention through the SDPA decomposition's Kᵀ and back (a Transpose of
// the last axis, undone by a later one: each view alone moves the head's row), so they keep
// their Rotary launch. The other families have no Rotary and are left as they are. Generation
// programs (kiln.PagedAttention) are covered in kv_paged_test.cc.
#include "compiler/passes/attention_rotary.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;

// kiln.Attention nodes that take rotary tables.
int rotating_attention(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes)
    n += node.domain == "kiln" && node.op == "Attention" && node.inputs.size() == 7;
  return n;
}

TEST(AttentionRotary, EveryExportedRotaryMovesIntoItsAttention) {
  int folded_models = 0;
  for (const std::string& name : kiln::testing::model_names(kiln::testing::exported_models_dir())) {
    SCOPED_TRACE(name);
    Result<ir::Graph> before = kiln::testing::exported_front_end(name);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    ir::Graph after = *before;
    const Status st = fold_attention_rotary(after);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const int layers = count_ops(*before, "Attention", "kiln");
    const int rotary = count_ops(*before, "Rotary", "kiln");
    const bool transposed_k = name == "gpt_neox_dynamo18" || name == "gpt_neox_dynamo18_nomask" ||
                              name == "phi3_dynamo18" || name == "phi3_dynamo18_nomask";
    if (rotary == 0 || transposed_k) {
      EXPECT_EQ(rotating_attention(after), 0);
      EXPECT_EQ(count_ops(after, "Rotary", "kiln"), rotary);
      continue;
    }
    // Two Rotary nodes a layer (Q and K) become the attention's inputs.
    EXPECT_EQ(rotary, 2 * layers);
    EXPECT_EQ(count_ops(after, "Rotary", "kiln"), 0);
    EXPECT_EQ(rotating_attention(after), layers);
    // Size 1 as well: a one-token run still takes the prefill kernels (S is not a constant 1).
    EXPECT_TRUE(kiln::testing::graphs_equivalent(*before, after, {1, 5}, 1e-9, 1e-9));
    ++folded_models;
  }
  // Llama, Mistral and Qwen2: seven exports each; Phi-3 and GPT-NeoX: five each.
  EXPECT_EQ(folded_models, 31);
}

TEST(AttentionRotary, TheFrontEndFoldsAndEveryLayerReadsOneTablePair) {
  // Through front_end_passes_for (which also fuses Q, K and V into one GEMM afterwards): each
  // layer's Rotary pair is gone, and the layers share the first one's reshaped tables.
  const auto dir = kiln::testing::exported_models_dir() / "llama_dynamo23";
  Result<CompileConfig> cfg = config_load(dir / "kiln.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Result<ImportOptions> opts = kiln::testing::exported_import_options(dir);
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", *opts);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE(front_end_passes_for(*g, *cfg, nullptr).ok());
  EXPECT_EQ(count_ops(*g, "Rotary", "kiln"), 0);
  const int layers = count_ops(*g, "Attention", "kiln");
  EXPECT_GT(layers, 1);
  EXPECT_EQ(rotating_attention(*g), layers);
  std::set<std::pair<int, int>> tables;
  for (const ir::Node& n : g->nodes)
    if (n.domain == "kiln" && n.op == "Attention") tables.insert({n.inputs[5], n.inputs[6]});
  EXPECT_EQ(tables.size(), 1u);
}

TEST(AttentionRotary, RotaryReadByAnythingElseStays) {
  // A Rotary output that is also a graph output (or read twice) is not the attention's alone:
  // nothing folds. The tests' Llama export with Q's Rotary also returned.
  Result<ir::Graph> g = kiln::testing::exported_front_end("llama_ts17_sdpa");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  int first_rotary = -1;
  for (const ir::Node& n : g->nodes)
    if (n.domain == "kiln" && n.op == "Rotary") {
      first_rotary = n.outputs[0];
      break;
    }
  ASSERT_GE(first_rotary, 0);
  g->outputs.push_back(first_rotary);
  const int layers = count_ops(*g, "Attention", "kiln");
  ASSERT_TRUE(fold_attention_rotary(*g).ok());
  EXPECT_EQ(rotating_attention(*g), layers - 1);
  EXPECT_EQ(count_ops(*g, "Rotary", "kiln"), 2);
}

}  // namespace
}  // namespace kiln::compiler
