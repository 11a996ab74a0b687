// Size → capture size: the padding table every run goes through. Pure: no GPU.
#include "runtime/size_table.h"

#include <gtest/gtest.h>

#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using testing::is_error;

// The bench model's capture sizes: [1, 2, 4, 8] + every 16 up to 512.
std::vector<int64_t> bench_sizes() {
  std::vector<int64_t> s = {1, 2, 4, 8};
  for (int64_t v = 16; v <= 512; v += 16) s.push_back(v);
  return s;
}

TEST(SizeTable, PadsToTheSmallestCapturedSizeAtOrAbove) {
  const std::vector<int64_t> captured = {4, 16, 32};
  const std::pair<int64_t, SizeChoice> table[] = {
      {1, {4, true}},   {3, {4, true}},   {4, {4, true}},    {5, {16, true}},   {16, {16, true}},
      {17, {32, true}}, {32, {32, true}}, {33, {33, false}}, {40, {40, false}}, {64, {64, false}},
  };
  for (const auto& [s, want] : table) {
    auto got = size_choose(captured, 64, s);
    ASSERT_TRUE(got.ok()) << s << ": " << got.status().to_string();
    EXPECT_EQ(got->padded, want.padded) << "size " << s;
    EXPECT_EQ(got->replay, want.replay) << "size " << s;
  }
}

TEST(SizeTable, EveryBenchSize) {
  const auto captured = bench_sizes();
  ASSERT_EQ(captured.size(), 36u);
  for (int64_t s = 1; s <= 512; ++s) {
    auto got = size_choose(captured, 512, s);
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(got->replay);
    EXPECT_GE(got->padded, s);
    const int64_t want = s <= 8 ? (s <= 1 ? 1 : s <= 2 ? 2 : s <= 4 ? 4 : 8) : (s + 15) / 16 * 16;
    EXPECT_EQ(got->padded, want) << "size " << s;
  }
}

TEST(SizeTable, NoCapturesRunsEveryoneEagerly) {
  for (int64_t s : {1, 7, 64}) {
    auto got = size_choose({}, 64, s);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->padded, s);
    EXPECT_FALSE(got->replay);
  }
}

TEST(SizeTable, OutOfRange) {
  EXPECT_TRUE(is_error(size_choose({4}, 64, 0).status(), StatusCode::kInvalidArgument,
                       {"size 0 is outside [1, max_size 64]"}));
  EXPECT_TRUE(is_error(size_choose({4}, 64, 65).status(), StatusCode::kInvalidArgument,
                       {"size 65 is outside [1, max_size 64]"}));
  EXPECT_TRUE(is_error(size_choose({4}, 64, -3).status(), StatusCode::kInvalidArgument, {"-3"}));
}

}  // namespace
}  // namespace kiln::runtime
