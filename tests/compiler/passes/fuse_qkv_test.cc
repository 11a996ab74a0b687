// fuse_qkv over every exported model (tests/models/exported): where an attention's Q, K and V
// projections are separate MatMuls over one input (every BERT, DistilBERT, RoBERTa, Llama,
// Mistral and Qwen2 export: in the last three, Q and K reach attention through kiln.Rotary, and
// in the dynamo 18 exports K and V through a head repeat that simplify_attention undoes), they
// become one MatMul (plus one Add for their biases) and a Split, and the graph computes what it
// computed before; the other families are left as they are (see below).
#include "compiler/passes/fuse_qkv.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;

int attention_nodes(const ir::Graph& g) { return count_ops(g, "Attention", "kiln"); }

TEST(FuseQkv, EveryExportedAttentionWithSeparateProjectionsGetsOneGemm) {
  int fused_models = 0, models = 0;
  for (const std::string& name : kiln::testing::model_names(kiln::testing::exported_models_dir())) {
    SCOPED_TRACE(name);
    ++models;
    const auto dir = kiln::testing::exported_models_dir() / name;
    Result<ImportOptions> opts = kiln::testing::exported_import_options(dir);
    ASSERT_TRUE(opts.ok()) << opts.status().to_string();
    Result<ir::Graph> before = onnx_import_file(dir / "model.onnx", *opts);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    ASSERT_TRUE(front_end_passes(*before, opts->max_size).ok());
    ir::Graph after = *before;
    ASSERT_TRUE(fuse_qkv(after).ok());
    const int layers = attention_nodes(*before);
    const int splits = count_ops(after, "Split") - count_ops(*before, "Split");
    const int matmuls = count_ops(*before, "MatMul") - count_ops(after, "MatMul");
    const bool encoder =
        name.starts_with("bert") || name.starts_with("distilbert") || name.starts_with("roberta");
    const bool rotary_family =
        name.starts_with("llama") || name.starts_with("mistral") || name.starts_with("qwen2");
    // GPT-2, GPT-NeoX and Phi-3 project QKV in one GEMM already. (Generation programs fold the
    // rotary into the attention first: tests/compiler/passes/kv_paged_test.)
    if (!encoder && !rotary_family) {
      EXPECT_EQ(splits, 0);
      continue;
    }
    // Every layer: three projections → one.
    EXPECT_GT(layers, 0);
    EXPECT_EQ(splits, layers);
    EXPECT_EQ(matmuls, 2 * layers);
    EXPECT_TRUE(kiln::testing::graphs_equivalent(*before, after, {1, 5}, 1e-9, 1e-9));
    ++fused_models;
  }
  // BERT, DistilBERT and RoBERTa: ten exports each (TorchScript eager/SDPA, dynamo 18/23, with
  // and without a mask, Optimum, onnxruntime-optimized); Llama, Mistral and Qwen2: seven each
  // (TorchScript eager/SDPA, dynamo 18/23 with and without a mask, Optimum).
  EXPECT_EQ(fused_models, 51);
  std::printf("[ info     ] fuse_qkv fused %d of %d exported models\n", fused_models, models);
}

}  // namespace
}  // namespace kiln::compiler
