// The attention family (compiler/ops/attention.cc): kiln.Attention as kiln_ops.md defines it and
// ONNX Attention (opset 23) on hand-computed cases — masks, causal alignment, GQA, past/present,
// 3-D layouts, softcap — plus their error messages. onnxruntime's outputs for ONNX Attention are
// checked in op_models_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/ir/graph_infer.h"
#include "tests/support/ir_harness.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using kiln::testing::import_text_ok;
using kiln::testing::sym_shape;
using kiln::testing::T;
using kiln::testing::tensors_close;

const std::string kHead =
    R"(<ir_version: 10, opset_import: ["" : 23, "kiln" : 1, "com.microsoft" : 1]> )";
const double kInf = std::numeric_limits<double>::infinity();

std::map<std::string, RefTensor> run(const std::string& body,
                                     const std::map<std::string, RefTensor>& in) {
  return kiln::testing::run(import_text_ok(kHead + body, ImportOptions{"", {}}), 1, in);
}

void expect_error(const std::string& body, StatusCode code,
                  const std::vector<std::string>& needles) {
  kiln::testing::expect_import_error(kHead + body, code, needles, "S");
}

// ---- kiln.Attention -----------------------------------------------------------------------------
// The importer refuses the internal domain, so these graphs are built directly.

using In = kiln::testing::NodeInput;

// One kiln.Attention node over graph inputs (an empty name leaves an optional input out).
Result<ir::Graph> kiln_attention(const std::vector<In>& ins,
                                 std::map<std::string, ir::AttrValue> attrs) {
  ir::Graph g =
      kiln::testing::one_node_graph("attn", "kiln", "Attention", ins, std::move(attrs), 23);
  KILN_RETURN_IF_ERROR(graph_infer(g, InferOptions{}));
  return g;
}

RefTensor run_kiln(const std::vector<In>& ins, std::map<std::string, ir::AttrValue> attrs,
                   const std::map<std::string, RefTensor>& data) {
  return kiln::testing::run_one_node(kiln_attention(ins, std::move(attrs)), 1, data);
}

void expect_kiln_error(const std::vector<In>& ins, std::map<std::string, ir::AttrValue> attrs,
                       const std::string& needle) {
  Result<ir::Graph> g = kiln_attention(ins, std::move(attrs));
  ASSERT_FALSE(g.ok()) << needle;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("node 'attn' (kiln.Attention)"), std::string::npos);
  EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
}

TEST(KilnAttention, SoftmaxOfScaledScores) {
  // Scores 0 and ln 3 → weights 1/4, 3/4 → y = 4/4 + 3·8/4 = 7.
  RefTensor y = run_kiln({{"q", sym_shape({1, 1, 1, 1})},
                          {"k", sym_shape({1, 1, 2, 1})},
                          {"v", sym_shape({1, 1, 2, 1})}},
                         {{"scale", 0.5}},
                         {{"q", T({1, 1, 1, 1}, {2})},
                          {"k", T({1, 1, 2, 1}, {0, std::log(3.0)})},
                          {"v", T({1, 1, 2, 1}, {4, 8})}});
  EXPECT_TRUE(tensors_close(y, T({1, 1, 1, 1}, {7}), 1e-15, 0, "y"));
}

TEST(KilnAttention, CausalAlignsToTheEnd) {
  // Q = 0: each row averages the values it may see. Sq = 2, Skv = 3: row i sees j <= i + 1.
  RefTensor y = run_kiln({{"q", sym_shape({2, 1, 2, 1})},
                          {"k", sym_shape({2, 1, 3, 1})},
                          {"v", sym_shape({2, 1, 3, 1})}},
                         {{"scale", 1.0}, {"causal", int64_t{1}}},
                         {{"q", T({2, 1, 2, 1}, {0, 0, 0, 0})},
                          {"k", T({2, 1, 3, 1}, {1, 2, 3, 1, 2, 3})},
                          {"v", T({2, 1, 3, 1}, {1, 2, 6, 10, 20, 60})}});
  EXPECT_TRUE(tensors_close(y, T({2, 1, 2, 1}, {1.5, 3, 15, 30}), 1e-15, 0, "y"));
}

TEST(KilnAttention, PaddingExcludesKeysAndEmptyRowsAreZero) {
  RefTensor y = run_kiln({{"q", sym_shape({2, 1, 2, 1})},
                          {"k", sym_shape({2, 1, 3, 1})},
                          {"v", sym_shape({2, 1, 3, 1})},
                          {"", {}},
                          {"pad", sym_shape({2, 3}), DType::kI32}},
                         {{"scale", 1.0}, {"causal", int64_t{1}}},
                         {{"q", T({2, 1, 2, 1}, {0, 0, 0, 0})},
                          {"k", T({2, 1, 3, 1}, {1, 2, 3, 1, 2, 3})},
                          {"v", T({2, 1, 3, 1}, {1, 2, 6, 10, 20, 60})},
                          {"pad", T({2, 3}, {1, 0, 1, 0, 0, 0}, DType::kI32)}});
  // Batch 0 keeps keys 0 and 2 (row 0 sees key 0 only); batch 1 has no key left: zeros.
  EXPECT_TRUE(tensors_close(y, T({2, 1, 2, 1}, {1, 3.5, 0, 0}), 1e-15, 0, "y"));
}

TEST(KilnAttention, BroadcastMaskAndGroupedHeads) {
  // 4 query heads over 2 key/value heads: head h reads kv head h / 2. The mask hides key 1.
  RefTensor y = run_kiln({{"q", sym_shape({1, 4, 1, 2})},
                          {"k", sym_shape({1, 2, 3, 2})},
                          {"v", sym_shape({1, 2, 3, 1})},
                          {"m", sym_shape({1, 1, 1, 3})}},
                         {{"scale", 1.0}},
                         {{"q", T({1, 4, 1, 2}, std::vector<double>(8, 0.0))},
                          {"k", T({1, 2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6})},
                          {"v", T({1, 2, 3, 1}, {1, 100, 3, 10, 100, 30})},
                          {"m", T({1, 1, 1, 3}, {0, -kInf, 0})}});
  EXPECT_TRUE(tensors_close(y, T({1, 4, 1, 1}, {2, 2, 20, 20}), 1e-15, 0, "y"));
}

TEST(KilnAttention, InferredShapeIsSymbolic) {
  Result<ir::Graph> g = kiln_attention({{"q", sym_shape({2, 8, -1, 16})},
                                        {"k", sym_shape({2, 2, -1, 16})},
                                        {"v", sym_shape({2, 2, -1, 4})}},
                                       {{"scale", 0.25}, {"causal", int64_t{1}}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->values[g->find_value("y")].shape, sym_shape({2, 8, -1, 4}));
}

TEST(KilnAttention, Errors) {
  const std::vector<In> qkv = {{"q", sym_shape({1, 4, -1, 8})},
                               {"k", sym_shape({1, 2, -1, 8})},
                               {"v", sym_shape({1, 2, -1, 8})}};
  expect_kiln_error(qkv, {}, "'scale' is required");
  expect_kiln_error(qkv, {{"scale", 1.0}, {"causal", int64_t{2}}},
                    "'causal' must be 0 or 1, got 2");
  expect_kiln_error({{"q", sym_shape({1, 3, -1, 8})},
                     {"k", sym_shape({1, 2, -1, 8})},
                     {"v", sym_shape({1, 2, -1, 8})}},
                    {{"scale", 1.0}}, "3 query heads are not a multiple of 2");
  expect_kiln_error({{"q", sym_shape({1, 4, -1, 8})},
                     {"k", sym_shape({1, 2, -1, 4})},
                     {"v", sym_shape({1, 2, -1, 8})}},
                    {{"scale", 1.0}}, "K head size vs Q head size: 4 vs 8");
  expect_kiln_error({{"q", sym_shape({1, 4, -1})},
                     {"k", sym_shape({1, 2, -1, 8})},
                     {"v", sym_shape({1, 2, -1, 8})}},
                    {{"scale", 1.0}}, "'q' is [1, 4, S], expected rank 4");
  std::vector<In> masked = qkv;
  masked.push_back({"m", sym_shape({1, 3, 1, 1})});
  expect_kiln_error(masked, {{"scale", 1.0}},
                    "mask [1, 3, 1, 1] does not broadcast to [1, 4, S, S]");
  std::vector<In> padded = qkv;
  padded.push_back({"", {}});
  padded.push_back({"p", sym_shape({1, 5}), DType::kI32});
  expect_kiln_error(padded, {{"scale", 1.0}}, "key_padding 'p' is [1, 5], expected [1, S]");
  expect_kiln_error({{"q", sym_shape({1, 4, -1, 8})},
                     {"k", sym_shape({1, 2, -1, 8}), DType::kF64},
                     {"v", sym_shape({1, 2, -1, 8})}},
                    {{"scale", 1.0}}, "input 'k' is f64, Q is f32");
}

// ---- ONNX Attention -----------------------------------------------------------------------------

TEST(OnnxAttention, DefaultScaleIsOneOverSqrtHeadSize) {
  // D = 4, q·k = 4·ln 3 → scaled by 1/2 → 2 ln 3: weights 1/10, 9/10.
  const double l = std::log(3.0);
  auto out = run(R"(g (float[1, 1, 1, 4] q, float[1, 1, 2, 4] k, float[1, 1, 2, 1] v)
                    => (float[1, 1, 1, 1] y) { y = Attention(q, k, v) })",
                 {{"q", T({1, 1, 1, 4}, {1, 1, 1, 1})},
                  {"k", T({1, 1, 2, 4}, {0, 0, 0, 0, l, l, l, l})},
                  {"v", T({1, 1, 2, 1}, {10, 20})}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 1, 1}, {19}), 1e-6, 0, "y"));
}

TEST(OnnxAttention, CausalAlignsToThePastNotTheEnd) {
  // ONNX: query i sees key j <= i + past. With 3 keys, 2 queries and no past: row 0 sees key 0
  // only (kiln.Attention would let it see keys 0 and 1).
  auto out = run(R"(g (float[1, 1, 2, 1] q, float[1, 1, 3, 1] k, float[1, 1, 3, 1] v)
                    => (float[1, 1, 2, 1] y) { y = Attention<is_causal = 1>(q, k, v) })",
                 {{"q", T({1, 1, 2, 1}, {0, 0})},
                  {"k", T({1, 1, 3, 1}, {1, 2, 3})},
                  {"v", T({1, 1, 3, 1}, {1, 2, 6})}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 2, 1}, {1, 1.5}), 1e-15, 0, "y"));
}

TEST(OnnxAttention, PastIsConcatenatedAndReturnedAsPresent) {
  auto out = run(R"(
    g (float[1, 1, 2, 1] q, float[1, 1, 2, 1] k, float[1, 1, 2, 1] v, float[1, 1, 1, 1] pk,
       float[1, 1, 1, 1] pv) => (float[1, 1, 2, 1] y, float[1, 1, 3, 1] k2, float[1, 1, 3, 1] v2) {
      y, k2, v2 = Attention<is_causal = 1>(q, k, v, , pk, pv)
    })",
                 {{"q", T({1, 1, 2, 1}, {0, 0})},
                  {"k", T({1, 1, 2, 1}, {2, 3})},
                  {"v", T({1, 1, 2, 1}, {4, 7})},
                  {"pk", T({1, 1, 1, 1}, {1})},
                  {"pv", T({1, 1, 1, 1}, {1})}});
  // Row 0 sees the past key and key 0; row 1 all three.
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 2, 1}, {2.5, 4}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["k2"], T({1, 1, 3, 1}, {1, 2, 3}), 0, 0, "present_key"));
  EXPECT_TRUE(tensors_close(out["v2"], T({1, 1, 3, 1}, {1, 4, 7}), 0, 0, "present_value"));
}

TEST(OnnxAttention, BoolMaskTrueAttendsAndAllMaskedRowIsZero) {
  auto out = run(R"(g (float[1, 1, 2, 1] q, float[1, 1, 3, 1] k, float[1, 1, 3, 1] v,
                       bool[1, 1, 2, 3] m) => (float[1, 1, 2, 1] y) { y = Attention(q, k, v, m) })",
                 {{"q", T({1, 1, 2, 1}, {0, 0})},
                  {"k", T({1, 1, 3, 1}, {1, 2, 3})},
                  {"v", T({1, 1, 3, 1}, {1, 2, 6})},
                  {"m", T({1, 1, 2, 3}, {1, 0, 1, 0, 0, 0}, DType::kBool)}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 2, 1}, {3.5, 0}), 1e-15, 0, "y"));
}

TEST(OnnxAttention, ThreeDInputsWithGqaAndSoftcap) {
  // [B, S, H·D] with q_num_heads 2, kv_num_heads 1, D = 1; scale 1 and softcap 1:
  // scores tanh(q·k). Query head 1's row 0 sees keys 0, 1 with scores tanh(0)=0, tanh(1).
  const std::string body = R"(
    g (float[1, 2, 2] q, float[1, 2, 1] k, float[1, 2, 1] v) => (float[1, 2, 2] y) {
      y = Attention<q_num_heads = 2, kv_num_heads = 1, scale = 1.0, softcap = 1.0>(q, k, v)
    })";
  auto out = run(body, {{"q", T({1, 2, 2}, {0, 1, 0, 1})},
                        {"k", T({1, 2, 1}, {0, 1})},
                        {"v", T({1, 2, 1}, {0, 1})}});
  const double w = std::exp(std::tanh(1.0)) / (1 + std::exp(std::tanh(1.0)));
  // Layout [B, S, H·D]: (s0 h0, s0 h1, s1 h0, s1 h1); head 0 has q = 0 → uniform 0.5.
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2, 2}, {0.5, w, 0.5, w}), 1e-6, 0, "y"));
}

TEST(OnnxAttention, ThreeDShapes) {
  ir::Graph g = import_text_ok(kHead + R"(
    g (float[2, S, 32] q, float[2, S, 16] k, float[2, S, 8] v)
        => (float[2, S, 16] y, float[2, 2, S, 8] pk, float[2, 2, S, 4] pv) {
      y, pk, pv = Attention<q_num_heads = 4, kv_num_heads = 2>(q, k, v)
    })",
                               ImportOptions{"S", {}});
  EXPECT_EQ(g.values[g.find_value("pv")].shape,
            (ir::Shape{DimExpr::constant(2), DimExpr::constant(2), DimExpr::size(),
                       DimExpr::constant(4)}));
}

TEST(OnnxAttention, Errors) {
  const std::string sig =
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v) => (float[1, 4, S, 8] y";
  expect_error(sig + ", float a, float b, float c) { y, a, b, c = Attention(q, k, v) }",
               StatusCode::kUnimplemented, {"(Attention)", "qk_matmul_output) is not supported"});
  expect_error(
      "g (float[1, S, 32] q, float[1, S, 16] k, float[1, S, 16] v) => (float y) "
      "{ y = Attention(q, k, v) }",
      StatusCode::kInvalidArgument, {"'q_num_heads' must be a positive head count"});
  expect_error(
      "g (float[1, S, 30] q, float[1, S, 16] k, float[1, S, 16] v) => (float y) "
      "{ y = Attention<q_num_heads = 4, kv_num_heads = 2>(q, k, v) }",
      StatusCode::kInvalidArgument, {"q hidden size 30 is not a multiple of 4 heads"});
  expect_error(sig + ") { y = Attention<is_causal = 3>(q, k, v) }", StatusCode::kInvalidArgument,
               {"'is_causal' must be 0 or 1, got 3"});
  expect_error(sig + ") { y = Attention<softcap = -1.0>(q, k, v) }", StatusCode::kInvalidArgument,
               {"'softcap' must be >= 0"});
  expect_error(
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v, int32[1, 1, S, S] "
      "m) => (float y) { y = Attention(q, k, v, m) }",
      StatusCode::kInvalidArgument, {"attn_mask 'm' is i32, expected bool or f32"});
  expect_error(
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v, float[1, 2, 3, 8] "
      "pk) => (float y) { y = Attention(q, k, v, , pk) }",
      StatusCode::kInvalidArgument, {"past_key and past_value must be given together"});
  expect_error(
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v, float[1, 2, 3, 4] "
      "pk, float[1, 2, 3, 8] pv) => (float y) { y = Attention(q, k, v, , pk, pv) }",
      StatusCode::kInvalidArgument, {"past_key [1, 2, 3, 4] / past_value [1, 2, 3, 8]"});
  expect_error(
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, 2, S, 8] v, float[1, 1, S, 4] "
      "m) => (float y) { y = Attention(q, k, v, m) }",
      StatusCode::kInvalidArgument, {"attn_mask [1, 1, S, 4] does not broadcast"});
  expect_error(
      "g (float[1, 4, S, 8] q, float[1, 2, S, 8] k, float[1, S, 2, 8] v) => (float y) "
      "{ y = Attention(q, k, v) }",
      StatusCode::kInvalidArgument, {"V heads vs K heads: S vs 2"});
}

}  // namespace
}  // namespace kiln::compiler
