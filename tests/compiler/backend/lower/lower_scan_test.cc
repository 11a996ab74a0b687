// Scan lowering (compiler/backend/lower/lower_scan.cc, scan_codegen.cc): CumSum along the size
// axis (RoBERTa's position ids), along constant axes short and long, with elements far apart
// (the column scan), exclusive and reverse, the axis as a constant input; the geometry and
// candidates chosen; refusals (a reverse scan along the size axis of a padded request, a run-time
// axis, an unsupported dtype); NVRTC compiles for sm_80 and sm_90 of every dtype, path, flag and
// candidate.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <set>
#include <string>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/scan_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "tests/support/lower_harness.h"
#include "tests/support/onnx_builder.h"

namespace kiln::compiler {
namespace {

using testing::kernel_steps;
using testing::lower_model;
using testing::OnnxBuilder;
const std::string kS = "S";
constexpr int kI32 = onnx::TensorProto::INT32;
constexpr int kI64 = onnx::TensorProto::INT64;
constexpr int kF32 = onnx::TensorProto::FLOAT;

// One CumSum of x [dims] along `axis`; `elem` the input's (and output's) element type.
OnnxBuilder cumsum(std::vector<testing::Dim> dims, int64_t axis, int elem = kF32,
                   int64_t exclusive = 0, int64_t reverse = 0) {
  OnnxBuilder b("scan", 18);
  b.typed_input("x", elem, dims)
      .int64_initializer("axis", {}, {axis})
      .node("CumSum", {"x", "axis"}, {"y"},
            {{"exclusive", exclusive}, {"reverse", reverse}})
      .typed_output("y", elem);
  return b;
}

// The one launch of a single-CumSum model, and its kernel.
struct Lowered {
  ir::Graph g;
  LoweredProgram p;
  const KernelLaunch* launch = nullptr;
  const KernelDef* def = nullptr;
};

void lower_one(const OnnxBuilder& b, Lowered* out) {
  auto p = lower_model(b, out->g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  out->p = std::move(p).value();
  auto ks = kernel_steps(out->p);
  ASSERT_EQ(ks.size(), 1u);
  out->launch = ks[0];
  out->def = &out->p.kernels[static_cast<size_t>(ks[0]->kernel)];
  EXPECT_EQ(out->def->symbol.rfind("kiln_cumsum_", 0), 0u) << out->def->symbol;
}

TEST(LowerScan, PositionIdsAlongTheSizeAxis) {  // RoBERTa: cumsum(mask.int(), dim=1)
  Lowered l;
  ASSERT_NO_FATAL_FAILURE(lower_one(cumsum({int64_t{2}, kS}, 1, kI32), &l));
  EXPECT_EQ(l.def->body,
            "  kiln::scan_lines<int, long long, 256, false, false>(x, y, 2LL, (1LL*S), 1LL);\n");
  EXPECT_EQ(l.launch->work, ir::DimExpr::constant(2));  // one line per batch row
  EXPECT_EQ(l.launch->work_per_block, 1u);
  EXPECT_EQ(l.launch->block, 256u);
  EXPECT_EQ(l.def->max_threads, 256u);
  EXPECT_EQ(l.launch->config, "threads=256 lines=1");
  ASSERT_EQ(l.launch->args.size(), 3u);
  EXPECT_EQ(l.launch->args[2].kind, KernelArgRef::Kind::kSize);
}

TEST(LowerScan, GeometryByLineLengthAndSpacing) {
  struct Want {
    std::vector<testing::Dim> dims;
    int64_t axis;
    std::string call, config;
    ir::DimExpr work;
    uint32_t per_block;
  };
  const ir::DimExpr S = ir::DimExpr::size();
  const Want cases[] = {
      // Short constant lines: a warp each, 8 per block.
      {{kS, int64_t{17}}, -1, "scan_lines<float, float, 32, false, false>(x, y, (1LL*S), 17LL, 1LL)",
       "threads=32 lines=8", S, 8},
      // Long constant lines: about 4 elements per thread, the carry across chunks for the rest.
      {{kS, int64_t{1000}}, 1, "scan_lines<float, float, 256, false, false>(x, y, (1LL*S), 1000LL, 1LL)",
       "threads=256 lines=1", S, 1},
      {{kS, int64_t{100000}}, 1,
       "scan_lines<float, float, 1024, false, false>(x, y, (1LL*S), 100000LL, 1LL)",
       "threads=1024 lines=1", S, 1},
      // Elements 64 apart: a thread per line, coalesced.
      {{kS, int64_t{7}, int64_t{64}}, 1,
       "scan_columns<float, float, false, false>(x, y, (64LL*S), 7LL, 64LL)",
       "columns block=256", ir::DimExpr::size(64), 256},
      // Along the size axis with an inner dim under 32: strided lines.
      {{kS, int64_t{3}}, 0, "scan_lines<float, float, 256, false, false>(x, y, 3LL, (1LL*S), 3LL)",
       "threads=256 lines=1", ir::DimExpr::constant(3), 1},
  };
  for (const Want& w : cases) {
    SCOPED_TRACE(w.call);
    Lowered l;
    ASSERT_NO_FATAL_FAILURE(lower_one(cumsum(w.dims, w.axis), &l));
    EXPECT_NE(l.def->body.find("kiln::" + w.call), std::string::npos) << l.def->body;
    EXPECT_EQ(l.launch->config, w.config);
    EXPECT_EQ(l.launch->work, w.work);
    EXPECT_EQ(l.launch->work_per_block, w.per_block);
  }
}

TEST(LowerScan, ExclusiveReverseAndIntegerAccumulators) {
  Lowered l;
  ASSERT_NO_FATAL_FAILURE(lower_one(cumsum({kS, int64_t{5}}, 1, kI64, 1, 1), &l));
  EXPECT_NE(l.def->body.find("kiln::scan_lines<long long, long long, 32, true, true>"),
            std::string::npos)
      << l.def->body;
  Lowered f;
  ASSERT_NO_FATAL_FAILURE(lower_one(cumsum({kS, int64_t{5}}, -1, kF32, 1, 0), &f));
  EXPECT_NE(f.def->body.find("kiln::scan_lines<float, float, 32, true, false>"), std::string::npos)
      << f.def->body;
}

TEST(LowerScan, RefusesAReverseScanOverPaddingARunTimeAxisAndOtherDtypes) {
  ir::Graph g;
  auto rev = lower_model(cumsum({int64_t{2}, kS}, 1, kI32, 0, 1), g);
  ASSERT_FALSE(rev.ok());
  EXPECT_EQ(rev.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rev.status().message().find("CumSum"), std::string::npos) << rev.status().message();
  EXPECT_NE(rev.status().message().find("padding"), std::string::npos) << rev.status().message();
  // Reverse along a constant axis is fine.
  EXPECT_TRUE(lower_model(cumsum({kS, int64_t{9}}, 1, kI32, 0, 1), g).ok());

  OnnxBuilder b("scan", 18);
  b.input("x", {kS, int64_t{4}})
      .typed_input("axis", kI64, {})
      .node("CumSum", {"x", "axis"}, {"y"})
      .output("y");
  auto axis = lower_model(b, g);
  ASSERT_FALSE(axis.ok());
  EXPECT_EQ(axis.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(axis.status().message().find("run time"), std::string::npos)
      << axis.status().message();

  auto i8 = lower_model(cumsum({kS, int64_t{4}}, 1, onnx::TensorProto::INT8), g);
  ASSERT_FALSE(i8.ok());
  EXPECT_NE(i8.status().message().find("i8"), std::string::npos) << i8.status().message();
}

TEST(LowerScan, CandidatesAreOtherValidGeometries) {
  const ir::DimExpr S = ir::DimExpr::size();
  const ScanKernel kernels[] = {
      {DType::kF32, false, false, S, ir::DimExpr::constant(17), ir::DimExpr::constant(1)},
      {DType::kF16, true, false, ir::DimExpr::constant(2), S, ir::DimExpr::constant(1)},
      {DType::kI64, false, true, S, ir::DimExpr::constant(3000), ir::DimExpr::constant(1)},
      {DType::kBF16, false, false, ir::DimExpr::size(64), ir::DimExpr::constant(7),
       ir::DimExpr::constant(64)},
  };
  for (const ScanKernel& k : kernels) {
    const ScanGeometry d = scan_geometry(k);
    const auto gs = scan_candidate_geometries(k);
    SCOPED_TRACE(scan_geometry_label(d));
    ASSERT_FALSE(gs.empty());
    EXPECT_LE(gs.size(), 6u);
    std::set<std::string> labels = {scan_geometry_label(d)};
    for (const ScanGeometry& g : gs) {
      EXPECT_TRUE(labels.insert(scan_geometry_label(g)).second) << scan_geometry_label(g);
      EXPECT_LE(g.block, 1024u);
      if (g.columns) {
        EXPECT_EQ(g.lines_per_block, g.block);
      } else if (g.threads_per_line == 32) {
        EXPECT_EQ(g.block, 32 * g.lines_per_block);
      } else {
        EXPECT_EQ(g.block, static_cast<uint32_t>(g.threads_per_line));
        EXPECT_EQ(g.lines_per_block, 1u);
        if (k.len.is_constant()) {
          EXPECT_LE(g.threads_per_line, k.len.offset);
        }
      }
    }
    for (const LaunchCandidate& c : scan_candidates(k)) {
      EXPECT_EQ(c.def.params, codegen_scan(k, d).params);
      EXPECT_EQ(c.def.max_threads, c.block);
      EXPECT_EQ(c.work, k.lines);
    }
  }
  // 17-element lines: no block wider than the line.
  for (const ScanGeometry& g : scan_candidate_geometries(kernels[0]))
    EXPECT_TRUE(g.columns || g.threads_per_line == 32) << scan_geometry_label(g);
}

// Every dtype, path and flag in one model.
OnnxBuilder all_scans_model() {
  OnnxBuilder b("scans", 18);
  int k = 0;
  auto add = [&](int elem, std::vector<testing::Dim> dims, int64_t axis, int64_t excl,
                 int64_t rev) {
    const std::string s = std::to_string(k++);
    b.typed_input("x" + s, elem, dims)
        .int64_initializer("a" + s, {1}, {axis})
        .node("CumSum", {"x" + s, "a" + s}, {"y" + s}, {{"exclusive", excl}, {"reverse", rev}})
        .typed_output("y" + s, elem);
  };
  for (int elem : {kF32, kI32, kI64}) {
    add(elem, {int64_t{2}, kS}, 1, 0, 0);
    add(elem, {int64_t{2}, kS}, 1, 1, 0);
    add(elem, {kS, int64_t{17}}, 1, 1, 1);
    add(elem, {kS, int64_t{3000}}, 1, 0, 1);
    add(elem, {kS, int64_t{5}, int64_t{40}}, 1, 1, 0);
  }
  return b;
}

TEST(LowerScan, EveryKernelAndCandidateCompilesForEveryArchAndPrecision) {
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    ir::Graph g;
    auto p = lower_model(all_scans_model(), g, prec);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    int scans = 0;
    for (const KernelDef& k : p->kernels) scans += k.symbol.rfind("kiln_cumsum_", 0) == 0;
    EXPECT_EQ(scans, 15);
    const std::string source =
        codegen_module_source(p->kernels, {17}, candidate_kernels(*p, {17}));
    if (prec != Precision::kF32) {
      const std::string t = prec == Precision::kF16 ? "kiln::f16" : "kiln::bf16";
      EXPECT_NE(source.find("kiln::scan_lines<" + t + ", float,"), std::string::npos);
      EXPECT_NE(source.find("kiln::scan_columns<" + t + ", float,"), std::string::npos);
    }
    NvrtcModule m{"scans", source, kernel_headers()};
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtc_compile(m, arch);
      EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
