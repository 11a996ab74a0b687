// Row-reduction lowering (compiler/backend/lower/lower_reduce.cc): norms, the fused residual,
// softmax, last-axis reductions, refusals (the size in a reduced axis, unsupported axes and
// outputs), row geometry, launch candidates (the geometries chosen per row length, what every row
// launch carries, NVRTC compiles of every candidate), and NVRTC compiles for sm_80 and sm_90 in
// fp32, fp16 and bf16.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <variant>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/reduce_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/precision.h"
#include "tests/support/lower_harness.h"
#include "tests/support/onnx_builder.h"

namespace kiln::compiler {
namespace {

using testing::OnnxBuilder;
const std::string kS = "S";

using testing::kernel_steps;
using testing::lower_model;

std::vector<std::string> arg_names(const ir::Graph& g, const KernelLaunch& k) {
  std::vector<std::string> out;
  for (const auto& a : k.args)
    if (a.kind == KernelArgRef::Kind::kValue) out.push_back(g.values[a.value].name);
  return out;
}

OnnxBuilder residual_ln(int64_t width, bool sum_is_output) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, width})
      .input("r", {kS, width})
      .random_initializer("gamma", {width})
      .random_initializer("beta", {width})
      .node("Relu", {"x"}, {"h"})
      .node("Add", {"h", "r"}, {"sum"})
      .node("LayerNormalization", {"sum", "gamma", "beta"}, {"y"}, {{"epsilon", 1e-5f}})
      .output("y");
  if (sum_is_output) b.output("sum");
  return b;
}

TEST(LowerReduce, ResidualAddFusesIntoTheNorm) {
  for (bool sum_out : {false, true}) {
    SCOPED_TRACE(sum_out);
    ir::Graph g;
    auto p = lower_model(residual_ln(768, sum_out), g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto ks = kernel_steps(*p);
    ASSERT_EQ(ks.size(), 2u);  // Relu; Add + LayerNormalization
    const KernelDef& norm = p->kernels[static_cast<size_t>(ks[1]->kernel)];
    EXPECT_EQ(norm.symbol.rfind("kiln_layernorm_", 0), 0u) << norm.symbol;
    std::vector<std::string> want = {"h", "r"};
    if (sum_out) want.push_back("sum");
    want.insert(want.end(), {"gamma", "beta", "y"});
    EXPECT_EQ(arg_names(g, *ks[1]), want);
    EXPECT_NE(ks[1]->nodes.find("LayerNormalization"), std::string::npos) << ks[1]->nodes;
  }
}

TEST(LowerReduce, RmsNormAndWarpOrBlockRows) {
  for (int64_t width : {17, 1000, 4096}) {
    SCOPED_TRACE(width);
    OnnxBuilder b("m", 23);
    b.input("x", {kS, width})
        .random_initializer("g", {width})
        .node("RMSNormalization", {"x", "g"}, {"y"}, {{"epsilon", 1e-6f}})
        .output("y");
    ir::Graph g;
    auto p = lower_model(b, g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto ks = kernel_steps(*p);
    ASSERT_EQ(ks.size(), 1u);
    const KernelDef& k = p->kernels[static_cast<size_t>(ks[0]->kernel)];
    EXPECT_NE(k.body.find("kiln::norm_rows<float, " + std::to_string(width)), std::string::npos)
        << k.body;
    const RowGeometry geo = row_geometry(width, DType::kF32);
    EXPECT_EQ(ks[0]->block, geo.block);
    EXPECT_EQ(k.max_threads, geo.block);
    EXPECT_EQ(ks[0]->work, ir::DimExpr::size());
    if (width <= 1024) {
      EXPECT_EQ(geo.threads_per_row, 32);
      EXPECT_EQ(ks[0]->work_per_block, 8u);
      EXPECT_EQ(ks[0]->config, width == 17 ? "threads=32 rows=8 vec=1" : "threads=32 rows=8 vec=4");
    } else {
      EXPECT_EQ(geo.threads_per_row, 256);  // 1024 vectors of 4, about 4 per thread
      EXPECT_EQ(ks[0]->work_per_block, 1u);
      EXPECT_EQ(ks[0]->config, "threads=256 rows=1 vec=4");
    }
  }
  EXPECT_EQ(row_geometry(17, DType::kF32).vec, 1);
  EXPECT_EQ(row_geometry(1000, DType::kF16).vec, 8);
  EXPECT_EQ(row_geometry(6, DType::kF32).vec, 2);
}

TEST(LowerReduce, RefusesTheSizeInAReducedAxis) {
  OnnxBuilder b("m", 18);
  b.input("x", {int64_t{4}, kS}).node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{-1}}}).output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("Softmax"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("padding"), std::string::npos) << p.status().message();

  OnnxBuilder n("m", 18);
  n.input("x", {int64_t{4}, kS})
      .random_initializer("g", {1})
      .node("LayerNormalization", {"x", "g"}, {"y"})
      .output("y");
  auto q = lower_model(n, g);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
}

TEST(LowerReduce, RefusesSoftmaxOverAnotherAxisAndUsedStatistics) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, int64_t{4}, int64_t{8}})
      .node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{1}}})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("last axis"), std::string::npos) << p.status().message();

  OnnxBuilder n("m", 18);
  n.input("x", {kS, int64_t{8}})
      .random_initializer("g", {8})
      .node("LayerNormalization", {"x", "g"}, {"y", "mean"})
      .output("y")
      .output("mean");
  auto q = lower_model(n, g);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("Mean"), std::string::npos) << q.status().message();
}

TEST(LowerReduce, ReduceOverTrailingAxesFromAttributeOrInput) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, int64_t{3}, int64_t{5}})
      .int64_initializer("last2", {2}, {1, 2})
      .node("ReduceMean", {"x", "last2"}, {"m"}, {{"keepdims", int64_t{0}}})
      .node("ReduceMax", {"x", "last2"}, {"mx"})
      .output("m")
      .output("mx");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_NE(p->kernels[static_cast<size_t>(ks[0]->kernel)].body.find(
                "kiln::reduce_rows<float, float, 15"),
            std::string::npos);

  OnnxBuilder c("m", 18);
  c.input("x", {kS, int64_t{3}, int64_t{5}})
      .int64_initializer("mid", {1}, {1})
      .node("ReduceSum", {"x", "mid"}, {"y"})
      .output("y");
  auto q = lower_model(c, g);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("last axes"), std::string::npos) << q.status().message();
}

// Norms, softmax and reductions over several row lengths, in one module per precision.
OnnxBuilder all_rows_model() {
  OnnxBuilder b("rows", 18);
  for (int64_t w : {1, 3, 17, 768, 1000, 4096, 8192}) {
    const std::string s = std::to_string(w);
    b.input("x" + s, {kS, w})
        .input("r" + s, {kS, w})
        .random_initializer("g" + s, {w})
        .random_initializer("b" + s, {w})
        .int64_initializer("ax" + s, {1}, {-1})
        .node("Add", {"x" + s, "r" + s}, {"sum" + s})
        .node("LayerNormalization", {"sum" + s, "g" + s, "b" + s}, {"ln" + s})
        .node("LayerNormalization", {"x" + s, "g" + s}, {"lnnb" + s})
        .node("Softmax", {"x" + s}, {"sm" + s})
        .node("ReduceMean", {"x" + s, "ax" + s}, {"mean" + s})
        .node("ReduceSum", {"x" + s, "ax" + s}, {"rsum" + s})
        .node("ReduceMax", {"x" + s, "ax" + s}, {"max" + s})
        .output("ln" + s)
        .output("sum" + s)
        .output("lnnb" + s)
        .output("sm" + s)
        .output("mean" + s)
        .output("rsum" + s)
        .output("max" + s);
  }
  return b;
}

OnnxBuilder rms_model() {
  OnnxBuilder b("rms", 23);
  for (int64_t w : {1, 17, 1000, 4096}) {
    const std::string s = std::to_string(w);
    b.input("x" + s, {kS, w})
        .input("r" + s, {kS, w})
        .random_initializer("g" + s, {w})
        .node("Add", {"x" + s, "r" + s}, {"sum" + s})
        .node("RMSNormalization", {"sum" + s, "g" + s}, {"y" + s})
        .output("y" + s);
  }
  return b;
}

TEST(LowerReduce, EveryKernelCompilesForEveryArchAndPrecision) {
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    std::vector<KernelDef> kernels;
    for (const OnnxBuilder& b : {all_rows_model(), rms_model()}) {
      ir::Graph g;
      auto p = lower_model(b, g, prec);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      for (const KernelDef& k : p->kernels)  // the two programs share the boundary casts
        if (std::none_of(kernels.begin(), kernels.end(),
                         [&](const KernelDef& o) { return o.symbol == k.symbol; }))
          kernels.push_back(k);
    }
    NvrtcModule m{"rows", codegen_module_source(kernels, {1}), kernel_headers()};
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtc_compile(m, arch);
      EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    }
  }
}

TEST(LowerReduce, CodegenIsDeterministic) {
  ir::Graph g1, g2;
  auto p1 = lower_model(all_rows_model(), g1, Precision::kBF16);
  auto p2 = lower_model(all_rows_model(), g2, Precision::kBF16);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(codegen_module_source(p1->kernels, {}), codegen_module_source(p2->kernels, {}));
  // The candidates too: same names, same order, same text.
  EXPECT_EQ(codegen_module_source({}, {}, candidate_kernels(*p1, {1, 17})),
            codegen_module_source({}, {}, candidate_kernels(*p2, {1, 17})));
}

std::vector<std::string> candidate_labels(int64_t cols, DType dtype, bool holds_row) {
  std::vector<std::string> out;
  for (const RowGeometry& g : row_candidate_geometries(cols, dtype, holds_row))
    out.push_back(row_geometry_label(g));
  return out;
}

TEST(LowerReduce, CandidateGeometriesByRowLength) {
  using V = std::vector<std::string>;
  // A warp per row: fewer rows per block, 2 and 4 warps per row, the narrower vector.
  EXPECT_EQ(candidate_labels(768, DType::kF32, true),
            (V{"threads=32 rows=4 vec=4", "threads=32 rows=1 vec=4", "threads=64 rows=1 vec=4",
               "threads=128 rows=1 vec=4", "threads=32 rows=8 vec=2", "threads=32 rows=2 vec=4"}));
  // 125 vectors of 8: no 128-thread group.
  EXPECT_EQ(candidate_labels(1000, DType::kF16, true),
            (V{"threads=32 rows=4 vec=8", "threads=32 rows=1 vec=8", "threads=64 rows=1 vec=8",
               "threads=32 rows=8 vec=4", "threads=32 rows=2 vec=8"}));
  // A row of 17 scalars: only the rows per block vary.
  EXPECT_EQ(candidate_labels(17, DType::kF32, true),
            (V{"threads=32 rows=4 vec=1", "threads=32 rows=1 vec=1", "threads=32 rows=2 vec=1"}));
  EXPECT_EQ(candidate_labels(1, DType::kBF16, false), candidate_labels(1, DType::kF32, true));
  // A block of 256 per row: 128 and 512, the narrower vector, 64 and 1024; a warp holding 4096
  // floats would keep 128 of them per thread, so only the streaming reduction offers it.
  EXPECT_EQ(candidate_labels(4096, DType::kF32, true),
            (V{"threads=128 rows=1 vec=4", "threads=512 rows=1 vec=4", "threads=256 rows=1 vec=2",
               "threads=64 rows=1 vec=4", "threads=1024 rows=1 vec=4"}));
  EXPECT_EQ(
      candidate_labels(4096, DType::kF32, false),
      (V{"threads=128 rows=1 vec=4", "threads=512 rows=1 vec=4", "threads=32 rows=8 vec=4",
         "threads=256 rows=1 vec=2", "threads=64 rows=1 vec=4", "threads=1024 rows=1 vec=4"}));
  // 96 threads (1536 floats): the powers of two around it.
  EXPECT_EQ(row_geometry(1536, DType::kF32).threads_per_row, 96);
  EXPECT_EQ(candidate_labels(1536, DType::kF32, true),
            (V{"threads=64 rows=1 vec=4", "threads=128 rows=1 vec=4", "threads=32 rows=8 vec=4",
               "threads=96 rows=1 vec=2", "threads=32 rows=1 vec=4", "threads=256 rows=1 vec=4"}));
  // 1024 threads already: nothing larger, nothing that spills.
  EXPECT_EQ(
      candidate_labels(16384, DType::kF32, true),
      (V{"threads=512 rows=1 vec=4", "threads=1024 rows=1 vec=2", "threads=256 rows=1 vec=4"}));
  // Every row length and dtype: at most 6, unique, never the default, a legal group.
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t cols = 1; cols <= 20000; cols += cols < 64 ? 1 : 37)
      for (bool holds : {false, true}) {
        const RowGeometry d = row_geometry(cols, t);
        const auto gs = row_candidate_geometries(cols, t, holds);
        ASSERT_LE(gs.size(), 6u) << cols;
        std::set<std::string> labels = {row_geometry_label(d)};
        for (const RowGeometry& g : gs) {
          EXPECT_TRUE(labels.insert(row_geometry_label(g)).second)
              << cols << ": " << row_geometry_label(g);
          EXPECT_EQ(cols % g.vec, 0) << cols << ": " << row_geometry_label(g);
          EXPECT_EQ(g.threads_per_row % 32, 0);
          EXPECT_LE(g.block, 1024u);
          EXPECT_EQ(g.block, g.threads_per_row == 32 ? 32 * g.rows_per_block
                                                     : static_cast<uint32_t>(g.threads_per_row));
          if (g.threads_per_row > 32) {
            EXPECT_EQ(g.rows_per_block, 1u);
          }
        }
      }
}

bool is_row_kernel(const KernelDef& k) {
  for (const char* prefix : {"kiln_layernorm_", "kiln_rmsnorm_", "kiln_softmax_", "kiln_reduce_"})
    if (k.symbol.rfind(prefix, 0) == 0) return true;
  return false;
}

// The geometry a label names; threads_per_row 0 when the label does not parse.
RowGeometry parse_label(const std::string& label) {
  RowGeometry g;
  unsigned rows = 0;
  char tail = 0;
  if (std::sscanf(label.c_str(), "threads=%d rows=%u vec=%d%c", &g.threads_per_row, &rows, &g.vec,
                  &tail) != 3)
    return RowGeometry{0, 0, 0, 0};
  g.rows_per_block = rows;
  g.block = g.threads_per_row == 32 ? 32 * rows : static_cast<uint32_t>(g.threads_per_row);
  return g;
}

TEST(LowerReduce, EveryRowLaunchCarriesCandidates) {
  for (Precision prec : {Precision::kF32, Precision::kF16}) {
    for (const OnnxBuilder& b : {all_rows_model(), rms_model()}) {
      SCOPED_TRACE(std::string(precision_name(prec)));
      ir::Graph g;
      auto p = lower_model(b, g, prec);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      int row_launches = 0;
      for (const KernelLaunch* l : kernel_steps(*p)) {
        const KernelDef& def = p->kernels[static_cast<size_t>(l->kernel)];
        if (!is_row_kernel(def)) continue;  // the precision config's boundary casts
        ++row_launches;
        SCOPED_TRACE(l->nodes + " " + def.symbol);
        ASSERT_FALSE(l->candidates.empty());
        EXPECT_LE(l->candidates.size(), 6u);
        // The default is the geometry its label names.
        const RowGeometry d = parse_label(l->config);
        ASSERT_NE(d.threads_per_row, 0) << l->config;
        EXPECT_EQ(l->block, d.block);
        EXPECT_EQ(l->work_per_block, d.rows_per_block);
        EXPECT_EQ(def.max_threads, d.block);
        EXPECT_NE(def.body.find(fmt::format(", {}, {}", d.vec, d.threads_per_row)),
                  std::string::npos)
            << def.body;
        EXPECT_TRUE(l->tuned.empty());
        std::set<std::string> labels = {l->config};
        for (const LaunchCandidate& c : l->candidates) {
          SCOPED_TRACE(c.config);
          EXPECT_TRUE(labels.insert(c.config).second) << "duplicate or the default's label";
          const RowGeometry geo = parse_label(c.config);
          ASSERT_NE(geo.threads_per_row, 0);
          EXPECT_EQ(c.def.params, def.params);
          EXPECT_TRUE(c.def.symbol.empty());
          EXPECT_TRUE(c.def.body != def.body || c.def.max_threads != def.max_threads);
          EXPECT_NE(c.def.body.find(fmt::format(", {}, {}", geo.vec, geo.threads_per_row)),
                    std::string::npos)
              << c.def.body;
          EXPECT_EQ(c.block, geo.block);
          EXPECT_EQ(c.def.max_threads, c.block);  // as tight as the default's bound
          EXPECT_EQ(c.work, l->work);
          EXPECT_EQ(c.work_per_block, geo.rows_per_block);
          EXPECT_EQ(c.grid_y, ir::DimExpr::constant(1));
          EXPECT_EQ(c.shared_bytes, 0u);
        }
      }
      EXPECT_GT(row_launches, 3);
    }
  }
}

// Norms (with and without the residual), softmax and two reductions over a warp-per-row row of
// scalars, a warp-per-row row of vectors and a block-per-row row: every kind of candidate.
OnnxBuilder candidate_model() {
  OnnxBuilder b("cands", 23);
  for (int64_t w : {17, 1000, 4096}) {
    const std::string s = std::to_string(w);
    b.input("x" + s, {kS, w})
        .input("r" + s, {kS, w})
        .random_initializer("g" + s, {w})
        .random_initializer("b" + s, {w})
        .int64_initializer("ax" + s, {1}, {-1})
        .node("Add", {"x" + s, "r" + s}, {"sum" + s})
        .node("LayerNormalization", {"sum" + s, "g" + s, "b" + s}, {"ln" + s})
        .node("Add", {"r" + s, "r" + s}, {"rr" + s})
        .node("RMSNormalization", {"rr" + s, "g" + s}, {"rms" + s})
        .node("Softmax", {"x" + s}, {"sm" + s})
        .node("ReduceMean", {"x" + s, "ax" + s}, {"mean" + s})
        .node("ReduceMax", {"x" + s, "ax" + s}, {"max" + s})
        .output("ln" + s)
        .output("sum" + s)
        .output("rms" + s)
        .output("sm" + s)
        .output("mean" + s)
        .output("max" + s);
  }
  return b;
}

void candidates_compile(Precision prec) {
  ir::Graph g;
  auto p = lower_model(candidate_model(), g, prec);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  size_t want = 0;
  for (auto& step : p->steps)  // only this family's (not the boundary casts')
    if (auto* l = std::get_if<KernelLaunch>(&step)) {
      if (!is_row_kernel(p->kernels[static_cast<size_t>(l->kernel)])) l->candidates.clear();
      want += l->candidates.size();
    }
  const std::vector<SizedKernel> sized = candidate_kernels(*p, {17});
  EXPECT_GE(want, 60u);
  EXPECT_EQ(sized.size(), want);  // no two launches share a candidate here
  NvrtcModule m{"row_candidates", codegen_module_source({}, {}, sized), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

TEST(LowerReduce, EveryCandidateCompilesF32) { candidates_compile(Precision::kF32); }
TEST(LowerReduce, EveryCandidateCompilesF16) { candidates_compile(Precision::kF16); }
TEST(LowerReduce, EveryCandidateCompilesBF16) { candidates_compile(Precision::kBF16); }

}  // namespace
}  // namespace kiln::compiler
