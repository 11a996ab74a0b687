// simplify_attention: attention that arrives as an op (here ONNX Attention, opset 23)
// with a mask computed from shapes or from an attention_mask input ends up causal / with a
// key_padding input, computing exactly what the original graph computed.
#include "compiler/passes/simplify_attention.h"

#include <gtest/gtest.h>

#include "compiler/frontend/canonicalize.h"
#include "compiler/passes/legalize_variants.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using testing::graphs_equivalent;
using testing::import_text_ok;

constexpr const char* kHead = R"(<ir_version: 10, opset_import: ["" : 23]>)";

ir::Graph lowered(const ir::Graph& g) {
  ir::Graph out = g;
  EXPECT_TRUE(canonicalize(out).ok());
  EXPECT_TRUE(legalize_variants(out).ok());
  Status s = simplify_attention(out, 16);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

const ir::Node* the_attention(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes)
    if (n.domain == "kiln" && n.op == "Attention") return &n;
  return nullptr;
}

bool has_input(const ir::Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] >= 0; }

TEST(SimplifyAttention, CausalMaskFromShapesBecomesCausal) {
  const ir::Graph g = import_text_ok(std::string(kHead) + R"(
g (float[2, 4, N, 8] q, float[2, 4, N, 8] k, float[2, 4, N, 8] v) => (float[2, 4, N, 8] y) {
  shp = Shape(q)
  two = Constant<value_int = 2>()
  zero = Constant<value_int = 0>()
  one = Constant<value_int = 1>()
  n = Gather<axis = 0>(shp, two)
  r = Range(zero, n, one)
  a1 = Constant<value_ints = [1]>()
  a0 = Constant<value_ints = [0]>()
  rows = Unsqueeze(r, a1)
  cols = Unsqueeze(r, a0)
  m = LessOrEqual(cols, rows)
  y = Attention(q, k, v, m)
})",
                                     ImportOptions{"N", {}});
  const ir::Graph after = lowered(g);
  const ir::Node* at = the_attention(after);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at->attr_int("causal", 0), 1);
  EXPECT_FALSE(has_input(*at, 3));
  EXPECT_FALSE(has_input(*at, 4));
  EXPECT_EQ(testing::count_ops(after, "Range"), 0);  // the mask subgraph is gone
  EXPECT_TRUE(graphs_equivalent(g, after, {1, 2, 5, 9}, 1e-9, 1e-9));
}

TEST(SimplifyAttention, AttentionMaskInputBecomesKeyPadding) {
  const ir::Graph g = import_text_ok(std::string(kHead) + R"(
g (float[2, 4, N, 8] q, float[2, 4, N, 8] k, float[2, 4, N, 8] v, int64[2, N] am)
    => (float[2, 4, N, 8] y) {
  b = Cast<to = 9>(am)
  ax = Constant<value_ints = [1, 2]>()
  m = Unsqueeze(b, ax)
  y = Attention(q, k, v, m)
})",
                                     ImportOptions{"N", {}});
  const ir::Graph after = lowered(g);
  const ir::Node* at = the_attention(after);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(at->attr_int("causal", 0), 0);
  EXPECT_FALSE(has_input(*at, 3));
  ASSERT_TRUE(has_input(*at, 4));
  EXPECT_EQ(after.values[at->inputs[4]].name, "am");
  // A fixed mask with padded keys in both rows but never a whole row: a fully padded row gives
  // zeros in kiln.Attention and a uniform average in the original, by design.
  std::map<std::string, RefTensor> in = testing::random_inputs(g, 5, 3);
  in["am"].data = {1, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  auto a = reference_run(g, 5, in);
  auto b = reference_run(after, 5, in);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(testing::tensors_close(b->at("y"), a->at("y"), 1e-9, 1e-9, "y"));
}

// q [2, 4, N, 8] attending over k and v [2, 2, N, 8], each head repeated twice as Hugging Face's
// repeat_kv does; `k_path` turns the repeated keys `kr` into the attention's K input `kin`.
ir::Graph repeated_kv_graph(const std::string& k_path) {
  return import_text_ok(std::string(kHead) + R"(
g (float[2, 4, N, 8] q, float[2, 2, N, 8] k, float[2, 2, N, 8] v) => (float[2, 4, N, 8] y) {
  ax = Constant<value_ints = [2]>()
  lo = Constant<value_ints = [2]>()
  hi = Constant<value_ints = [4]>()
  ks = Shape(k)
  tail = Slice(ks, lo, hi)
  c222 = Constant<value_ints = [2, 2, 2]>()
  c24 = Constant<value_ints = [2, 4]>()
  big = Concat<axis = 0>(c222, tail)
  flat = Concat<axis = 0>(c24, tail)
  ku = Unsqueeze(k, ax)
  ke = Expand(ku, big)
  kr = Reshape(ke, flat)
  vu = Unsqueeze(v, ax)
  ve = Expand(vu, big)
  vr = Reshape(ve, flat)
)" + k_path + R"(
  y = Attention<is_causal = 1>(q, kin, vr)
})",
                        ImportOptions{"N", {}});
}

void expect_read_before_the_repeat(const ir::Graph& g) {
  const ir::Graph after = lowered(g);
  const ir::Node* at = the_attention(after);
  ASSERT_NE(at, nullptr);
  EXPECT_EQ(after.values[at->inputs[1]].name, "k");
  EXPECT_EQ(after.values[at->inputs[2]].name, "v");
  EXPECT_EQ(testing::count_ops(after, "Expand"), 0);
  EXPECT_TRUE(graphs_equivalent(g, after, {1, 2, 7}, 1e-9, 1e-9));
}

TEST(SimplifyAttention, RepeatedKeyValueHeadsAreReadBeforeTheRepeat) {
  expect_read_before_the_repeat(repeated_kv_graph("  kin = Identity(kr)"));
}

// The dynamo exporter's decomposed SDPA transposes the repeated keys for Q·Kᵀ through a
// [B·H, S, D] view ([B·H, D, S], then [B, H, D, S]), and fuse_attention transposes them back:
// an identity that the un-repeat looks through.
TEST(SimplifyAttention, RepeatedKeysTransposedAndBackAreReadBeforeTheRepeat) {
  expect_read_before_the_repeat(repeated_kv_graph(R"(
  s3 = Constant<value_ints = [8, -1, 8]>()
  k3 = Reshape(kr, s3)
  k3t = Transpose<perm = [0, 2, 1]>(k3)
  s4 = Constant<value_ints = [2, 4, 8, -1]>()
  k4t = Reshape(k3t, s4)
  kin = Transpose<perm = [0, 1, 3, 2]>(k4t))"));
}

TEST(SimplifyAttention, GeneralMaskStays) {
  const ir::Graph g = import_text_ok(std::string(kHead) + R"(
g (float[2, 4, N, 8] q, float[2, 4, N, 8] k, float[2, 4, N, 8] v, float[2, 4, N, N] m)
    => (float[2, 4, N, 8] y) {
  y = Attention(q, k, v, m)
})",
                                     ImportOptions{"N", {}});
  const ir::Graph after = lowered(g);
  const ir::Node* at = the_attention(after);
  ASSERT_NE(at, nullptr);
  EXPECT_TRUE(has_input(*at, 3));
  EXPECT_EQ(at->attr_int("causal", 0), 0);
  EXPECT_TRUE(graphs_equivalent(g, after, {1, 3, 6}, 1e-9, 1e-9));
}

}  // namespace
}  // namespace kiln::compiler
