#include "cache/dtype.h"

#include <gtest/gtest.h>

#include "schemas/manifest.pb.h"

namespace kiln {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_size(DType::kUnspecified), 0u);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kUnspecified), "unspecified");
}

TEST(DType, NameRoundTripForEverySchemaValue) {
  for (int raw = schema::DType_MIN; raw <= schema::DType_MAX; ++raw) {
    if (raw == schema::DTYPE_UNSPECIFIED) continue;
    ASSERT_TRUE(schema::DType_IsValid(raw));
    EXPECT_TRUE(dtype_valid(raw)) << raw;
    const auto t = static_cast<DType>(raw);
    EXPECT_GT(dtype_size(t), 0u) << raw;
    auto back = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(back.has_value()) << dtype_name(t);
    EXPECT_EQ(*back, t);
  }
}

TEST(DType, RejectsUnknown) {
  EXPECT_FALSE(dtype_valid(0));
  EXPECT_FALSE(dtype_valid(-1));
  EXPECT_FALSE(dtype_valid(schema::DType_MAX + 1));
  EXPECT_FALSE(dtype_from_name("float32").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_FALSE(dtype_from_name("unspecified").has_value());
}

}  // namespace
}  // namespace kiln
