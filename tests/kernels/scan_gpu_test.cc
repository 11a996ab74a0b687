// GPU: the CumSum scan kernels (compiler/backend/lower/lower_scan.cc, kernels/scan.cuh) against
// the CPU reference, through the whole pipeline: along the size axis (RoBERTa's position ids,
// int32 and int64, padded requests too), along constant axes of 1 to 5000 elements (a warp, a
// block, several chunks with a carried total), strided lines and the column scan, exclusive and
// reverse, in fp32, fp16 and bf16, and in every launch-configuration candidate.
//
// Integer scans are exact. Float sums accumulate in fp32 in another order than the reference's
// float64 loop, and fp16/bf16 round the inputs and the result: the tolerance grows with the
// line (about sqrt(5000) rounded terms of size 1 for the longest).
#include <gtest/gtest.h>

#include <random>

#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

constexpr int kF32 = onnx::TensorProto::FLOAT;
constexpr int kI32 = onnx::TensorProto::INT32;
constexpr int kI64 = onnx::TensorProto::INT64;
const Dim S = std::string("S");

OnnxBuilder cumsum(std::vector<Dim> dims, int64_t axis, int elem = kF32, int64_t exclusive = 0,
                   int64_t reverse = 0) {
  OnnxBuilder b("scan", 18);
  b.typed_input("x", elem, dims)
      .int64_initializer("axis", {}, {axis})
      .node("CumSum", {"x", "axis"}, {"y"}, {{"exclusive", exclusive}, {"reverse", reverse}})
      .typed_output("y", elem);
  return b;
}

GpuCheck scan_check(Precision p, std::vector<int64_t> sizes) {
  GpuCheck c = gpu_check(p, std::move(sizes));
  switch (p) {
    case Precision::kF16:
      c.tol = {2e-3, 0.1};
      break;
    case Precision::kBF16:
      c.tol = {1.6e-2, 0.6};
      break;
    default:
      c.tol = {1e-5, 2e-4};
  }
  c.tol_set = true;
  return c;
}

GpuCheck exact_check(std::vector<int64_t> sizes, int64_t int_high) {
  GpuCheck c = gpu_check(Precision::kF32, std::move(sizes));
  c.tol = {0.0, 0.0};
  c.tol_set = true;
  c.int_high = int_high;
  return c;
}

TEST(ScanGpu, PositionIdsAlongTheSizeAxis) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(11);
  for (int elem : {kI32, kI64})
    for (int64_t excl : {0, 1}) {
      SCOPED_TRACE(std::to_string(elem) + " exclusive " + std::to_string(excl));
      EXPECT_TRUE(gpu_model_matches_reference(cumsum({int64_t{2}, S}, 1, elem, excl),
                                              exact_check({1, 3, 17, 1000}, 2), rng));
      // Captured sizes: every run is padded (the debug executor poisons the padding), and a
      // forward scan must keep the padding out of the real rows.
      GpuCheck padded = exact_check({1, 3, 17, 1000}, 2);
      padded.capture_sizes = {4, 32, 1024};
      EXPECT_TRUE(
          gpu_model_matches_reference(cumsum({int64_t{2}, S}, 1, elem, excl), padded, rng));
    }
  // Large integers: int64 sums far beyond fp32's exact range. The harness compares through
  // float, so the tolerance is one float rounding; an fp32 accumulator would be off by many.
  GpuCheck large = exact_check({1, 17}, int64_t{1} << 40);
  large.tol = {1.2e-7, 0.0};
  EXPECT_TRUE(gpu_model_matches_reference(cumsum({S, int64_t{300}}, 1, kI64), large, rng));
}

TEST(ScanGpu, FloatLinesShortAndLong) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(12);
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
    for (int64_t len : {1, 17, 128, 129, 1000, 5000})
      for (auto [excl, rev] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {0, 1}, {1, 1}}) {
        SCOPED_TRACE(std::string(compiler::precision_name(p)) + " len " + std::to_string(len) +
                     " exclusive " + std::to_string(excl) + " reverse " + std::to_string(rev));
        const std::vector<int64_t> sizes =
            len > 1000 ? std::vector<int64_t>{1, 3, 17} : std::vector<int64_t>{1, 3, 17, 1000};
        EXPECT_TRUE(gpu_model_matches_reference(cumsum({S, len}, 1, kF32, excl, rev),
                                                scan_check(p, sizes), rng));
      }
}

TEST(ScanGpu, StridedLinesAndColumns) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(13);
  for (Precision p : {Precision::kF32, Precision::kF16})
    for (int64_t rev : {0, 1}) {
      SCOPED_TRACE(std::string(compiler::precision_name(p)) + " reverse " + std::to_string(rev));
      const GpuCheck c = scan_check(p, {1, 3, 17, 1000});
      EXPECT_TRUE(gpu_model_matches_reference(cumsum({S, int64_t{7}, int64_t{3}}, 1, kF32, 0, rev),
                                              c, rng));  // lines 3 apart
      EXPECT_TRUE(gpu_model_matches_reference(
          cumsum({S, int64_t{7}, int64_t{64}}, 1, kF32, 1, rev), c, rng));  // the column scan
      // Along the size axis, lines 3 apart; reverse is allowed because runs are not padded.
      EXPECT_TRUE(gpu_model_matches_reference(cumsum({S, int64_t{3}}, 0, kF32, 0, rev), c, rng));
    }
}

// Every candidate (scan_candidate_geometries: up to 6) of a warp-per-line, a block-per-line and
// a column scan, at every compile size.
TEST(ScanGpu, EveryLaunchCandidate) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  const OnnxBuilder models[] = {cumsum({S, int64_t{40}}, 1, kF32, 1, 0),
                                cumsum({int64_t{3}, S}, 1, kI64, 0, 0),
                                cumsum({S, int64_t{2000}}, 1, kF32, 0, 1),
                                cumsum({S, int64_t{5}, int64_t{48}}, 1, kI32, 1, 1)};
  std::mt19937 rng(14);
  for (int c = 0; c < 6; ++c)
    for (size_t m = 0; m < std::size(models); ++m) {
      SCOPED_TRACE("candidate " + std::to_string(c) + " model " + std::to_string(m));
      GpuCheck check = scan_check(Precision::kF32, {1, 3, 17});
      check.int_high = 100;
      check.candidate = c;
      check.compile_sizes = check.sizes;
      EXPECT_TRUE(gpu_model_matches_reference(models[m], check, rng));
    }
}

// Without a GPU: forcing a candidate compiles it into the artifact. Lines of 40 have two: a warp
// for 2 lines per block, and the column scan (every block of 64 or more threads is wider than the line).
TEST(ScanGpu, CandidatesCompileWithoutAGpu) {
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE("candidate " + std::to_string(c));
    compiler::CompileOutcome out;
    ASSERT_TRUE(compiles_with_candidate(cumsum({S, int64_t{40}}, 1), c, &out));
    EXPECT_EQ(out.kernel_steps, 1);
    EXPECT_EQ(out.tuned_launches, c < 2 ? 1 : 0);
  }
}

}  // namespace
}  // namespace kiln::testing
