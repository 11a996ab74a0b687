// GEMM lowering decisions (compiler/backend/lower/lower_gemm.cc): which nodes fold into the
// cuBLASLt epilogue (bias, residual C, ReLU, tanh GELU, also through views that keep D's rows),
// which do not (erf GELU, an Add after the activation), batched MatMul shapes and strides, Gemm's
// C, the dtype of 16-bit precisions, and N padded to 16-byte rows where cuBLASLt would otherwise
// get unaligned ones.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "compiler/backend/lowering.h"
#include "compiler/passes/precision.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using kiln::testing::import_text_ok;

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 20]> )";

// "float[dims] name = {...}" with every value written out (the text syntax needs them): element
// i holds value_of(i).
std::string initializer(const std::string& name, std::vector<int> dims,
                        const std::function<float(int)>& value_of) {
  int n = 1;
  std::string shape;
  for (int d : dims) {
    n *= d;
    shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  }
  std::string values;
  for (int i = 0; i < n; ++i) values += (i ? ", " : "") + std::to_string(value_of(i));
  return "float[" + shape + "] " + name + " = {" + values + "}";
}

// Every element v.
std::string init(const std::string& name, std::vector<int> dims, float v = 0.25f) {
  return initializer(name, std::move(dims), [v](int) { return v; });
}

struct Lowered {
  ir::Graph g;
  LoweredProgram p;
};

Lowered lower_text(const std::string& text, Precision precision = Precision::kF32,
                   std::vector<int64_t> planned = {}) {
  Lowered out;
  out.g = import_text_ok(kHead + text, ImportOptions{"N", {}});
  if (precision == Precision::kF16 || precision == Precision::kBF16) {
    Status st = precision_lower(out.g, precision);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  LowerOptions opts;
  opts.precision = precision;
  opts.planned_sizes = std::move(planned);
  auto p = lower_graph(out.g, opts);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) out.p = std::move(*p);
  return out;
}

std::vector<GemmLaunch> gemms(const LoweredProgram& p) {
  std::vector<GemmLaunch> out;
  for (const auto& s : p.steps)
    if (const auto* g = std::get_if<GemmLaunch>(&s)) out.push_back(*g);
  return out;
}

int kernel_steps(const LoweredProgram& p) {
  int n = 0;
  for (const auto& s : p.steps) n += std::holds_alternative<KernelLaunch>(s);
  return n;
}

std::string name(const Lowered& l, int v) { return v < 0 ? "" : l.g.values[v].name; }

// One GPT-2 MLP/projection block without attention: QKV-like Gemm + bias; projection + bias +
// residual; up + bias + tanh GELU; down + bias + residual.
const std::string kBlock =
    "g (float[N, 16] x) => (float[N, 16] y) <" + init("wq", {16, 48}) + ", " + init("bq", {48}) +
    ", " + init("wo", {48, 16}) + ", " + init("bo", {16}) + ", " + init("wu", {16, 64}) + ", " +
    init("bu", {64}) + ", " + init("wd", {64, 16}) + ", " + init("bd", {16}) + R"(>
{
  qkv = Gemm (x, wq, bq)
  o0 = MatMul (qkv, wo)
  o1 = Add (o0, bo)
  r1 = Add (x, o1)
  u0 = MatMul (r1, wu)
  u1 = Add (bu, u0)
  u2 = Gelu <approximate = "tanh"> (u1)
  d0 = MatMul (u2, wd)
  d1 = Add (d0, bd)
  y = Add (d1, r1)
})";

void expect_block(const Lowered& l, DType dt) {
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 4u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBias);
  EXPECT_EQ(gs[0].c, -1);
  EXPECT_EQ(gs[1].epilogue, Epilogue::kBias);
  EXPECT_EQ(name(l, gs[1].d), "r1");
  EXPECT_EQ(gs[1].beta, 1.0f);
  EXPECT_GE(gs[1].c, 0);
  EXPECT_EQ(gs[2].epilogue, Epilogue::kBiasGelu);
  EXPECT_EQ(name(l, gs[2].bias), "bu");
  EXPECT_EQ(gs[2].c, -1);
  EXPECT_EQ(gs[3].epilogue, Epilogue::kBias);
  EXPECT_EQ(name(l, gs[3].c), "r1");
  EXPECT_EQ(gs[3].beta, 1.0f);
  for (const auto& g : gs) {
    EXPECT_EQ(l.g.values[g.a].dtype, dt);
    EXPECT_EQ(l.g.values[g.d].dtype, dt);
    EXPECT_EQ(l.g.values[g.bias].dtype, dt);
    EXPECT_EQ(g.m, DimExpr::size());
  }
}

TEST(LowerGemm, Gpt2BlockBecomesFourGemmsWithEpilogues) {
  Lowered l = lower_text(kBlock);
  expect_block(l, DType::kF32);
  EXPECT_EQ(name(l, gemms(l.p)[1].c), "x");
  EXPECT_EQ(kernel_steps(l.p), 0);
  EXPECT_EQ(l.p.kernels.size(), 0u);
}

TEST(LowerGemm, Gpt2BlockInHalfPrecisionKeepsTheEpilogues) {
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(p)));
    Lowered l = lower_text(kBlock, p);
    expect_block(l, p == Precision::kF16 ? DType::kF16 : DType::kBF16);
    // Only the casts at the graph's edges (f32 input and output) remain as kernels.
    EXPECT_LE(kernel_steps(l.p), 2);
  }
}

TEST(LowerGemm, HalfDataKeepsItsDtypeAndFolds) {
  for (std::string t : {"float16", "bfloat16"}) {
    SCOPED_TRACE(t);
    Lowered l = lower_text("g (" + t + "[N, 16] x, " + t + "[16, 4] w, " + t + "[4] b, " + t +
                           "[N, 4] r) => (" + t + R"([N, 4] y) {
  h = MatMul (x, w)
  hb = Add (h, b)
  y = Add (hb, r)
})");
    auto gs = gemms(l.p);
    ASSERT_EQ(gs.size(), 1u);
    EXPECT_EQ(gs[0].epilogue, Epilogue::kBias);
    EXPECT_EQ(name(l, gs[0].c), "r");
    EXPECT_EQ(l.g.values[gs[0].a].dtype, t == "float16" ? DType::kF16 : DType::kBF16);
    EXPECT_EQ(kernel_steps(l.p), 0);
  }
}

TEST(LowerGemm, SameDtypeCastsAreLookedThrough) {
  Lowered l = lower_text(R"(
g (float16[N, 16] x, float16[16, 4] w, float16[4] b) => (float16[N, 4] y) {
  h = MatMul (x, w)
  hc = Cast <to = 10> (h)
  hb = Add (hc, b)
  hg = Gelu <approximate = "tanh"> (hb)
  y = Cast <to = 10> (hg)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBiasGelu);
  EXPECT_EQ(name(l, gs[0].d), "y");
  EXPECT_EQ(kernel_steps(l.p), 0);
}

TEST(LowerGemm, RowViewsBetweenGemmAndEpilogueAreLookedThrough) {
  // What exporters write for a 2-D Gemm inside [B, S, K] activations: flatten, Gemm with bias,
  // reshape back, then the (tanh) GELU and a residual-free consumer.
  Lowered l = lower_text(R"(
g (float[1, N, 8] x) => (float[1, N, 4] y) <)" +
                         init("w", {8, 4}) + ", " + init("b", {4}) +
                         R"(, int64[2] s2 = {-1, 8}, int64[3] s3 = {1, -1, 4}> {
  x2 = Reshape (x, s2)
  h = Gemm (x2, w, b)
  h3 = Reshape (h, s3)
  y = Gelu <approximate = "tanh"> (h3)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBiasGelu);
  EXPECT_EQ(name(l, gs[0].d), "y");
  EXPECT_NE(gs[0].nodes.find("Reshape"), std::string::npos) << gs[0].nodes;
  EXPECT_EQ(kernel_steps(l.p), 0);
}

TEST(LowerGemm, ViewThatSplitsRowsIsNotLookedThrough) {
  // [N, 4] → [N, 2, 2]: rows of D are no longer the view's last axis; the bias [2] cannot fold.
  Lowered l = lower_text(R"(
g (float[N, 8] x) => (float[N, 2, 2] y) <)" +
                         init("w", {8, 4}) + ", " + init("b", {2}) +
                         R"(, int64[3] s3 = {-1, 2, 2}> {
  h = MatMul (x, w)
  h3 = Reshape (h, s3)
  y = Add (h3, b)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kNone);
  EXPECT_EQ(name(l, gs[0].d), "h");
  EXPECT_EQ(kernel_steps(l.p), 1);
}

TEST(LowerGemm, ErfGeluIsNotFolded) {
  Lowered l = lower_text(R"(
g (float[N, 8] x) => (float[N, 4] y) <)" +
                         init("w", {8, 4}) + ", " + init("b", {4}) + R"(> {
  h = MatMul (x, w)
  hb = Add (h, b)
  y = Gelu (hb)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBias);
  EXPECT_EQ(name(l, gs[0].d), "hb");
  EXPECT_EQ(kernel_steps(l.p), 1);
}

TEST(LowerGemm, ResidualAfterTheActivationIsNotFolded) {
  Lowered l = lower_text(R"(
g (float[N, 8] x, float[N, 4] r) => (float[N, 4] y) <)" +
                         init("w", {8, 4}) + ", " + init("b", {4}) + R"(> {
  h = MatMul (x, w)
  hb = Add (h, b)
  hg = Gelu <approximate = "tanh"> (hb)
  y = Add (hg, r)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBiasGelu);
  EXPECT_EQ(gs[0].c, -1);
  EXPECT_EQ(name(l, gs[0].d), "hg");
  EXPECT_EQ(kernel_steps(l.p), 1);
}

TEST(LowerGemm, ResidualThenReluFolds) {
  // relu(AB + r + b) is exactly cuBLASLt's act(AB + C + bias).
  Lowered l = lower_text(R"(
g (float[N, 8] x, float[N, 4] r) => (float[N, 4] y) <)" +
                         init("w", {8, 4}) + ", " + init("b", {4}) + R"(> {
  h = MatMul (x, w)
  hr = Add (r, h)
  hb = Add (hr, b)
  y = Relu (hb)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kBiasRelu);
  EXPECT_EQ(name(l, gs[0].c), "r");
  EXPECT_EQ(name(l, gs[0].bias), "b");
  EXPECT_EQ(name(l, gs[0].d), "y");
  EXPECT_EQ(kernel_steps(l.p), 0);
}

TEST(LowerGemm, BroadcastAddIsNotAResidual) {
  // [N, 1] broadcast over the columns: neither a bias nor D-shaped.
  Lowered l = lower_text(R"(
g (float[N, 8] x, float[N, 1] r) => (float[N, 4] y) <)" +
                         init("w", {8, 4}) + R"(> {
  h = MatMul (x, w)
  y = Add (h, r)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kNone);
  EXPECT_EQ(gs[0].c, -1);
  EXPECT_EQ(kernel_steps(l.p), 1);
}

TEST(LowerGemm, GemmFullShapedCUsesBeta) {
  Lowered l = lower_text(R"(
g (float[N, 8] x, float[N, 4] c) => (float[N, 4] y) <)" +
                         init("w", {4, 8}) + R"(> {
  y = Gemm <transB = 1, alpha = 2.0, beta = 0.5> (x, w, c)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_TRUE(gs[0].trans_b);
  EXPECT_EQ(gs[0].alpha, 2.0f);
  EXPECT_EQ(name(l, gs[0].c), "c");
  EXPECT_EQ(gs[0].beta, 0.5f);
  EXPECT_EQ(gs[0].epilogue, Epilogue::kNone);
  EXPECT_EQ(kernel_steps(l.p), 0);
}

TEST(LowerGemm, GemmBroadcastCTakesTheGeneralPath) {
  Lowered l = lower_text(R"(
g (float[N, 8] x, float[N, 1] c) => (float[N, 4] y) <)" +
                         init("w", {8, 4}) + R"(> {
  y = Gemm <beta = 0.5> (x, w, c)
})");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].c, -1);
  EXPECT_EQ(kernel_steps(l.p), 1);
}

TEST(LowerGemm, BatchedMatMulShapesAndStrides) {
  Lowered same = lower_text(R"(
g (float[N, 4, 8] a, float[N, 8, 5] b) => (float[N, 4, 5] y) { y = MatMul (a, b) })");
  auto gs = gemms(same.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].batch, DimExpr::size());
  EXPECT_EQ(gs[0].m, DimExpr::constant(4));
  EXPECT_EQ(gs[0].k, DimExpr::constant(8));
  EXPECT_EQ(gs[0].n, DimExpr::constant(5));
  EXPECT_EQ(gs[0].stride_a, DimExpr::constant(32));
  EXPECT_EQ(gs[0].stride_b, DimExpr::constant(40));
  EXPECT_EQ(gs[0].stride_d, DimExpr::constant(20));

  Lowered a_bcast = lower_text(R"(
g (float[4, 8] a, float[2, N, 8, 5] b) => (float[2, N, 4, 5] y) { y = MatMul (a, b) })");
  gs = gemms(a_bcast.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].batch, DimExpr::size(2));
  EXPECT_EQ(gs[0].stride_a, DimExpr::constant(0));
  EXPECT_EQ(gs[0].stride_b, DimExpr::constant(40));

  // B without batch (or with all-1 batch dims) folds A's batch into M: one plain GEMM.
  Lowered b_bcast = lower_text(R"(
g (float[N, 4, 8] a, float[1, 8, 5] b) => (float[N, 4, 5] y) { y = MatMul (a, b) })");
  gs = gemms(b_bcast.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].batch, DimExpr::constant(1));
  EXPECT_EQ(gs[0].m, DimExpr::size(4));
}

TEST(LowerGemm, OneDimensionalOperands) {
  Lowered l = lower_text(R"(
g (float[N, 8] a) => (float[N] y) <)" +
                         init("v", {8}) + R"(> { y = MatMul (a, v) })");
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  EXPECT_EQ(gs[0].m, DimExpr::size());
  EXPECT_EQ(gs[0].n, DimExpr::constant(1));
}

TEST(LowerGemm, RefusesTheSizeInABatchedReduction) {
  ir::Graph g = import_text_ok(kHead + R"(
g (float[2, 3, N] a, float[2, N, 4] b) => (float[2, 3, 4] y) { y = MatMul (a, b) })",
                               ImportOptions{"N", {}});
  auto p = lower_graph(g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("reduction"), std::string::npos) << p.status().message();
}

TEST(LowerGemm, RefusesMismatchedBatchDims) {
  ir::Graph g = import_text_ok(kHead + R"(
g (float[2, 3, N, 8] a, float[1, 3, 8, 5] b) => (float[2, 3, N, 5] y) { y = MatMul (a, b) })",
                               ImportOptions{"N", {}});
  auto p = lower_graph(g);  // B broadcast over part of the batch: not one strided batch
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("batch dims"), std::string::npos) << p.status().message();
}

// --- padded rows ----------------------------------------------------------------------------

// "float[dims] name = {...}" holding (i % 97) + 1 at element i: exact in every dtype, never 0.
std::string numbered(const std::string& name, std::vector<int> dims) {
  return initializer(name, std::move(dims), [](int i) { return static_cast<float>(i % 97 + 1); });
}

// x [N, 3] times w [3, cols] plus b [cols].
std::string wide_head(int cols, const std::string& extra_input = "",
                      const std::string& extra_body = "") {
  const std::string c = std::to_string(cols);
  return "g (float[N, 3] x" + extra_input + ") => (float[N, " + c + "] y) <" +
         numbered("w", {3, cols}) + ", " + numbered("b", {cols}) + ">\n{\n  h = MatMul (x, w)\n" +
         (extra_body.empty() ? "  y = Add (h, b)\n" : extra_body) + "}\n";
}

float f32_at(const ir::Constant& c, size_t i) {
  float f;
  std::memcpy(&f, c.bytes.data() + 4 * i, 4);
  return f;
}

const KernelLaunch* kernel_after(const LoweredProgram& p, const GemmLaunch& g) {
  for (size_t i = 0; i + 1 < p.steps.size(); ++i)
    if (const auto* s = std::get_if<GemmLaunch>(&p.steps[i]); s != nullptr && s->d == g.d)
      return std::get_if<KernelLaunch>(&p.steps[i + 1]);
  return nullptr;
}

// N = 1001 fp32 values (4004 bytes a row): the weight and bias grow with zeros to 1004 columns,
// cuBLASLt writes a [M, 1004] buffer, and a copy run after cuBLASLt only moves each row's first
// 1001 into y. With no small planned size there is no skinny kernel, so the weight stays [K, N].
TEST(LowerGemm, UnalignedWideRowsArePaddedAndCopiedOut) {
  Lowered l = lower_text(wide_head(1001));
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  const GemmLaunch& g = gs[0];
  EXPECT_EQ(g.n, DimExpr::constant(1004));
  EXPECT_FALSE(g.trans_b);
  EXPECT_EQ(g.epilogue, Epilogue::kBias);
  const ir::Value& w = l.g.values[g.b];
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_EQ(w.constant->dims, (std::vector<int64_t>{3, 1004}));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 1004; ++c)
      ASSERT_EQ(f32_at(*w.constant, r * 1004 + c), c < 1001 ? float((r * 1001 + c) % 97 + 1) : 0.0f)
          << r << "," << c;
  const ir::Value& b = l.g.values[g.bias];
  ASSERT_TRUE(b.constant.has_value());
  EXPECT_EQ(b.constant->dims, (std::vector<int64_t>{1004}));
  EXPECT_EQ(f32_at(*b.constant, 1000), float(1000 % 97 + 1));
  EXPECT_EQ(f32_at(*b.constant, 1003), 0.0f);
  EXPECT_EQ(l.g.values[g.d].shape, (ir::Shape{DimExpr::size(), DimExpr::constant(1004)}));
  const KernelLaunch* unpad = kernel_after(l.p, g);
  ASSERT_NE(unpad, nullptr);
  EXPECT_TRUE(unpad->after_cublaslt);
  ASSERT_EQ(unpad->args.size(), 3u);
  EXPECT_EQ(unpad->args[0].value, g.d);
  EXPECT_EQ(name(l, unpad->args[1].value), "y");
  EXPECT_EQ(unpad->work, DimExpr::size(1001));
  EXPECT_FALSE(unpad->candidates.empty());
  const std::string& body = l.p.kernels[static_cast<size_t>(unpad->kernel)].body;
  EXPECT_NE(body.find("1004LL"), std::string::npos) << body;
}

// fp16 rows align at 8 elements: 1001 pads to 1008. At the small planned size a skinny kernel
// reads the first 1001 rows of the same padded [Np, K] weight and writes D itself (here the
// Sigmoid after the GEMM reads D, so there is no Cast to fold).
TEST(LowerGemm, PaddedHalfWeightIsSharedWithTheSkinnyKernel) {
  Lowered l = lower_text(wide_head(1001, "", "  a = Add (h, b)\n  y = Sigmoid (a)\n"),
                         Precision::kF16, {1, 64});
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  const GemmLaunch& g = gs[0];
  EXPECT_EQ(g.n, DimExpr::constant(1008));
  EXPECT_TRUE(g.trans_b);
  EXPECT_EQ(g.skinny_sizes, (std::vector<int64_t>{1}));
  EXPECT_EQ(l.g.values[g.b].constant->dims, (std::vector<int64_t>{1008, 3}));
  EXPECT_EQ(l.g.values[g.bias].constant->dims, (std::vector<int64_t>{1008}));
  const KernelLaunch* skinny = nullptr;
  for (const auto& s : l.p.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&s); k != nullptr && k->run_sizes) skinny = k;
  ASSERT_NE(skinny, nullptr);
  EXPECT_EQ(skinny->args[1].value, g.b);
  const std::string& body = l.p.kernels[static_cast<size_t>(skinny->kernel)].body;
  EXPECT_NE(body.find(", 3, 1001,"), std::string::npos) << body;
  const KernelLaunch* unpad = kernel_after(l.p, g);
  ASSERT_NE(unpad, nullptr);
  EXPECT_TRUE(unpad->after_cublaslt);
  EXPECT_EQ(unpad->args[0].value, g.d);
  EXPECT_EQ(unpad->args[1].value, skinny->args[skinny->args.size() - 4].value);  // both write D
  EXPECT_EQ(name(l, unpad->args[1].value), "a");
}

// The f32 output of an fp16 graph is a Cast of D: the skinny kernel computes all 1008 rows into
// the padded buffer too, and one copy at every size unpads and converts into y. No Cast launch.
TEST(LowerGemm, PaddedRowsFoldTheCastAfterThem) {
  Lowered l = lower_text(wide_head(1001), Precision::kF16, {1, 64});
  auto gs = gemms(l.p);
  ASSERT_EQ(gs.size(), 1u);
  const GemmLaunch& g = gs[0];
  EXPECT_EQ(g.n, DimExpr::constant(1008));
  EXPECT_EQ(g.skinny_sizes, (std::vector<int64_t>{1}));
  const KernelLaunch* skinny = nullptr;
  for (const auto& s : l.p.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&s); k != nullptr && k->run_sizes) skinny = k;
  ASSERT_NE(skinny, nullptr);
  EXPECT_EQ(skinny->args[1].value, g.b);
  EXPECT_EQ(skinny->args[skinny->args.size() - 4].value, g.d);  // the padded buffer
  const std::string& body = l.p.kernels[static_cast<size_t>(skinny->kernel)].body;
  EXPECT_NE(body.find(", 3, 1008,"), std::string::npos) << body;
  const KernelLaunch* unpad = kernel_after(l.p, g);
  ASSERT_NE(unpad, nullptr);
  EXPECT_FALSE(unpad->after_cublaslt);
  EXPECT_FALSE(unpad->run_sizes.has_value());
  EXPECT_EQ(unpad->args[0].value, g.d);
  EXPECT_EQ(name(l, unpad->args[1].value), "y");
  EXPECT_EQ(l.g.values[unpad->args[1].value].dtype, DType::kF32);
  const std::string& copy = l.p.kernels[static_cast<size_t>(unpad->kernel)].body;
  EXPECT_NE(copy.find("kiln::from_f32<float>(kiln::to_f32(in["), std::string::npos) << copy;
  // x's cast to f16, the skinny kernel and the unpad: the output Cast has no launch of its own.
  EXPECT_EQ(kernel_steps(l.p), 3);
}

TEST(LowerGemm, AlignedNarrowOrUnpaddableRowsKeepTheirWidth) {
  struct Case {
    const char* what;
    std::string text;
    Precision precision;
    int64_t n;
  };
  const Case cases[] = {
      {"aligned fp16 rows", wide_head(1000), Precision::kF16, 1000},
      {"fewer than 512 columns", wide_head(509), Precision::kF32, 509},
      {"a residual C",
       wide_head(1001, ", float[N, 1001] r", "  a = Add (h, b)\n  y = Add (a, r)\n"),
       Precision::kF32, 1001},
      {"a weight another node reads",
       wide_head(1001, "", "  a = MatMul (x, w)\n  c = Add (h, a)\n  y = Add (c, b)\n"),
       Precision::kF32, 1001},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Lowered l = lower_text(c.text, c.precision);
    for (const GemmLaunch& g : gemms(l.p)) {
      EXPECT_EQ(g.n, DimExpr::constant(c.n));
      const KernelLaunch* next = kernel_after(l.p, g);
      EXPECT_TRUE(next == nullptr || !next->after_cublaslt);
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
