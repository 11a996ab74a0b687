#include "compiler/reference/reference_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiln::compiler {
namespace {

TEST(ReferenceCompare, WithinAndOutsideTolerance) {
  const Tolerance tol{1e-3, 1e-5};
  std::vector<double> ref = {1.0, -2.0, 0.0};
  float ok[] = {1.0009f, -2.0019f, 0.000009f};
  EXPECT_TRUE(compare_with_reference(ok, ref, tol).ok());
  float bad[] = {1.0f, -2.003f, 0.0f};
  auto c = compare_with_reference(bad, ref, tol);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.first_mismatch, 1);
  EXPECT_NEAR(c.max_abs_error, 0.003, 1e-6);
}

TEST(ReferenceCompare, NanAndInfMustSitInTheSamePlaces) {
  const Tolerance tol{1e-3, 1e-5};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> ref = {std::nan(""), HUGE_VAL, 1.0};
  float same[] = {nan, inf, 1.0f};
  EXPECT_TRUE(compare_with_reference(same, ref, tol).ok());
  float moved[] = {1.0f, inf, nan};
  EXPECT_EQ(compare_with_reference(moved, ref, tol).mismatches, 2);
  float neg_inf[] = {nan, -inf, 1.0f};
  EXPECT_EQ(compare_with_reference(neg_inf, ref, tol).mismatches, 1);
}

TEST(ReferenceCompare, GemmToleranceGrowsWithK) {
  EXPECT_DOUBLE_EQ(tolerance_gemm(Precision::kF32, 64).atol, 1e-5);
  EXPECT_DOUBLE_EQ(tolerance_gemm(Precision::kF32, 8192).atol, 4e-5);
  EXPECT_DOUBLE_EQ(tolerance_end_to_end(Precision::kTF32).rtol, 1e-2);
}

}  // namespace
}  // namespace kiln::compiler
