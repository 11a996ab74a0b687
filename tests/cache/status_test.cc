#include "cache/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kiln {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::ok_status().ok());
}

TEST(Status, HelpersCarryCodeAndMessage) {
  EXPECT_EQ(invalid_argument("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_found("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(unimplemented("x").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(data_loss("x").code(), StatusCode::kDataLoss);
  EXPECT_EQ(failed_precondition("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(resource_exhausted("x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(internal_error("x").code(), StatusCode::kInternal);
  EXPECT_EQ(io_error("x").code(), StatusCode::kIoError);
  EXPECT_EQ(context_lost("x").code(), StatusCode::kContextLost);
  EXPECT_EQ(context_lost("x").to_string(), "context lost: x");
  Status s = data_loss("weights.bin: size 100 bytes, manifest says 4096");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "weights.bin: size 100 bytes, manifest says 4096");
  EXPECT_EQ(s.to_string(), "data loss: weights.bin: size 100 bytes, manifest says 4096");
}

TEST(Status, CodeNamesAreDistinct) {
  const StatusCode codes[] = {StatusCode::kOk,
                              StatusCode::kInvalidArgument,
                              StatusCode::kNotFound,
                              StatusCode::kUnimplemented,
                              StatusCode::kDataLoss,
                              StatusCode::kFailedPrecondition,
                              StatusCode::kResourceExhausted,
                              StatusCode::kInternal,
                              StatusCode::kIoError,
                              StatusCode::kContextLost};
  for (StatusCode a : codes) {
    for (StatusCode b : codes) {
      if (a != b) {
        EXPECT_STRNE(status_code_name(a), status_code_name(b));
      }
    }
  }
}

TEST(Status, WithContextPrefixesErrorsOnly) {
  EXPECT_EQ(not_found("x").with_context("loading a").message(), "loading a: x");
  EXPECT_EQ(not_found("x").with_context("loading a").code(), StatusCode::kNotFound);
  EXPECT_TRUE(Status::ok_status().with_context("ctx").ok());
}

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("expected > 0, got " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  KILN_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check(int v) {
  KILN_RETURN_IF_ERROR(parse_positive(v).status());
  return Status::ok_status();
}

TEST(Result, ValueOrStatus) {
  Result<int> ok = doubled(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "expected > 0, got -1");
  EXPECT_TRUE(check(1).ok());
  EXPECT_FALSE(check(0).ok());
}

TEST(Result, FromOkStatusIsAnInternalError) {
  Result<int> r = Status::ok_status();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(3);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 3);
}

}  // namespace
}  // namespace kiln
