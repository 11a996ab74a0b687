// The compiler's log (compiler/log.h): one logger named "kiln", bare lines on stderr, info by
// default; the level decides what shows (the CLI's -v and -q).
#include "compiler/log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <string>

namespace kiln::compiler {
namespace {

TEST(CompilerLog, BareLinesOnStderrAtInfoByDefault) {
  spdlog::logger* const made =
      &logger();  // first: argument order is unspecified (clang: left first)
  EXPECT_EQ(spdlog::get(kLoggerName).get(), made);  // registered under its name
  EXPECT_EQ(logger().level(), spdlog::level::info);
  ::testing::internal::CaptureStderr();
  logger().info("tuning gemm {}/{} '{}'", 1, 3, "fc1");
  logger().debug("not shown at info");
  logger().warn("kiln: autotune: {}", "a warning");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "tuning gemm 1/3 'fc1'\nkiln: autotune: a warning\n");
}

TEST(CompilerLog, LevelSelectsWhatShows) {
  ::testing::internal::CaptureStderr();
  logger().set_level(spdlog::level::warn);  // kiln -q
  logger().info("progress");
  logger().warn("warning");
  logger().set_level(spdlog::level::debug);  // kiln -v
  logger().debug("detail");
  logger().set_level(spdlog::level::info);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "warning\ndetail\n");
}

}  // namespace
}  // namespace kiln::compiler
