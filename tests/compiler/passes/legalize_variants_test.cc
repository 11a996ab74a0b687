// legalize_variants (compiler/passes/legalize_variants.h): every variant is checked for equivalence
// with the original graph on random inputs at several sizes, for the absence of com.microsoft /
// ONNX Attention / RotaryEmbedding nodes afterwards, for shapes that re-inference agrees with,
// and on each single-op model of tests/models/ops against onnxruntime's output again.
#include "compiler/passes/legalize_variants.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/frontend/onnx_import.h"
#include "compiler/ir/graph_infer.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using kiln::testing::count_ops;
using kiln::testing::exported_import_options;
using kiln::testing::exported_models_dir;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;
using kiln::testing::model_names;
using kiln::testing::op_models_dir;
using kiln::testing::ref_read_pb;
using kiln::testing::ref_read_pb_inputs;

const std::string kHead = R"(<ir_version: 10, opset_import: ["" : 23, "com.microsoft" : 1]> )";

// Ops that must not survive the pass (when it lowers everything).
::testing::AssertionResult no_variants(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes)
    if (n.domain == "com.microsoft" ||
        (n.domain.empty() && (n.op == "Attention" || n.op == "RotaryEmbedding" ||
                              n.op == "SimplifiedLayerNormalization")))
      return ::testing::AssertionFailure()
             << "node '" << n.name << "' (" << n.qualified_op() << ") is left";
  return ::testing::AssertionSuccess();
}

// The dtypes and shapes the pass wrote agree with a fresh inference of the lowered graph.
::testing::AssertionResult shapes_reinfer(const ir::Graph& g, int64_t max_size = 1 << 16) {
  ir::Graph again = g;
  Status st = graph_infer(again, InferOptions{max_size, false});
  if (!st.ok()) return ::testing::AssertionFailure() << "re-inference: " << st.message();
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].shape != again.values[i].shape || g.values[i].dtype != again.values[i].dtype)
      return ::testing::AssertionFailure()
             << "value '" << g.values[i].name << "': the pass said "
             << ir::shape_to_string(g.values[i].shape) << ", inference says "
             << ir::shape_to_string(again.values[i].shape);
  return ::testing::AssertionSuccess();
}

// Imports, lowers, and checks the structure; returns {before, after}.
std::pair<ir::Graph, ir::Graph> lower(const std::string& body, const std::string& size_dim = "S") {
  ir::Graph before = import_text_ok(kHead + body, ImportOptions{size_dim, {}});
  ir::Graph after = before;
  Status st = legalize_variants(after);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(ir::graph_verify(after).ok());
  EXPECT_TRUE(shapes_reinfer(after));
  // Graph outputs keep their names.
  EXPECT_EQ(before.outputs.size(), after.outputs.size());
  for (size_t i = 0; i < std::min(before.outputs.size(), after.outputs.size()); ++i)
    EXPECT_EQ(before.values[before.outputs[i]].name, after.values[after.outputs[i]].name);
  return {std::move(before), std::move(after)};
}

// --- ONNX Attention ------------------------------------------------------------------------------

TEST(LowerVariantsTest, OnnxAttention3dGqaCausal) {
  auto [before, after] = lower(R"(
    g (float[2, S, 16] q, float[2, S, 8] k, float[2, S, 8] v) => (float[2, S, 16] y) {
      y = Attention <q_num_heads = 4, kv_num_heads = 2, is_causal = 1> (q, k, v)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Attention", "kiln"), 1);
  EXPECT_EQ(count_ops(after, "Transpose"), 4);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 3, 6}));
}

TEST(LowerVariantsTest, OnnxAttentionPastCausalWithPresents) {
  auto [before, after] = lower(R"(
    g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v, float[1, 2, 3, 8] pk,
       float[1, 2, 3, 8] pv) => (float[1, 4, S, 8] y, float[1, 2, T, 8] present_k, float[1, 2, T, 8] present_v) {
      y, present_k, present_v = Attention <is_causal = 1, scale = 0.3> (q, k, v, , pk, pv)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Concat"), 2);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 2, 5}));
}

TEST(LowerVariantsTest, OnnxAttentionBoolMaskBecomesWhere) {
  auto [before, after] = lower(R"(
    g (float[2, 2, 4, 8] q, float[2, 2, 6, 8] k, float[2, 2, 6, 4] v, bool[2, 1, 4, 6] m)
        => (float[2, 2, 4, 4] y) {
      y = Attention (q, k, v, m)
    })",
                               "");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Where"), 1);
  EXPECT_TRUE(graphs_equivalent(before, after, {1}, 1e-9, 1e-9, 3));
  EXPECT_TRUE(graphs_equivalent(before, after, {1}, 1e-9, 1e-9, 4));
}

TEST(LowerVariantsTest, OnnxAttentionFloatMaskAnd4dPresentAliases) {
  auto [before, after] = lower(R"(
    g (float[2, 4, S, 8] q, float[2, 4, S, 8] k, float[2, 4, S, 8] v, float[1, 1, S, S] m)
        => (float[2, 4, S, 8] y, float[2, 4, S, 8] pk) {
      y, pk = Attention (q, k, v, m)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Identity"), 1);  // present_key is K itself, kept by name
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 4}));
}

TEST(LowerVariantsTest, OnnxAttentionKeptWhenKilnCannotExpressIt) {
  // softcap, and a causal mask over keys of another length (ONNX aligns it to the start).
  auto [before, after] = lower(R"(
    g (float[1, 2, S, 8] q, float[1, 2, 7, 8] k, float[1, 2, 7, 8] v) => (float[1, 2, S, 8] y,
                                                                         float[1, 2, S, 8] z) {
      y = Attention <softcap = 2.0> (q, k, v)
      z = Attention <is_causal = 1> (q, k, v)
    })");
  EXPECT_EQ(count_ops(after, "Attention"), 2);
  EXPECT_TRUE(graphs_equivalent(before, after, {2}));
}

// --- com.microsoft attention ---------------------------------------------------------------------

TEST(LowerVariantsTest, MultiHeadAttentionWithBiasMasks) {
  auto [before, after] = lower(R"(
    g (float[2, S, 16] q, float[2, S, 16] k, float[2, S, 8] v, float[40] bias,
       int32[2, S] kpm, float[1, 4, S, S] ab) => (float[2, S, 8] y) {
      y = com.microsoft.MultiHeadAttention <num_heads = 4> (q, k, v, bias, kpm, ab)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Split"), 1);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 3, 5}));
}

TEST(LowerVariantsTest, MultiHeadAttentionUnidirectional) {
  auto [before, after] = lower(R"(
    g (float[2, S, 16] q, float[2, S, 16] k, float[2, S, 16] v) => (float[2, S, 16] y) {
      y = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1, scale = 0.2> (q, k, v)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 4}));
}

TEST(LowerVariantsTest, GroupQueryAttentionPromptWithPresents) {
  // seqlens_k and total_sequence_length come from the query's shape, as exports compute them.
  auto [before, after] = lower(R"(
    g (float[2, S, 32] q, float[2, S, 16] k, float[2, S, 16] v)
        => (float[2, S, 32] y, float[2, 2, S, 8] pk, float[2, 2, S, 8] pv) {
      shp = Shape <start = 1, end = 2> (q)
      t64 = Squeeze (shp)
      total = Cast <to = 6> (t64)
      one = Constant <value = int32 {1}> ()
      last = Sub (total, one)
      two = Constant <value = int64[1] {2}> ()
      seqlens = Expand (last, two)
      y, pk, pv = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2>
          (q, k, v, , , seqlens, total)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 3, 5}));
}

TEST(LowerVariantsTest, GroupQueryAttentionPastAndPackedQkv) {
  auto [before, after] = lower(R"(
    g (float[1, 3, 48] qkv, float[1, 2, 4, 8] pk, float[1, 2, 4, 8] pv) => (float[1, 3, 16] y,
                                                                            float[1, 2, 7, 8] k2) {
      seqlens = Constant <value = int32[1] {6}> ()
      total = Constant <value = int32 {7}> ()
      y, k2 = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 2>
          (qkv, , , pk, pv, seqlens, total)
    })",
                               "");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Concat"), 2);
  EXPECT_TRUE(graphs_equivalent(before, after, {1}));
}

TEST(LowerVariantsTest, MsAttentionPackedProjection) {
  auto [before, after] = lower(R"(
    g (float[2, S, 8] x, float[8, 20] w, float[20] b, int32[2, S] mask) => (float[2, S, 4] y) {
      y = com.microsoft.Attention <num_heads = 2, qkv_hidden_sizes = [8, 8, 4], unidirectional = 1>
          (x, w, b, mask)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "MatMul"), 1);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 2, 5}));
}

// --- rotary --------------------------------------------------------------------------------------

TEST(LowerVariantsTest, OnnxRotary4dAnd3dInterleaved) {
  auto [before, after] = lower(R"(
    g (float[2, 4, S, 8] x, float[2, S, 16] x3, float[16, 4] cos, float[16, 4] sin,
       int64[2, S] pos) => (float[2, 4, S, 8] y, float[2, S, 16] y3) {
      y = RotaryEmbedding (x, cos, sin, pos)
      y3 = RotaryEmbedding <interleaved = 1, num_heads = 2> (x3, cos, sin, pos)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Rotary", "kiln"), 2);
  EXPECT_EQ(count_ops(after, "Gather"), 4);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 3, 6}, 1e-9, 1e-9, 11, 16));
}

TEST(LowerVariantsTest, OnnxRotaryPartialWithoutPositionIds) {
  // Per-token tables [B, S, R/2]; exporters write [1, S, R/2], broadcast over the batch.
  auto [before, after] = lower(R"(
    g (float[2, 4, S, 8] x, float[2, S, 8] x3, float[2, S, 2] cos, float[2, S, 2] sin,
       float[1, S, 2] c1, float[1, S, 2] s1) => (float[2, 4, S, 8] y, float[2, S, 8] y3) {
      y = RotaryEmbedding <rotary_embedding_dim = 4> (x, cos, sin)
      y3 = RotaryEmbedding <rotary_embedding_dim = 4, num_heads = 2> (x3, c1, s1)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Gather"), 0);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 4}));
}

TEST(LowerVariantsTest, MsRotaryPositionIdsAndStartPosition) {
  auto [before, after] = lower(R"(
    g (float[2, 3, 16] x, int64[2, 3] pos, int64[1] start, float[16, 4] cos, float[16, 4] sin)
        => (float[2, 3, 16] y, float[2, 3, 16] z) {
      y = com.microsoft.RotaryEmbedding <num_heads = 2> (x, pos, cos, sin)
      z = com.microsoft.RotaryEmbedding <interleaved = 1> (x, start, cos, sin)
    })",
                               "");
  EXPECT_TRUE(no_variants(after));
  EXPECT_TRUE(graphs_equivalent(before, after, {1}, 1e-9, 1e-9, 11, 12));
}

TEST(LowerVariantsTest, MsRotaryStartPositionKeptWhenSIsSymbolic) {
  auto [before, after] = lower(R"(
    g (float[2, 2, S, 8] x, int64[1] start, float[64, 4] cos, float[64, 4] sin)
        => (float[2, 2, S, 8] y) {
      y = com.microsoft.RotaryEmbedding (x, start, cos, sin)
    })");
  EXPECT_EQ(count_ops(after, "RotaryEmbedding", "com.microsoft"), 1);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 5}));
}

// --- norms and GELU ------------------------------------------------------------------------------

TEST(LowerVariantsTest, SkipLayerNormalizationWithSum) {
  auto [before, after] = lower(R"(
    g (float[2, S, 8] x, float[2, S, 8] skip, float[8] gamma, float[8] beta, float[8] bias)
        => (float[2, S, 8] y, float[2, S, 8] sum) {
      y, , , sum = com.microsoft.SkipLayerNormalization <epsilon = 0.001> (x, skip, gamma, beta, bias)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "LayerNormalization"), 1);
  EXPECT_EQ(count_ops(after, "Add"), 2);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 3}));
}

TEST(LowerVariantsTest, SkipLayerNormalizationKeptWhenMeanIsUsed) {
  auto [before, after] = lower(R"(
    g (float[2, S, 8] x, float[S, 8] skip, float[8] gamma) => (float[2, S, 8] y,
                                                             float[2, S, 1] mean) {
      y, mean = com.microsoft.SkipLayerNormalization (x, skip, gamma)
    })");
  EXPECT_EQ(count_ops(after, "SkipLayerNormalization", "com.microsoft"), 1);
  EXPECT_TRUE(graphs_equivalent(before, after, {2}));
}

TEST(LowerVariantsTest, SimplifiedNormsBecomeRmsNormalization) {
  auto [before, after] = lower(R"(
    g (float[2, S, 8] x, float[2, S, 8] skip, float[8] gamma, float[8] bias)
        => (float[2, S, 8] y, float[2, S, 8] z, float[2, S, 8] w) {
      y = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 0.0001> (x, skip, gamma, bias)
      z = SimplifiedLayerNormalization <epsilon = 0.01> (x, gamma)
      w = com.microsoft.SimplifiedLayerNormalization (skip, gamma)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "RMSNormalization"), 3);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 4}));
}

TEST(LowerVariantsTest, GeluVariants) {
  auto [before, after] = lower(R"(
    g (float[2, S, 8] x, float[8] b) => (float[2, S, 8] y, float[2, S, 8] z, float[2, S, 8] w) {
      y = com.microsoft.FastGelu (x, b)
      z = com.microsoft.FastGelu (x)
      w = com.microsoft.BiasGelu (x, b)
    })");
  EXPECT_TRUE(no_variants(after));
  EXPECT_EQ(count_ops(after, "Gelu"), 3);
  EXPECT_EQ(count_ops(after, "Add"), 2);
  EXPECT_TRUE(graphs_equivalent(before, after, {1, 5}));
}

// --- the single-op models of tests/models/ops, against onnxruntime again -----------------------

class LowerOpModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LowerOpModelTest, LoweredMatchesOnnxruntime) {
  const fs::path dir = op_models_dir() / GetParam();
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(legalize_variants(*g).ok());
  EXPECT_TRUE(no_variants(*g));
  EXPECT_TRUE(shapes_reinfer(*g));
  Result<std::map<std::string, RefTensor>> data = ref_read_pb_inputs(dir / "test_data_set_0");
  ASSERT_TRUE(data.ok()) << data.status().message();
  // The lowered graph may no longer read an input (GroupQueryAttention's seqlens_k).
  std::map<std::string, RefTensor> inputs;
  for (int id : g->inputs)
    if (auto it = data->find(g->values[id].name); it != data->end()) inputs.insert(*it);
  std::string want_name;
  Result<RefTensor> want = ref_read_pb(dir / "test_data_set_0/output_0.pb", &want_name);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = reference_run(*g, 1, inputs);
  ASSERT_TRUE(got.ok()) << got.status().message();
  // onnxruntime computes in float32, the reference in float64 (see op_models_test.cc).
  EXPECT_TRUE(testing::tensors_close(got->at(want_name), *want, 1e-4, 1e-5, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Ops, LowerOpModelTest, ::testing::ValuesIn(model_names(op_models_dir())),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// --- the exported models of tests/models/exported (onnxruntime's fusions, opset-23 exports) -----

class LowerExportedTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LowerExportedTest, NothingLeftAndEquivalent) {
  const fs::path dir = exported_models_dir() / GetParam();
  Result<ImportOptions> opts = exported_import_options(dir);
  ASSERT_TRUE(opts.ok()) << opts.status().message();
  Result<ir::Graph> before = onnx_import_file(dir / "model.onnx", *opts);
  ASSERT_TRUE(before.ok()) << before.status().message();
  ir::Graph after = *before;
  ASSERT_TRUE(legalize_variants(after).ok());
  EXPECT_TRUE(no_variants(after));
  EXPECT_TRUE(shapes_reinfer(after, opts->max_size));
  // Random token ids below 4 and masks of 0..3 (mostly kept keys).
  EXPECT_TRUE(graphs_equivalent(*before, after, {1, 6}, 1e-9, 1e-9));
}

INSTANTIATE_TEST_SUITE_P(Exported, LowerExportedTest,
                         ::testing::ValuesIn(model_names(exported_models_dir())),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace kiln::compiler
