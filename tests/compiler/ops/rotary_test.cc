// The rotary family (compiler/ops/rotary.cc): kiln.Rotary (half / interleaved / full tables,
// partial rotation, broadcasting), ONNX RotaryEmbedding and com.microsoft RotaryEmbedding on
// hand-computed rotations, plus their errors. onnxruntime's outputs are checked in
// op_models_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

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
using Attrs = std::map<std::string, ir::AttrValue>;

const std::string kHead = R"(<ir_version: 10, opset_import: ["" : 23, "com.microsoft" : 1]> )";

// One kiln.Rotary node over graph inputs x, cos, sin (the importer refuses the kiln domain).
Result<ir::Graph> kiln_rotary(const ir::Shape& x, const ir::Shape& cs, Attrs attrs) {
  ir::Graph g = kiln::testing::one_node_graph(
      "rot", "kiln", "Rotary", {{"x", x}, {"cos", cs}, {"sin", cs}}, std::move(attrs), 23);
  KILN_RETURN_IF_ERROR(graph_infer(g, InferOptions{}));
  return g;
}

RefTensor run_kiln(const RefTensor& x, const RefTensor& cos, const RefTensor& sin, Attrs attrs) {
  ir::Shape xs, cs;
  for (int64_t d : x.dims) xs.push_back(DimExpr::constant(d));
  for (int64_t d : cos.dims) cs.push_back(DimExpr::constant(d));
  return kiln::testing::run_one_node(kiln_rotary(xs, cs, std::move(attrs)), 1,
                                     {{"x", x}, {"cos", cos}, {"sin", sin}});
}

void expect_kiln_error(const ir::Shape& x, const ir::Shape& cs, Attrs attrs,
                       const std::string& needle) {
  Result<ir::Graph> g = kiln_rotary(x, cs, std::move(attrs));
  ASSERT_FALSE(g.ok()) << needle;
  EXPECT_NE(g.status().message().find("node 'rot' (kiln.Rotary)"), std::string::npos);
  EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
}

std::map<std::string, RefTensor> run(const std::string& body,
                                     const std::map<std::string, RefTensor>& in) {
  return kiln::testing::run(import_text_ok(kHead + body, ImportOptions{"", {}}), 1, in);
}

void expect_error(const std::string& body, StatusCode code, const std::string& needle) {
  kiln::testing::expect_import_error(kHead + body, code, {needle}, "S");
}

// A 90° turn for pair 0 (cos 0, sin 1) and none for pair 1 (cos 1, sin 0).
const RefTensor kX = T({1, 4}, {1, 2, 3, 4});
const RefTensor kCos = T({1, 2}, {0, 1}), kSin = T({1, 2}, {1, 0});

// ---- kiln.Rotary --------------------------------------------------------------------------------

TEST(KilnRotary, HalvesPairsAcrossTheHalves) {
  // Pairs (x0, x2) and (x1, x3): (1, 3) → (−3, 1); (2, 4) unchanged.
  EXPECT_TRUE(tensors_close(run_kiln(kX, kCos, kSin, {}), T({1, 4}, {-3, 2, 1, 4}), 0, 0, "y"));
}

TEST(KilnRotary, InterleavedPairsNeighbours) {
  // Pairs (x0, x1) and (x2, x3): (1, 2) → (−2, 1); (3, 4) unchanged.
  EXPECT_TRUE(tensors_close(run_kiln(kX, kCos, kSin, {{"interleaved", int64_t{1}}}),
                            T({1, 4}, {-2, 1, 3, 4}), 0, 0, "y"));
}

TEST(KilnRotary, FullTableMatchesTheHalfTable) {
  // Hugging Face's cat(freqs, freqs) table gives the same rotation as the half table.
  EXPECT_TRUE(tensors_close(run_kiln(kX, T({1, 4}, {0, 1, 0, 1}), T({1, 4}, {1, 0, 1, 0}), {}),
                            T({1, 4}, {-3, 2, 1, 4}), 0, 0, "y"));
}

TEST(KilnRotary, PartialRotationPassesTheRestThrough) {
  // rotary_dim 2: one pair (x0, x1) turned by 90°; x2, x3 untouched.
  EXPECT_TRUE(
      tensors_close(run_kiln(kX, T({1, 1}, {0}), T({1, 1}, {1}), {{"rotary_dim", int64_t{2}}}),
                    T({1, 4}, {-2, 1, 3, 4}), 0, 0, "y"));
}

TEST(KilnRotary, TablesBroadcastOverLeadingDims) {
  // X [2, 2, 2]: row s of the table serves position s of both batches.
  RefTensor x = T({2, 2, 2}, {1, 2, 1, 2, 3, 4, 3, 4});
  RefTensor y = run_kiln(x, T({2, 1}, {0, 1}), T({2, 1}, {1, 0}), {});
  EXPECT_TRUE(tensors_close(y, T({2, 2, 2}, {-2, 1, 1, 2, -4, 3, 3, 4}), 0, 0, "y"));
}

TEST(KilnRotary, Errors) {
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({-1, 4}), {{"rotary_dim", int64_t{3}}},
                    "rotary_dim 3 must be even, positive and at most the head size 8");
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({-1, 4}), {{"rotary_dim", int64_t{10}}},
                    "at most the head size 8");
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({-1, 3}), {},
                    "cos's last dim 3 must be rotary_dim/2 = 4 or rotary_dim = 8");
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({-1, 8}), {{"interleaved", int64_t{1}}},
                    "a full-width cos/sin table cannot be interleaved");
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({3, 4}), {},
                    "cos/sin [3] does not broadcast to [2, S]");
  expect_kiln_error(sym_shape({2, -1, 8}), sym_shape({-1, 4}), {{"interleaved", int64_t{2}}},
                    "'interleaved' must be 0 or 1, got 2");
}

// ---- ONNX RotaryEmbedding -----------------------------------------------------------------------

// Cache rows: position 0 turns nothing, position 1 turns pair 0 by 90°.
const RefTensor kCosCache = T({2, 2}, {1, 1, 0, 1}), kSinCache = T({2, 2}, {0, 0, 1, 0});

TEST(OnnxRotary, FourDGathersRowsByPositionIds) {
  auto out = run(R"(g (float[1, 1, 2, 4] x, float[2, 2] c, float[2, 2] s, int64[1, 2] p)
                    => (float[1, 1, 2, 4] y) { y = RotaryEmbedding(x, c, s, p) })",
                 {{"x", T({1, 1, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4})},
                  {"c", kCosCache},
                  {"s", kSinCache},
                  {"p", T({1, 2}, {1, 0}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 2, 4}, {-3, 2, 1, 4, 1, 2, 3, 4}), 0, 0, "y"));
}

TEST(OnnxRotary, ThreeDInterleavedWithHeads) {
  // [B, S, H·D] with 2 heads of 4: both heads of step 0 at position 1.
  auto out = run(R"(g (float[1, 1, 8] x, float[2, 2] c, float[2, 2] s, int64[1, 1] p)
                    => (float[1, 1, 8] y) {
                      y = RotaryEmbedding<interleaved = 1, num_heads = 2>(x, c, s, p) })",
                 {{"x", T({1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8})},
                  {"c", kCosCache},
                  {"s", kSinCache},
                  {"p", T({1, 1}, {1}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 8}, {-2, 1, 3, 4, -6, 5, 7, 8}), 0, 0, "y"));
}

TEST(OnnxRotary, PerTokenTablesAndPartialRotation) {
  // No position_ids: cos/sin are [B, S, R/2], here [1, S, R/2] broadcast over the batch as
  // exporters write it. rotary_embedding_dim 2 of D = 4.
  auto out = run(R"(g (float[2, 1, 1, 4] x, float[1, 1, 1] c, float[1, 1, 1] s)
                    => (float[2, 1, 1, 4] y) {
                      y = RotaryEmbedding<rotary_embedding_dim = 2>(x, c, s) })",
                 {{"x", T({2, 1, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8})},
                  {"c", T({1, 1, 1}, {0})},
                  {"s", T({1, 1, 1}, {1})}});
  EXPECT_TRUE(tensors_close(out["y"], T({2, 1, 1, 4}, {-2, 1, 3, 4, -6, 5, 7, 8}), 0, 0, "y"));
}

TEST(OnnxRotary, PositionOutsideTheCacheIsAnError) {
  ir::Graph g = import_text_ok(kHead + R"(
    g (float[1, 1, 1, 4] x, float[2, 2] c, float[2, 2] s, int64[1, 1] p) => (float[1, 1, 1, 4] y) {
      y = RotaryEmbedding(x, c, s, p) })",
                               ImportOptions{"", {}});
  auto r = reference_run(g, 1,
                         {{"x", T({1, 1, 1, 4}, {1, 2, 3, 4})},
                          {"c", kCosCache},
                          {"s", kSinCache},
                          {"p", T({1, 1}, {2}, DType::kI64)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position 2 (batch 0, step 0) is outside the cos/sin "
                                      "cache's 2 rows"),
            std::string::npos)
      << r.status().message();
}

TEST(OnnxRotary, Errors) {
  expect_error(R"(g (float[1, S, 8] x, float[4, 2] c, float[4, 2] s, int64[1, S] p) => (float y) {
                  y = RotaryEmbedding(x, c, s, p) })",
               StatusCode::kInvalidArgument, "a 3-D X needs a positive 'num_heads'");
  expect_error(R"(g (float[1, 2, S, 8] x, float[4, 2] c, float[4, 2] s, int64[1, S] p)
                  => (float y) { y = RotaryEmbedding(x, c, s, p) })",
               StatusCode::kInvalidArgument, "cos_cache 'c' is [4, 2], expected [4, 4]");
  expect_error(R"(g (float[1, 2, S, 8] x, float[4, 4] c, float[4, 4] s, int64[S] p)
                  => (float y) { y = RotaryEmbedding(x, c, s, p) })",
               StatusCode::kInvalidArgument, "position_ids 'p' is [S], expected [1, S]");
  expect_error(R"(g (float[1, 2, S, 8] x, float[4, 4] c, float[4, 4] s) => (float y) {
                  y = RotaryEmbedding(x, c, s) })",
               StatusCode::kInvalidArgument,
               "cos_cache (no position_ids) [4, 4] does not broadcast to [1, S, 4]");
  expect_error(R"(g (float[1, 2, S, 8] x, float[4, 2] c, float[4, 2] s, int64[1, S] p)
                  => (float y) { y = RotaryEmbedding<rotary_embedding_dim = 5>(x, c, s, p) })",
               StatusCode::kInvalidArgument, "rotary_embedding_dim 5 must be even");
}

// ---- com.microsoft RotaryEmbedding --------------------------------------------------------------

TEST(MsRotary, StartPositionCountsUpAlongTheSequence) {
  // One position p: step s uses row p + s. p = 0: step 0 unchanged, step 1 turned.
  auto out = run(R"(g (float[1, 2, 4] x, int64[1] p, float[2, 2] c, float[2, 2] s)
                    => (float[1, 2, 4] y) {
                      y = com.microsoft.RotaryEmbedding<num_heads = 1>(x, p, c, s) })",
                 {{"x", T({1, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4})},
                  {"p", T({1}, {0}, DType::kI64)},
                  {"c", kCosCache},
                  {"s", kSinCache}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2, 4}, {1, 2, 3, 4, -3, 2, 1, 4}), 0, 0, "y"));
}

TEST(MsRotary, HeadCountFromTheCacheWidth) {
  // No num_heads: head size = 2 · cache width = 4, so [1, 1, 8] holds 2 heads.
  auto out = run(R"(g (float[1, 1, 8] x, int64[1, 1] p, float[2, 2] c, float[2, 2] s)
                    => (float[1, 1, 8] y) { y = com.microsoft.RotaryEmbedding(x, p, c, s) })",
                 {{"x", T({1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8})},
                  {"p", T({1, 1}, {1}, DType::kI64)},
                  {"c", kCosCache},
                  {"s", kSinCache}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 8}, {-3, 2, 1, 4, -7, 6, 5, 8}), 0, 0, "y"));
}

TEST(MsRotary, Errors) {
  expect_error(R"(g (float[1, S, 8] x, int64[1, S] p, float[4, 4] c, float[4, 4] s) => (float y) {
                  y = com.microsoft.RotaryEmbedding<is_packed_batching = 1>(x, p, c, s) })",
               StatusCode::kUnimplemented,
               "is_packed_batching = 1 (ragged batches) is not supported");
  expect_error(R"(g (float[1, S, 8] x, int64[1, S] p, float[4, 4] c, float[4, 4] s) => (float y) {
                  y = com.microsoft.RotaryEmbedding<rotary_embedding_dim = 4>(x, p, c, s) })",
               StatusCode::kInvalidArgument, "rotary_embedding_dim needs num_heads");
  expect_error(R"(g (float[1, S, 8] x, int64[2] p, float[4, 4] c, float[4, 4] s) => (float y) {
                  y = com.microsoft.RotaryEmbedding(x, p, c, s) })",
               StatusCode::kInvalidArgument, "position_ids 'p' is [2], expected [1] or [1, S]");
  expect_error(R"(g (float[1, S, 8] x, int64[1, S] p, float[4, 4] c, float[4, 3] s) => (float y) {
                  y = com.microsoft.RotaryEmbedding(x, p, c, s) })",
               StatusCode::kInvalidArgument, "sin_cache 's' is [4, 3], expected [4, 4]");
}

}  // namespace
}  // namespace kiln::compiler
