// GPU: the row-reduction kernels (LayerNormalization, RMSNormalization, the fused residual,
// Softmax, ReduceSum / ReduceMean / ReduceMax) against the CPU reference, over row lengths 1, 3,
// 17, 768, 1000, 4096 and a 3-D shape, sizes 1, 3, 17 (and 1000 for the narrow rows), stored in
// f32, f16 and bf16 and through the fp16 / bf16 precision configs; and every launch candidate
// (GpuCheck::candidate) on a model of every kind of row kernel.
//
// Tolerance override: norms, softmax and mean/sum reduce a whole row in fp32 (a different
// summation order than the float64 reference), so they use the end-to-end tolerance of
// tests/README.md for the storage dtype or precision rather than the elementwise one. ReduceSum
// gets atol scaled by the row length, since it is a sum of `cols` rounded values.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "compiler/backend/lower/reduce_codegen.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_compare.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {
namespace {

using compiler::Precision;
const std::string kS = "S";

struct Layout {
  const char* name;
  std::vector<Dim> dims;
  int64_t cols;
};

std::vector<Layout> layouts() {
  return {{"Sx1", {kS, int64_t{1}}, 1},
          {"Sx3", {kS, int64_t{3}}, 3},
          {"Sx17", {kS, int64_t{17}}, 17},
          {"Sx768", {kS, int64_t{768}}, 768},
          {"Sx1000", {kS, int64_t{1000}}, 1000},
          {"Sx4096", {kS, int64_t{4096}}, 4096},
          {"2xSx7", {int64_t{2}, kS, int64_t{7}}, 7}};
}

// Sizes 1, 3, 17 and 1000; wide rows (768 and up) stop at 17 so that the float64 CPU reference
// of a whole test stays within the test's time limit (1000 is then the row length instead).
std::vector<int64_t> sizes_for(const Layout& l) {
  if (l.name == std::string("Sx768") || l.name == std::string("Sx1000") ||
      l.name == std::string("Sx4096"))
    return {1, 3, 17};
  return {1, 3, 17, 1000};
}

struct Storage {
  const char* name;
  int elem;
  Precision tolerance;
  DType dtype;
};

std::vector<Storage> storages() {
  return {{"f32", onnx::TensorProto::FLOAT, Precision::kF32, DType::kF32},
          {"f16", onnx::TensorProto::FLOAT16, Precision::kF16, DType::kF16},
          {"bf16", onnx::TensorProto::BFLOAT16, Precision::kBF16, DType::kBF16}};
}

// A weight of dtype `elem` (f32 initializer, cast; the importer folds the Cast).
void weight(OnnxBuilder& b, const std::string& name, int64_t cols, float lo, float hi, int elem,
            uint32_t seed) {
  b.random_initializer(name + "_f32", {cols}, lo, hi, seed);
  b.node("Cast", {name + "_f32"}, {name}, {{"to", int64_t{elem}}});
}

// Residual + LayerNormalization (sum also an output), LayerNormalization without bias, Softmax.
OnnxBuilder norm_model(const Layout& l, int elem) {
  OnnxBuilder b("rows", 18);
  b.typed_input("x", elem, l.dims).typed_input("r", elem, l.dims);
  weight(b, "g", l.cols, 0.5f, 1.5f, elem, 1);
  weight(b, "beta", l.cols, -1.0f, 1.0f, elem, 2);
  b.node("Add", {"x", "r"}, {"sum"}).typed_output("sum", elem);
  b.node("LayerNormalization", {"sum", "g", "beta"}, {"ln"}, {{"epsilon", 1e-5f}})
      .typed_output("ln", elem);
  b.node("LayerNormalization", {"x", "g"}, {"ln_nb"}, {{"epsilon", 1e-3f}})
      .typed_output("ln_nb", elem);
  b.node("Softmax", {"x"}, {"sm"}, {{"axis", int64_t{-1}}}).typed_output("sm", elem);
  return b;
}

OnnxBuilder rms_model(const Layout& l, int elem, bool residual) {
  OnnxBuilder b("rms", 23);
  b.typed_input("x", elem, l.dims);
  weight(b, "g", l.cols, 0.5f, 1.5f, elem, 4);
  std::string in = "x";
  if (residual) {
    b.typed_input("r", elem, l.dims).node("Add", {"x", "r"}, {"sum"});
    in = "sum";
  }
  b.node("RMSNormalization", {in, "g"}, {"y"}, {{"epsilon", 1e-6f}}).typed_output("y", elem);
  return b;
}

OnnxBuilder reduce_model(const Layout& l, int elem, const char* op) {
  OnnxBuilder b("reduce", 18);
  b.typed_input("x", elem, l.dims).int64_initializer("axes", {1}, {-1});
  b.node(op, {"x", "axes"}, {"y"}, {{"keepdims", int64_t{1}}}).typed_output("y", elem);
  return b;
}

// Every kind of row kernel in one model: Add + LayerNormalization (the sum also an output),
// Add + RMSNormalization (the sum read by the norm only), Softmax, ReduceMean, ReduceMax.
OnnxBuilder all_kinds_model(const Layout& l, int elem) {
  OnnxBuilder b("kinds", 23);
  b.typed_input("x", elem, l.dims).typed_input("r", elem, l.dims).typed_input("r2", elem, l.dims);
  weight(b, "g", l.cols, 0.5f, 1.5f, elem, 1);
  weight(b, "beta", l.cols, -1.0f, 1.0f, elem, 2);
  b.int64_initializer("axes", {1}, {-1});
  b.node("Add", {"x", "r"}, {"sum"}).typed_output("sum", elem);
  b.node("LayerNormalization", {"sum", "g", "beta"}, {"ln"}, {{"epsilon", 1e-5f}})
      .typed_output("ln", elem);
  b.node("Add", {"x", "r2"}, {"sum2"});
  b.node("RMSNormalization", {"sum2", "g"}, {"rms"}, {{"epsilon", 1e-6f}})
      .typed_output("rms", elem);
  b.node("Softmax", {"x"}, {"sm"}, {{"axis", int64_t{-1}}}).typed_output("sm", elem);
  b.node("ReduceMean", {"x", "axes"}, {"mean"}, {{"keepdims", int64_t{1}}})
      .typed_output("mean", elem);
  b.node("ReduceMax", {"x", "axes"}, {"max"}, {{"keepdims", int64_t{1}}}).typed_output("max", elem);
  return b;
}

// The launches of all_kinds_model that have a candidate `c`: three hold their row (the norms,
// softmax), two stream it (the reductions).
int launches_with_candidate(const Layout& l, DType dtype, int c) {
  auto has = [&](bool holds_row) {
    return compiler::row_candidate_geometries(l.cols, dtype, holds_row).size() >
           static_cast<size_t>(c);
  };
  return 3 * has(true) + 2 * has(false);
}

// Without a GPU the models of this file still go through import, lowering, NVRTC and the CPU
// reference, so a model the pipeline refuses shows up before the GPU run. `candidate` >= 0:
// forced as in GpuCheck::candidate at `compile_sizes`, and `tuned` receives the launches that
// use a candidate.
::testing::AssertionResult compiles_and_has_reference(const OnnxBuilder& b, Precision p,
                                                      int candidate = -1,
                                                      std::vector<int64_t> compile_sizes = {},
                                                      int* tuned = nullptr) {
  TempDir tmp;
  const auto path = tmp.path() / "model.onnx";
  b.save(path);
  compiler::CompileRequest req;
  req.model = path;
  req.config.size_dim = "S";
  req.config.max_size = 1024;
  req.config.precision = p;
  req.config.mode = CudaGraphMode::kNone;
  req.config.compile_sizes = std::move(compile_sizes);
  req.cache_root = tmp.path() / "cache";
  req.force_candidate = candidate;
  auto cm = compiler::compile_unpublished(req);
  if (!cm.ok()) return ::testing::AssertionFailure() << "compile: " << cm.status().to_string();
  if (tuned != nullptr) {
    *tuned = 0;
    for (const auto& step : (*cm)->program.steps)
      if (const auto* k = std::get_if<compiler::KernelLaunch>(&step)) *tuned += !k->tuned.empty();
  }
  auto g = compiler::import_canonical(path, req.config);
  if (!g.ok()) return ::testing::AssertionFailure() << "import: " << g.status().to_string();
  auto ref = compiler::reference_run(*g, 3, random_inputs(*g, 3, 5));
  if (!ref.ok()) return ::testing::AssertionFailure() << "reference: " << ref.status().to_string();
  return ::testing::AssertionSuccess();
}

GpuCheck check_for(const Layout& l, Precision config, Precision tol_row, double atol_scale = 1.0) {
  GpuCheck c = gpu_check(config, sizes_for(l));
  c.tol = compiler::tolerance_end_to_end(tol_row);
  c.tol.atol *= atol_scale;
  c.tol_set = true;
  return c;
}

TEST(ReduceGpu, NormsAndSoftmaxInEveryStorageDtype) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  for (const Storage& st : storages())
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(st.name) + " " + l.name);
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(
          norm_model(l, st.elem), check_for(l, Precision::kF32, st.tolerance), rng, &report));
      // Add + LayerNormalization fused; the other norm; softmax.
      EXPECT_EQ(report.kernel_steps, 3) << report.detail;
      for (bool residual : {false, true})
        EXPECT_TRUE(gpu_model_matches_reference(rms_model(l, st.elem, residual),
                                                check_for(l, Precision::kF32, st.tolerance), rng));
    }
}

TEST(ReduceGpu, LastAxisReductionsInEveryStorageDtype) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(22);
  for (const Storage& st : storages())
    for (const Layout& l : layouts())
      for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
        SCOPED_TRACE(std::string(st.name) + " " + l.name + " " + op);
        const double scale =
            std::string(op) == "ReduceSum" ? std::max(1.0, static_cast<double>(l.cols) / 64) : 1.0;
        EXPECT_TRUE(gpu_model_matches_reference(
            reduce_model(l, st.elem, op), check_for(l, Precision::kF32, st.tolerance, scale), rng));
      }
}

// f32 models through the fp16 / bf16 configs. Override: the pipeline rounds the f32 inputs and
// weights to the compute dtype at the graph boundary, which the f32 reference does not see; a
// norm scales that rounding (u = 2^-11 or 2^-8 of |x|, |scale| and |bias|) by 1/std and |scale|,
// about 6u absolute near zero outputs, above the end-to-end atol. So atol is 1e-2 / 4e-2 here,
// rtol stays end-to-end, and rows are >= 17 long (a 3-element row of close values has a tiny std
// that amplifies the input rounding without bound).
TEST(ReduceGpu, PrecisionConfigs) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(23);
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
    for (const Layout& l : layouts()) {
      if (l.cols < 17) continue;
      SCOPED_TRACE(std::string(compiler::precision_name(p)) + " " + l.name);
      GpuCheck check = check_for(l, p, p);
      if (p == Precision::kF16) check.tol.atol = 1e-2;
      if (p == Precision::kBF16) check.tol.atol = 4e-2;
      EXPECT_TRUE(gpu_model_matches_reference(norm_model(l, onnx::TensorProto::FLOAT), check, rng));
      EXPECT_TRUE(
          gpu_model_matches_reference(rms_model(l, onnx::TensorProto::FLOAT, true), check, rng));
    }
}

// Candidate c of every launch that has more than c, at sizes 1, 3, 17 (and 1000 for the short
// rows; each also a compile size, where the candidate runs): rows of 7 scalars (3-D, 2S rows; only
// rows per block vary), of 1000 (a warp per row: rows per block, 2 and 4 warps, the narrower
// vector) and of 4096 (a block per row: other block sizes, the narrower vector, a warp per row
// for the reductions). Stored in f32 and f16; bf16 has f16's geometries (same element size).
TEST(ReduceGpu, EveryCandidateMatchesTheReference) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(24);
  std::vector<Layout> ls;
  for (const Layout& l : layouts())
    if (l.cols == 7 || l.cols == 1000 || l.cols == 4096) ls.push_back(l);
  ASSERT_EQ(ls.size(), 3u);
  for (int c = 0; c < 6; ++c) {
    int checked = 0;
    for (const Storage& st : storages()) {
      if (st.dtype == DType::kBF16) continue;
      for (const Layout& l : ls) {
        SCOPED_TRACE(fmt::format("candidate {} {} {}", c, st.name, l.name));
        const int expected = launches_with_candidate(l, st.dtype, c);
        if (expected == 0) continue;
        GpuCheck check = check_for(l, Precision::kF32, st.tolerance);
        check.compile_sizes = check.sizes;
        check.candidate = c;
        GpuCheckReport report;
        EXPECT_TRUE(gpu_model_matches_reference(all_kinds_model(l, st.elem), check, rng, &report));
        EXPECT_EQ(report.kernel_steps, 5) << report.detail;
        EXPECT_GT(report.tuned_launches, 0) << report.detail;
        EXPECT_EQ(report.tuned_launches, expected) << report.detail;
        ++checked;
      }
    }
    EXPECT_GT(checked, 0) << "no launch has a candidate " << c;
  }
}

TEST(ReduceGpu, ModelsCompileWithoutAGpu) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    for (const Storage& st : storages()) {
      EXPECT_TRUE(compiles_and_has_reference(norm_model(l, st.elem), Precision::kF32));
      EXPECT_TRUE(compiles_and_has_reference(rms_model(l, st.elem, true), Precision::kF32));
      EXPECT_TRUE(
          compiles_and_has_reference(reduce_model(l, st.elem, "ReduceSum"), Precision::kF32));
    }
    for (Precision p : {Precision::kF16, Precision::kBF16})
      EXPECT_TRUE(compiles_and_has_reference(norm_model(l, onnx::TensorProto::FLOAT), p));
  }
}

// The candidate test's forced compiles, without a GPU (rows of 1000 and 4096 in f32: every
// candidate index has a launch).
TEST(ReduceGpu, CandidateModelsCompileWithoutAGpu) {
  for (const Layout& l : layouts()) {
    if (l.cols != 1000 && l.cols != 4096) continue;
    for (int c = 0; c < 6; ++c) {
      SCOPED_TRACE(fmt::format("candidate {} {}", c, l.name));
      int tuned = 0;
      EXPECT_TRUE(compiles_and_has_reference(all_kinds_model(l, onnx::TensorProto::FLOAT),
                                             Precision::kF32, c, {1, 3, 17}, &tuned));
      EXPECT_GT(tuned, 0);
      EXPECT_EQ(tuned, launches_with_candidate(l, DType::kF32, c));
    }
  }
}

}  // namespace
}  // namespace kiln::testing
