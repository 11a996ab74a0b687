// first_disagreement / output_tolerance (compiler/autotune/output_agreement.h): a candidate's
// output agrees with the default's within what reordering a sum costs at the output's scale;
// a wrong element is found, NaN agrees only with NaN, integers are exact.
#include "compiler/autotune/output_agreement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kiln::compiler {
namespace {

// Outputs of a K = 768 product of operands in [-1, 1]: RMS about 9, with one element near 0.
std::vector<double> wide_sums() {
  std::vector<double> v;
  for (int i = 0; i < 256; ++i) v.push_back((i % 2 == 0 ? 1.0 : -1.0) * (4.0 + (i % 11)));
  v[100] = 0.06805419921875;
  return v;
}

// The case the tuner met on GPT-2's MLP at 2 rows (fp16, a LayerNorm prologue on tensor cores):
// 0.0652 against 0.0681, off by 0.0028 in sums of RMS 9. Relative to the element alone (atol
// 2e-3, rtol 1e-2) that was a rejection; at the sums' scale it is rounding.
TEST(OutputAgreement, ASmallElementOfLargeSumsMayMoveByTheSumsRounding) {
  const std::vector<double> want = wide_sums();
  std::vector<double> got = want;
  got[100] = 0.06524658203125;
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), -1);
}

TEST(OutputAgreement, AWrongElementIsFound) {
  const std::vector<double> want = wide_sums();
  std::vector<double> got = want;
  got[37] += 1.0;  // a lost term of the sum: far beyond rounding
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), 37);
  got = want;
  got[100] = 0.5;  // the near-zero element, off by 0.43
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), 100);
}

// Small outputs keep the tight bound: the slack scales with them.
TEST(OutputAgreement, SmallOutputsKeepATightBound) {
  std::vector<double> want(64, 0.01), got(64, 0.01);
  got[5] = 0.016;
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), 5);
  got[5] = 0.0115;
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), -1);
}

TEST(OutputAgreement, Bf16AllowsMoreThanF16AndF32Less) {
  const std::vector<double> want = wide_sums();
  std::vector<double> got = want;
  got[3] += 0.2;  // 2.2% of RMS 9
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kBF16)), -1);
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), 3);
  got[3] = want[3] + 0.02;
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF16)), -1);
  EXPECT_EQ(first_disagreement(got, want, output_tolerance(DType::kF32)), 3);
}

TEST(OutputAgreement, NanAgreesOnlyWithNanAndIntegersAreExact) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> want = {1.0, nan, inf, 2.0};
  EXPECT_EQ(first_disagreement(std::vector<double>{1.0, nan, inf, 2.0}, want,
                               output_tolerance(DType::kF16)),
            -1);
  EXPECT_EQ(first_disagreement(std::vector<double>{1.0, 0.0, inf, 2.0}, want,
                               output_tolerance(DType::kF16)),
            1);
  EXPECT_EQ(first_disagreement(std::vector<double>{nan, nan, inf, 2.0}, want,
                               output_tolerance(DType::kF16)),
            0);
  EXPECT_EQ(first_disagreement(std::vector<double>{1.0, nan, -inf, 2.0}, want,
                               output_tolerance(DType::kF16)),
            2);
  const std::vector<double> ints = {3, 1000000, -7};
  EXPECT_EQ(first_disagreement(ints, ints, output_tolerance(DType::kI64)), -1);
  EXPECT_EQ(
      first_disagreement(std::vector<double>{3, 1000001, -7}, ints, output_tolerance(DType::kI64)),
      1);
}

TEST(OutputAgreement, ALengthMismatchDisagreesWhereTheShorterEnds) {
  const std::vector<double> want = {1.0, 2.0, 3.0};
  EXPECT_EQ(first_disagreement(std::vector<double>{1.0, 2.0}, want, output_tolerance(DType::kF32)),
            2);
}

}  // namespace
}  // namespace kiln::compiler
