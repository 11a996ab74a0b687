// Layout lowering (compiler/backend/lower/lower_layout.cc, layout_codegen.cc): which steps each op
// becomes, padding-safety refusals, the kernel paths (vector, tiled, scalar), and that every
// generated kernel compiles with NVRTC for sm_80 and sm_90 in f32, f16, bf16 and int64.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/layout_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/precision.h"
#include "tests/support/lower_harness.h"
#include "tests/support/onnx_builder.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using testing::OnnxBuilder;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int kI64 = onnx::TensorProto::INT64;
const testing::Dim S = std::string("S");

struct Lowered {
  ir::Graph graph;
  LoweredProgram program;
};

Result<Lowered> lower_model(const OnnxBuilder& b, Precision p = Precision::kF32) {
  Lowered out;
  KILN_ASSIGN_OR_RETURN(out.program, testing::lower_model(b, out.graph, p));
  return out;
}

// Kernel symbols of the launches, in order.
std::vector<std::string> launched(const LoweredProgram& p) {
  std::vector<std::string> out;
  for (const auto& s : p.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&s))
      out.push_back(p.kernels[k->kernel].symbol);
    else
      out.push_back("gemm");
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// --- models -------------------------------------------------------------------------------------

OnnxBuilder transpose_model(std::vector<testing::Dim> dims, std::vector<int64_t> perm) {
  return OnnxBuilder("transpose")
      .input("x", dims)
      .node("Transpose", {"x"}, {"y"}, {{"perm", perm}})
      .output("y");
}

OnnxBuilder slice_model(std::vector<int64_t> starts, std::vector<int64_t> ends,
                        std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const auto n = static_cast<int64_t>(starts.size());
  return OnnxBuilder("slice")
      .input("x", {S, int64_t{24}, int64_t{64}})
      .int64_initializer("st", {n}, starts)
      .int64_initializer("en", {n}, ends)
      .int64_initializer("ax", {n}, axes)
      .int64_initializer("sp", {n}, steps)
      .node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"})
      .output("y");
}

OnnxBuilder concat_model() {
  return OnnxBuilder("concat")
      .input("a", {S, int64_t{8}})
      .input("b", {S, int64_t{16}})
      .input("c", {S, int64_t{3}})
      .node("Concat", {"a", "b", "c"}, {"y"}, {{"axis", int64_t{1}}})
      .output("y");
}

OnnxBuilder split_model() {
  return OnnxBuilder("split")
      .input("x", {S, int64_t{40}})
      .int64_initializer("sz", {3}, {8, 16, 16})
      .node("Split", {"x", "sz"}, {"a", "b", "c"}, {{"axis", int64_t{1}}})
      .output("a")
      .output("b")
      .output("c");
}

OnnxBuilder embedding_model() {
  return OnnxBuilder("embed")
      .typed_input("ids", kI64, {int64_t{2}, S})
      .random_initializer("table", {50, 64})
      .node("Gather", {"table", "ids"}, {"y"})
      .output("y");
}

OnnxBuilder gather_axis1_model() {
  return OnnxBuilder("gather1")
      .input("x", {S, int64_t{7}, int64_t{5}})
      .int64_initializer("i", {3}, {-1, 0, 6})
      .node("Gather", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
      .output("y");
}

OnnxBuilder gather_elements_model() {
  return OnnxBuilder("gather_el")
      .input("x", {S, int64_t{6}})
      .typed_input("i", kI64, {S, int64_t{4}})
      .node("GatherElements", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
      .output("y");
}

// GatherND as dynamo exports it for BERT's mask: tuples (b, j) built from the constant batch
// counter and the position counter Range(0, S, 1), both expanded to [2, S] and joined on a new
// last axis; GatherND(x [2, S], idx [2, S, 2]) reads x[b, j] at [b, j].
OnnxBuilder gather_nd_positions_model() {
  return OnnxBuilder("gather_nd_pos")
      .input("x", {int64_t{2}, S})
      .int64_initializer("zero", {}, {0})
      .int64_initializer("one", {}, {1})
      .int64_initializer("two", {}, {2})
      .int64_initializer("ax0", {1}, {0})
      .int64_initializer("ax1", {1}, {1})
      .int64_initializer("last", {1}, {-1})
      .node("Shape", {"x"}, {"shp"})
      .node("Gather", {"shp", "one"}, {"n"})
      .node("Range", {"zero", "n", "one"}, {"pos"})
      .node("Unsqueeze", {"pos", "ax0"}, {"pos1"})
      .node("Expand", {"pos1", "shp"}, {"pos2"})
      .node("Unsqueeze", {"pos2", "last"}, {"pos3"})
      .node("Range", {"zero", "two", "one"}, {"bat"})
      .node("Unsqueeze", {"bat", "ax1"}, {"bat1"})
      .node("Expand", {"bat1", "shp"}, {"bat2"})
      .node("Unsqueeze", {"bat2", "last"}, {"bat3"})
      .node("Concat", {"bat3", "pos3"}, {"idx"}, {{"axis", int64_t{-1}}})
      .node("GatherND", {"x", "idx"}, {"y"})
      .output("y");
}

// Rows of a table by run-time 1-tuples (an embedding lookup written as GatherND).
OnnxBuilder gather_nd_rows_model() {
  return OnnxBuilder("gather_nd_rows")
      .typed_input("ids", kI64, {int64_t{2}, S, int64_t{1}})
      .random_initializer("table", {50, 64})
      .node("GatherND", {"table", "ids"}, {"y"})
      .output("y");
}

// ConstantOfShape of a size-dependent shape (default value: float 0) feeding an Add.
OnnxBuilder fill_model() {
  return OnnxBuilder("fill")
      .input("x", {S, int64_t{4}})
      .node("Shape", {"x"}, {"shp"})
      .node("ConstantOfShape", {"shp"}, {"z"})
      .node("Add", {"x", "z"}, {"y"})
      .output("y");
}

OnnxBuilder range_model() {  // Range(0, S, 1): position ids
  return OnnxBuilder("range")
      .input("x", {S, int64_t{4}})
      .int64_initializer("zero", {}, {0})
      .int64_initializer("one", {}, {1})
      .node("Shape", {"x"}, {"shp"})
      .node("Gather", {"shp", "zero"}, {"n"})
      .node("Range", {"zero", "n", "one"}, {"y"})
      .typed_output("y", kI64);
}

// ONNX RotaryEmbedding (opset 23) → Gather of the caches + kiln.Rotary.
OnnxBuilder rotary_model(int64_t rotary_dim, int64_t interleaved) {
  const int64_t half = (rotary_dim == 0 ? 16 : rotary_dim) / 2;
  return OnnxBuilder("rotary", 23)
      .input("x", {int64_t{2}, int64_t{4}, S, int64_t{16}})
      .random_initializer("cos", {64, half}, -1, 1, 3)
      .random_initializer("sin", {64, half}, -1, 1, 4)
      .typed_input("pos", kI64, {int64_t{2}, S})
      .node("RotaryEmbedding", {"x", "cos", "sin", "pos"}, {"y"},
            {{"rotary_embedding_dim", rotary_dim}, {"interleaved", interleaved}})
      .output("y");
}

// Hugging Face's x·cos + rotate_half(x)·sin with full-width tables (fuse_rotary's pattern).
OnnxBuilder rotary_full_model() {
  return OnnxBuilder("rotary_full")
      .input("x", {int64_t{2}, int64_t{4}, S, int64_t{16}})
      .input("cos", {S, int64_t{16}})
      .input("sin", {S, int64_t{16}})
      .int64_initializer("z", {1}, {0})
      .int64_initializer("h", {1}, {8})
      .int64_initializer("e", {1}, {16})
      .int64_initializer("ax", {1}, {-1})
      .node("Slice", {"x", "z", "h", "ax"}, {"x1"})
      .node("Slice", {"x", "h", "e", "ax"}, {"x2"})
      .node("Neg", {"x2"}, {"nx2"})
      .node("Concat", {"nx2", "x1"}, {"rot"}, {{"axis", int64_t{-1}}})
      .node("Mul", {"x", "cos"}, {"a"})
      .node("Mul", {"rot", "sin"}, {"b"})
      .node("Add", {"a", "b"}, {"y"})
      .output("y");
}

OnnxBuilder int64_layout_model() {  // Transpose, Slice, Concat, Gather of int64 data
  return OnnxBuilder("ints")
      .typed_input("x", kI64, {S, int64_t{6}})
      .int64_initializer("st", {1}, {1})
      .int64_initializer("en", {1}, {5})
      .int64_initializer("ax", {1}, {1})
      .int64_initializer("i", {2}, {0, 3})
      .node("Transpose", {"x"}, {"t"}, {{"perm", std::vector<int64_t>{1, 0}}})
      .node("Slice", {"x", "st", "en", "ax"}, {"s"})
      .node("Concat", {"x", "s"}, {"c"}, {{"axis", int64_t{1}}})
      .node("Gather", {"c", "i"}, {"g"}, {{"axis", int64_t{1}}})
      .typed_output("t", kI64)
      .typed_output("g", kI64);
}

std::vector<std::pair<std::string, OnnxBuilder>> float_models() {
  return {
      {"transpose_0213", transpose_model({int64_t{2}, S, int64_t{4}, int64_t{64}}, {0, 2, 1, 3})},
      {"transpose_tiled", transpose_model({S, int64_t{48}, int64_t{40}}, {0, 2, 1})},
      {"transpose_scalar", transpose_model({S, int64_t{3}, int64_t{5}}, {2, 0, 1})},
      {"slice_strided", slice_model({2}, {20}, {1}, {3})},
      {"slice_rows", slice_model({0, 8}, {kMax, 40}, {0, 2}, {1, 1})},
      {"slice_reverse", slice_model({-1}, {-kMax}, {2}, {-1})},
      {"concat", concat_model()},
      {"split", split_model()},
      {"embedding", embedding_model()},
      {"gather_axis1", gather_axis1_model()},
      {"gather_elements", gather_elements_model()},
      {"gather_nd_positions", gather_nd_positions_model()},
      {"gather_nd_rows", gather_nd_rows_model()},
      {"fill", fill_model()},
      {"rotary", rotary_model(0, 0)},
      {"rotary_interleaved", rotary_model(0, 1)},
      {"rotary_partial", rotary_model(8, 0)},
      {"rotary_full", rotary_full_model()}};
}

// --- lowering decisions
// ---------------------------------------------------------------------------

TEST(LowerLayout, InnerViewsAreAliasesWithoutSteps) {
  auto m = lower_model(OnnxBuilder("views")
                           .input("x", {S, int64_t{8}})
                           .int64_initializer("shape", {3}, {-1, 2, 4})
                           .node("Relu", {"x"}, {"r"})
                           .node("Reshape", {"r", "shape"}, {"v"})
                           .node("Sigmoid", {"v"}, {"y"})
                           .output("y"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (const std::string& k : launched(m->program)) EXPECT_FALSE(starts_with(k, "kiln_copy")) << k;
  const int v = m->graph.find_value("v");
  ASSERT_GE(v, 0);
  EXPECT_EQ(resolve_alias(m->program, v), m->graph.find_value("r"));
}

TEST(LowerLayout, ASliceOfTheFirstRowsIsAnAlias) {
  // Slice(table, 0, S) of a constant (compiler/passes/size_tables.h makes these): the first
  // elements of the table's buffer, read in place; the Add is the only launch.
  std::vector<float> rows(1024 * 4);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<float>(k);
  auto m = lower_model(OnnxBuilder("prefix")
                           .input("x", {S, int64_t{4}})
                           .initializer("table", {1024, 4}, rows)
                           .int64_initializer("zero", {1}, {0})
                           .int64_initializer("first", {1}, {0})
                           .int64_initializer("one", {1}, {1})
                           .node("Shape", {"x"}, {"shape"})
                           .node("Slice", {"shape", "zero", "one"}, {"n"})
                           .node("Slice", {"table", "zero", "n", "first"}, {"t"})
                           .node("Add", {"x", "t"}, {"y"})
                           .output("y"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto k = launched(m->program);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_TRUE(starts_with(k[0], "kiln_ew_")) << k[0];
  EXPECT_EQ(resolve_alias(m->program, m->graph.find_value("t")), m->graph.find_value("table"));
}

TEST(LowerLayout, AViewThatIsAGraphOutputIsCopied) {
  auto m = lower_model(OnnxBuilder("view_out")
                           .input("x", {S, int64_t{8}})
                           .int64_initializer("shape", {3}, {-1, 2, 4})
                           .node("Reshape", {"x", "shape"}, {"y"})
                           .output("y"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->program.steps.size(), 1u);
  const auto& k = std::get<KernelLaunch>(m->program.steps[0]);
  EXPECT_TRUE(starts_with(m->program.kernels[k.kernel].symbol, "kiln_copy"));
  ASSERT_EQ(k.args.size(), 3u);
  EXPECT_EQ(k.args[0].value, m->graph.find_value("x"));
  EXPECT_EQ(k.args[1].value, m->graph.find_value("y"));
  EXPECT_EQ(k.work, DimExpr::size(2));  // 8·S floats as 4-wide vectors
}

TEST(LowerLayout, EachOpBecomesOneKernel) {
  const std::map<std::string, std::string> prefix = {{"transpose_0213", "kiln_transpose"},
                                                     {"transpose_tiled", "kiln_transpose"},
                                                     {"slice_strided", "kiln_slice"},
                                                     {"concat", "kiln_concat"},
                                                     {"split", "kiln_split"},
                                                     {"embedding", "kiln_gather"},
                                                     {"gather_elements", "kiln_gather_elements"},
                                                     {"gather_nd_rows", "kiln_gather_nd"}};
  for (auto& [name, model] : float_models()) {
    if (!prefix.contains(name)) continue;
    SCOPED_TRACE(name);
    auto m = lower_model(model);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto k = launched(m->program);
    ASSERT_EQ(k.size(), 1u);
    EXPECT_TRUE(starts_with(k[0], prefix.at(name) + "_")) << k[0];
  }
  auto f = lower_model(fill_model());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(launched(f->program).size(), 2u);  // the fill, then the Add
  EXPECT_TRUE(starts_with(launched(f->program)[0], "kiln_fill_")) << launched(f->program)[0];
  const auto& fill = std::get<KernelLaunch>(f->program.steps[0]);
  EXPECT_NE(f->program.kernels[fill.kernel].body.find("const double v = 0 + static_cast<double>(i) * 0;"),
            std::string::npos)
      << f->program.kernels[fill.kernel].body;
  auto r = lower_model(range_model());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(launched(r->program).size(), 1u);
  EXPECT_TRUE(starts_with(launched(r->program)[0], "kiln_range_"));
}

TEST(LowerLayout, RotaryBecomesTwoTableGathersAndOneRotaryKernel) {
  auto m = lower_model(rotary_model(0, 0));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto k = launched(m->program);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_TRUE(starts_with(k[0], "kiln_gather_"));
  EXPECT_TRUE(starts_with(k[2], "kiln_rotary_"));
  auto full = lower_model(rotary_full_model());
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_EQ(launched(full->program).size(), 1u) << "the HF pattern should fuse into kiln.Rotary";
  EXPECT_TRUE(starts_with(launched(full->program)[0], "kiln_rotary_"));
}

// --- padding safety
// -------------------------------------------------------------------------------

void expect_padding_refusal(const OnnxBuilder& b, const std::string& node) {
  auto m = lower_model(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().to_string();
  EXPECT_NE(m.status().message().find(node), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("padd"), std::string::npos) << m.status().message();
}

TEST(LowerLayout, RefusesASliceOfTheLastRowsOfTheSizeAxis) {
  expect_padding_refusal(slice_model({-1}, {kMax}, {0}, {1}), "Slice_0");
}

TEST(LowerLayout, RefusesAGatherAlongTheSizeAxisWithRunTimeIndices) {
  expect_padding_refusal(OnnxBuilder("g")
                             .input("x", {S, int64_t{4}})
                             .typed_input("i", kI64, {int64_t{2}})
                             .node("Gather", {"x", "i"}, {"y"})
                             .output("y"),
                         "Gather_0");
  expect_padding_refusal(OnnxBuilder("g")
                             .input("x", {S, int64_t{4}})
                             .int64_initializer("i", {1}, {-1})
                             .node("Gather", {"x", "i"}, {"y"})
                             .output("y"),
                         "Gather_0");
}

TEST(LowerLayout, GatherNdReadsTuplesOfIndices) {
  auto rows = lower_model(gather_nd_rows_model());
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  const auto& k = std::get<KernelLaunch>(rows->program.steps.back());
  const KernelDef& def = rows->program.kernels[k.kernel];
  EXPECT_NE(def.body.find("const long long d0 = 50LL, st0 = 64LL;"), std::string::npos)
      << def.body;
  EXPECT_NE(def.body.find("kiln::layout_index(static_cast<long long>(idx[j * 1LL + 0]), d0)"),
            std::string::npos)
      << def.body;
  EXPECT_EQ(k.work, DimExpr::size(32));  // 2·S rows of 64 floats as 4-wide vectors

  // BERT's mask tuples: the index chain (Range, Unsqueeze, Expand, Concat) runs first, then one
  // gather reading component 1 against the size axis.
  auto pos = lower_model(gather_nd_positions_model());
  ASSERT_TRUE(pos.ok()) << pos.status().to_string();
  const auto names = launched(pos->program);
  ASSERT_FALSE(names.empty());
  EXPECT_TRUE(starts_with(names.back(), "kiln_gather_nd_")) << names.back();
  const auto& g = std::get<KernelLaunch>(pos->program.steps.back());
  const std::string& body = pos->program.kernels[g.kernel].body;
  EXPECT_NE(body.find("const long long d1 = (1LL*S), st1 = 1LL;"), std::string::npos) << body;
  EXPECT_NE(body.find("idx[j * 2LL + 1]"), std::string::npos) << body;
}

TEST(LowerLayout, RefusesGatherNdTuplesThatMayReadPadding) {
  // Run-time indices into the size axis.
  expect_padding_refusal(OnnxBuilder("g")
                             .input("x", {S, int64_t{4}})
                             .typed_input("i", kI64, {int64_t{3}, int64_t{1}})
                             .node("GatherND", {"x", "i"}, {"y"})
                             .output("y"),
                         "GatherND_0");
  // A negative constant counts from the padded end.
  expect_padding_refusal(OnnxBuilder("g")
                             .input("x", {int64_t{2}, S})
                             .int64_initializer("i", {2, 2}, {0, 0, 1, -1})
                             .node("GatherND", {"x", "i"}, {"y"})
                             .output("y"),
                         "GatherND_0");
  // Non-negative constants are fine.
  EXPECT_TRUE(lower_model(OnnxBuilder("g")
                              .input("x", {int64_t{2}, S})
                              .int64_initializer("i", {2, 2}, {0, 0, 1, 0})
                              .node("GatherND", {"x", "i"}, {"y"})
                              .output("y"))
                  .ok());
  auto batch = lower_model(OnnxBuilder("g")
                               .input("x", {int64_t{2}, int64_t{3}, S})
                               .typed_input("i", kI64, {int64_t{2}, int64_t{1}})
                               .node("GatherND", {"x", "i"}, {"y"}, {{"batch_dims", int64_t{1}}})
                               .output("y"));
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(batch.status().message().find("batch_dims"), std::string::npos)
      << batch.status().message();
}

TEST(LowerLayout, RefusesAConcatWhosePiecesStartAtSizeDependentOffsets) {
  expect_padding_refusal(OnnxBuilder("c")
                             .input("a", {S, int64_t{4}})
                             .input("b", {S, int64_t{4}})
                             .node("Concat", {"a", "b"}, {"y"}, {{"axis", int64_t{0}}})
                             .output("y"),
                         "Concat_0");
}

TEST(LowerLayout, AcceptsPaddingSafeForms) {
  // A constant leading piece before the size axis, the first rows, a non-negative index.
  EXPECT_TRUE(lower_model(OnnxBuilder("c")
                              .random_initializer("a", {2, 4})
                              .input("b", {S, int64_t{4}})
                              .node("Concat", {"a", "b"}, {"y"}, {{"axis", int64_t{0}}})
                              .output("y"))
                  .ok());
  EXPECT_TRUE(lower_model(slice_model({0}, {1}, {0}, {1})).ok());
  EXPECT_TRUE(lower_model(OnnxBuilder("g")
                              .input("x", {int64_t{2}, S, int64_t{4}})
                              .int64_initializer("i", {}, {0})
                              .node("Gather", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
                              .output("y"))
                  .ok());
}

TEST(LowerLayout, AnOpWithoutALoweringStillNamesTheNode) {
  auto m = lower_model(OnnxBuilder("tile")
                           .input("x", {S, int64_t{4}})
                           .int64_initializer("r", {2}, {1, 2})
                           .node("Tile", {"x", "r"}, {"y"})
                           .output("y"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("Tile_0"), std::string::npos) << m.status().message();
}

// --- kernel paths -----------------------------------------------------------------------------

TEST(LayoutCodegen, PicksVectorTiledAndScalarPaths) {
  // [B, S, H, D] → [B, H, S, D] keeps D innermost: 16-byte rows of f16.
  ir::Shape x = {DimExpr::constant(2), DimExpr::size(), DimExpr::constant(4),
                 DimExpr::constant(64)};
  std::vector<Mono> st = mono_strides(x);
  StridedCopy c{"kiln::f16",
                {Mono::of(x[0]), Mono::of(x[2]), Mono::of(x[1]), Mono::of(x[3])},
                {st[0], st[2], st[1], st[3]},
                {},
                {}};
  const DimExpr numel = DimExpr::size(512);
  LayoutKernel k = codegen_strided_copy(c, numel);
  EXPECT_EQ(k.path, "vector8") << k.def.body;
  EXPECT_EQ(k.work, DimExpr::size(64));
  // Swapping the last two axes moves the innermost one: a shared-memory tile.
  const ir::Shape y = {DimExpr::size(), DimExpr::constant(48), DimExpr::constant(40)};
  st = mono_strides(y);
  c = {"float", {Mono::of(y[0]), Mono::of(y[2]), Mono::of(y[1])}, {st[0], st[2], st[1]}, {}, {}};
  EXPECT_EQ(codegen_strided_copy(c, DimExpr::size(48 * 40)).path, "tiled");
  // ... but not when one side of the tile would be mostly empty.
  c.out_dims = {Mono::of(x[1]), Mono::of(x[3]), Mono::of(x[2])};
  st = mono_strides({x[1], x[2], x[3]});
  c.in_strides = {st[0], st[2], st[1]};
  EXPECT_EQ(codegen_strided_copy(c, DimExpr::size(256)).path, "scalar");
  // An odd row length cannot be vectorised.
  c = {"float", {Mono::of(DimExpr::size()), Mono::of(DimExpr::constant(3))}, {}, {}, {}};
  c.in_strides = mono_strides({DimExpr::size(), DimExpr::constant(3)});
  EXPECT_EQ(codegen_strided_copy(c, DimExpr::size(3)).path, "scalar");
  // A contiguous copy collapses to one row.
  c.in_strides = {Mono::of(DimExpr::constant(3)), Mono{}};
  EXPECT_EQ(codegen_strided_copy(c, DimExpr::size(3)).path, "scalar");
  c.out_dims = {Mono::of(DimExpr::size()), Mono::of(DimExpr::constant(8))};
  c.in_strides = {Mono::of(DimExpr::constant(8)), Mono{}};
  EXPECT_EQ(codegen_strided_copy(c, DimExpr::size(8)).path, "vector4");
}

TEST(LayoutCodegen, RotaryTakesVectorsOfPairsWhereTheOffsetsAllow) {
  // Llama's layout: f16 rows of 64 in a fused QKV product (a view), half-width f32 tables.
  RotaryKernel r{"kiln::f16",
                 "float",
                 {{DimExpr::size(), DimExpr::constant(32)},
                  {DimExpr::constant(3072), DimExpr::constant(64)},
                  DimExpr::constant(0)},
                 {DimExpr::size()},
                 64,
                 64,
                 32,
                 false,
                 std::nullopt};
  LayoutKernel k = codegen_rotary(r, DimExpr::size(32 * 64));
  EXPECT_EQ(k.path, "pairs8");
  // 32 pairs a row, 8 a unit: 4 units a row of 64, 8 items of the grid-stride loop fewer.
  EXPECT_EQ(k.work, DimExpr::size(32 * 4));
  EXPECT_NE(k.def.body.find("layout_rotary_pairs<kiln::f16, float, 8, 8, 4, 0>"), std::string::npos)
      << k.def.body;
  // K beside Q at an odd element offset: the same units, read and written one element at a time.
  r.x.x_offset = DimExpr::constant(3);
  k = codegen_rotary(r, DimExpr::size(32 * 64));
  EXPECT_NE(k.def.body.find("layout_rotary_pairs<kiln::f16, float, 8, 1, 4, 0>"), std::string::npos)
      << k.def.body;
  // Partial rotary (GPT-NeoX: 16 of 64 dims), interleaved, contiguous: 8 pairs then 48 copied.
  r = {"float",
       "float",
       {{DimExpr::size(), DimExpr::constant(4)}, {}, {}},
       {DimExpr::size()},
       64,
       16,
       8,
       true,
       std::nullopt};
  k = codegen_rotary(r, DimExpr::size(4 * 64));
  EXPECT_EQ(k.path, "pairs4");
  EXPECT_EQ(k.work, DimExpr::size(4 * (2 + 12)));
  EXPECT_NE(k.def.body.find("layout_rotary_pairs<float, float, 4, 4, 4, 1>"), std::string::npos)
      << k.def.body;
  EXPECT_NE(k.def.body.find("layout_copy_run<float, 4, 4>"), std::string::npos) << k.def.body;
  // An odd head (7, rotary 4): rows of 7 allow no vector, the 3 copied elements go one by one.
  r.d = 7;
  r.rotary_dim = 4;
  r.table_width = 2;
  k = codegen_rotary(r, DimExpr::size(4 * 7));
  EXPECT_EQ(k.work, DimExpr::size(4 * (1 + 3)));
  EXPECT_NE(k.def.body.find("layout_rotary_pairs<float, float, 2, 1, 2, 1>"), std::string::npos)
      << k.def.body;
  EXPECT_NE(k.def.body.find("layout_copy_run<float, 1, 1>"), std::string::npos) << k.def.body;
}
TEST(LayoutCodegen, SymbolicProductsCompareStructurally) {
  const Mono a = Mono::of(DimExpr::size()).times(Mono::of(DimExpr::constant(64)));
  const Mono b = Mono::of(DimExpr::constant(64)).times(Mono::of(DimExpr::size()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.divisor(), 64);
  EXPECT_EQ(Mono::of(DimExpr{2, 4}).divisor(), 2);
  EXPECT_EQ(a.eval(3), 192);
  EXPECT_EQ(a.code(), "(64LL * (1LL*S))");
}

// --- NVRTC
// ----------------------------------------------------------------------------------------

TEST(LowerLayout, EveryKernelCompilesForSm80AndSm90InEveryDtype) {
  std::vector<KernelDef> kernels;
  std::set<std::string> seen;
  auto collect = [&](const LoweredProgram& p) {
    for (const KernelDef& k : p.kernels)
      if (seen.insert(k.symbol).second) kernels.push_back(k);
  };
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    for (auto& [name, model] : float_models()) {
      SCOPED_TRACE(name + " " + std::string(precision_name(p)));
      auto m = lower_model(model, p);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      collect(m->program);
    }
  }
  for (const OnnxBuilder& b : {range_model(), int64_layout_model()}) {
    auto m = lower_model(b);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    collect(m->program);
  }
  // Float Range (constant-folded in models, so generated directly) and f32 tables with f16 X.
  for (const char* elem : {"float", "kiln::f16", "kiln::bf16"}) {
    RangeFill r{elem, true, {}, 1, 0.5, 0.25};
    KernelDef d = codegen_range(r, DimExpr::size()).def;
    d.symbol = std::string("range_") + (elem[0] == 'f' ? "f32" : elem + 6);
    kernels.push_back(d);
  }
  RotaryKernel rk{"kiln::f16",
                  "float",
                  {{DimExpr::constant(2), DimExpr::size()}, {}, {}},
                  {DimExpr::size()},
                  16,
                  8,
                  4,
                  true,
                  std::nullopt};
  KernelDef d = codegen_rotary(rk, DimExpr::size(32)).def;
  d.symbol = "rotary_mixed";
  kernels.push_back(d);
  // X as a strided view of a wider buffer (a slice of a fused QKV product, heads transposed),
  // and with a second output over the same buffer (K beside Q).
  rk.x.x_lead_strides = {DimExpr::size(48), DimExpr::constant(48)};
  rk.x.x_offset = DimExpr::constant(16);
  rk.second = RotaryKernel::Part{{DimExpr::constant(1), DimExpr::size()},
                                 {DimExpr::size(48), DimExpr::constant(48)},
                                 DimExpr::constant(32)};
  d = codegen_rotary(rk, DimExpr::size(48)).def;
  d.symbol = "rotary_view";
  kernels.push_back(d);

  const NvrtcModule module{"layout_test", codegen_module_source(kernels, {1, 17}),
                           kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(module, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    EXPECT_FALSE(cubin->empty());
  }
}

TEST(LowerLayout, GeneratedSourceIsDeterministic) {
  auto a = lower_model(rotary_model(8, 1), Precision::kF16);
  auto b = lower_model(rotary_model(8, 1), Precision::kF16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(codegen_module_source(a->program.kernels, {4}),
            codegen_module_source(b->program.kernels, {4}));
}

// --- launch-configuration candidates -------------------------------------------------------

// compiler/backend/launch_plan.h's rules for one launch's candidates, against its default kernel.
void expect_valid_candidates(const LoweredProgram& p, const KernelLaunch& l) {
  const KernelDef& def = p.kernels[static_cast<size_t>(l.kernel)];
  if (starts_with(def.symbol, "kiln_ew_")) return;  // the boundary Casts of fp16/bf16 models
  SCOPED_TRACE(def.symbol + " (" + l.config + ")");
  // The default is what it was before tuning.
  EXPECT_EQ(l.block, 256u);
  EXPECT_EQ(def.max_threads, 256u);
  if (starts_with(def.symbol, "kiln_range_") || starts_with(def.symbol, "kiln_fill_")) {
    EXPECT_TRUE(l.candidates.empty());
    EXPECT_TRUE(l.config.empty());
    return;
  }
  ASSERT_FALSE(l.candidates.empty());
  EXPECT_LE(l.candidates.size(), 6u);
  if (l.config == "threads=32x8 tiles=1") {
    EXPECT_EQ(l.work_per_block, 1024u);
  } else {
    EXPECT_EQ(l.config, "block=256 items=1");
    EXPECT_EQ(l.work_per_block, 256u);
  }
  std::set<std::string> seen;
  for (const LaunchCandidate& c : l.candidates) {
    SCOPED_TRACE(c.config);
    EXPECT_TRUE(seen.insert(c.config).second) << "duplicate label";
    EXPECT_NE(c.config, l.config);
    EXPECT_EQ(c.def.params, def.params);
    EXPECT_LE(c.block, c.def.max_threads);
    EXPECT_EQ(c.work, l.work);
    EXPECT_EQ(c.grid_y, l.grid_y);
    EXPECT_EQ(c.shared_bytes, 0u);
  }
}

using testing::kernel_steps;

TEST(LowerLayout, EveryLaunchHasCandidatesWithTheDefaultsArguments) {
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
    for (auto& [name, model] : float_models()) {
      SCOPED_TRACE(name + " " + std::string(precision_name(p)));
      auto m = lower_model(model, p);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      for (const KernelLaunch* k : kernel_steps(m->program))
        expect_valid_candidates(m->program, *k);
    }
  for (const OnnxBuilder& b : {range_model(), int64_layout_model()}) {
    auto m = lower_model(b);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    for (const KernelLaunch* k : kernel_steps(m->program)) expect_valid_candidates(m->program, *k);
  }
}

std::vector<std::string> labels(const std::vector<LaunchCandidate>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.config);
  return out;
}

TEST(LayoutCodegen, TiledTransposeCandidatesChangeTheRowsPerThread) {
  const ir::Shape y = {DimExpr::size(), DimExpr::constant(48), DimExpr::constant(40)};
  const std::vector<Mono> st = mono_strides(y);
  const StridedCopy c{
      "float", {Mono::of(y[0]), Mono::of(y[2]), Mono::of(y[1])}, {st[0], st[2], st[1]}, {}, {}};
  const DimExpr numel = DimExpr::size(48 * 40);
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, numel, cfg);
  };
  const LayoutKernel def = gen({});
  ASSERT_EQ(def.path, "tiled");
  EXPECT_EQ(def.config, "threads=32x8 tiles=1");
  EXPECT_NE(def.def.body.find("kiln::layout_transpose_tile<float>("), std::string::npos);
  const auto cs = layout_candidates(gen);
  EXPECT_EQ(labels(cs), (std::vector<std::string>{"threads=32x4 tiles=1", "threads=32x16 tiles=1",
                                                  "threads=32x32 tiles=1"}));
  ASSERT_EQ(cs.size(), 3u);
  for (const LaunchCandidate& k : cs) {
    EXPECT_EQ(k.def.max_threads, k.block);
    EXPECT_EQ(k.work_per_block, 1024u);
    EXPECT_EQ(k.work, numel);
  }
  EXPECT_EQ(cs[0].block, 128u);
  EXPECT_NE(cs[0].def.body.find("kiln::layout_transpose_tile<float, 4>("), std::string::npos)
      << cs[0].def.body;
  EXPECT_NE(cs[2].def.body.find("kiln::layout_transpose_tile<float, 32>("), std::string::npos)
      << cs[2].def.body;
}

TEST(LayoutCodegen, GridStrideCandidatesChangeTheBlockAndItems) {
  const StridedCopy c{"float", {Mono::of(DimExpr::size(64))}, {Mono{}}, {}, {}};
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, DimExpr::size(64), cfg);
  };
  EXPECT_EQ(gen({}).config, "block=256 items=1");
  const auto cs = layout_candidates(gen);
  EXPECT_EQ(labels(cs), (std::vector<std::string>{"block=128 items=1", "block=512 items=1",
                                                  "block=1024 items=1", "block=256 items=4"}));
  ASSERT_EQ(cs.size(), 4u);
  EXPECT_EQ(cs[0].work_per_block, 128u);
  EXPECT_EQ(cs[2].work_per_block, 1024u);
  EXPECT_EQ(cs[3].work_per_block, 1024u);
  EXPECT_EQ(cs[3].def.body, gen({}).def.body);  // same loop, a quarter of the blocks
  EXPECT_EQ(cs[0].def.max_threads, 128u);
  // A constant work of 16 vectors fits one block in every configuration: nothing to time.
  const StridedCopy small{"float", {Mono::of(DimExpr::constant(64))}, {Mono{}}, {}, {}};
  EXPECT_TRUE(layout_candidates([&](const LayoutConfig& cfg) {
                return codegen_strided_copy(small, DimExpr::constant(64), cfg);
              }).empty());
  const StridedCopy mid{"float", {Mono::of(DimExpr::constant(1600))}, {Mono{}}, {}, {}};
  EXPECT_EQ(
      labels(layout_candidates([&](const LayoutConfig& cfg) {
        return codegen_strided_copy(mid, DimExpr::constant(1600), cfg);
      })),  // 400 vectors
      (std::vector<std::string>{"block=128 items=1", "block=512 items=1", "block=256 items=4"}));
}

// Every candidate of every model through candidate_kernels and its sized entry points, one
// precision per test (f32 also takes the int64 models).
class LowerLayoutCandidates : public ::testing::TestWithParam<Precision> {};

TEST_P(LowerLayoutCandidates, CompileForSm80AndSm90) {
  std::vector<SizedKernel> sized;
  std::set<std::string> seen;
  auto collect = [&](const LoweredProgram& p) {
    for (SizedKernel& k : candidate_kernels(p, {17}))  // not the fp16/bf16 boundary Casts
      if (!starts_with(k.def.symbol, "kiln_ew_") && seen.insert(k.def.symbol).second)
        sized.push_back(std::move(k));
  };
  for (auto& [name, model] : float_models()) {
    SCOPED_TRACE(name);
    auto m = lower_model(model, GetParam());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    collect(m->program);
  }
  if (GetParam() == Precision::kF32)
    for (const OnnxBuilder& b : {range_model(), int64_layout_model()}) {
      auto m = lower_model(b);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      collect(m->program);
    }
  EXPECT_GE(sized.size(), 40u);
  const NvrtcModule module{"layout_candidates", codegen_module_source({}, {}, sized),
                           kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(module, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    EXPECT_FALSE(cubin->empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LowerLayoutCandidates,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(precision_name(info.param));
                         });

}  // namespace
}  // namespace kiln::compiler
