// autotune_random_bytes (compiler/autotune/operand_fill.h): floats are multiples of 1/64 in
// [-1, 1], the first kAutotuneRandomRun drawn and then repeated to any length; integers are 0.
#include "compiler/autotune/operand_fill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

namespace kiln::compiler {
namespace {

std::vector<float> as_f32(const std::vector<uint8_t>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST(OperandFill, FloatsAreSixtyFourthsInRangeAndMixed) {
  std::mt19937 rng(7);
  const std::vector<float> v = as_f32(autotune_random_bytes(DType::kF32, 5000, rng));
  ASSERT_EQ(v.size(), 5000u);
  std::set<float> distinct;
  for (float x : v) {
    EXPECT_LE(std::abs(x), 1.0f);
    EXPECT_EQ(x * 64.0f, std::round(x * 64.0f)) << x;
    distinct.insert(x);
  }
  EXPECT_GT(distinct.size(), 100u);  // of the 129 possible values
}

TEST(OperandFill, LongOperandsRepeatTheDrawnRun) {
  const int64_t run = kAutotuneRandomRun;
  for (const int64_t count : {run - 3, run, run + 1, 3 * run + 17}) {
    SCOPED_TRACE(count);
    std::mt19937 rng(11);
    const std::vector<uint8_t> h = autotune_random_bytes(DType::kF16, count, rng);
    ASSERT_EQ(h.size(), static_cast<size_t>(count) * 2);
    for (int64_t i = run; i < count; ++i)
      ASSERT_EQ(std::memcmp(&h[static_cast<size_t>(i) * 2],
                            &h[static_cast<size_t>(i % run) * 2], 2),
                0)
          << "element " << i;
    // The drawn part is not constant.
    EXPECT_NE(std::memcmp(&h[0], &h[2], 2) | std::memcmp(&h[2], &h[4], 2), 0);
  }
}

TEST(OperandFill, OnesInEveryDtype) {
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64,
                        DType::kI32, DType::kI8, DType::kU8, DType::kBool}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> b = autotune_ones_bytes(t, 1000);
    const size_t es = dtype_size(t);
    ASSERT_EQ(b.size(), 1000 * es);
    for (size_t i = 0; i < 1000; ++i) {
      const uint8_t* e = b.data() + i * es;
      double v = 0;
      if (t == DType::kF32) {
        float f;
        std::memcpy(&f, e, 4);
        v = f;
      } else if (t == DType::kF64) {
        std::memcpy(&v, e, 8);
      } else if (t == DType::kF16 || t == DType::kBF16) {
        uint16_t h;
        std::memcpy(&h, e, 2);
        v = t == DType::kF16 ? f16_bits_to_double(h) : bf16_bits_to_double(h);
      } else {
        int64_t x = 0;  // little-endian integers and bools
        std::memcpy(&x, e, es);
        v = static_cast<double>(x);
      }
      ASSERT_EQ(v, 1.0) << "element " << i;
    }
  }
  EXPECT_TRUE(autotune_ones_bytes(DType::kI64, 0).empty());
}

TEST(OperandFill, IntegersAreZero) {
  std::mt19937 rng(3);
  for (const DType t : {DType::kI64, DType::kI32, DType::kBool}) {
    const std::vector<uint8_t> b = autotune_random_bytes(t, 1000, rng);
    ASSERT_EQ(b.size(), 1000 * dtype_size(t));
    for (uint8_t x : b) ASSERT_EQ(x, 0);
  }
}

}  // namespace
}  // namespace kiln::compiler
