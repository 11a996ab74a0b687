// compiler/progress.h: counted progress with an ETA. Under the test runner stderr is not a
// terminal, so each step is one plain log line (the in-place bar is for terminals only).
#include "compiler/progress.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "compiler/log.h"

namespace kiln::compiler {
namespace {

TEST(Progress, StatusTextCountsAndEstimates) {
  EXPECT_EQ(Progress::status_text(0, 40, 0.0), "0/40");
  EXPECT_EQ(Progress::status_text(10, 40, 2.0), "10/40  ETA 6 s");  // 0.2 s per item, 30 left
  EXPECT_EQ(Progress::status_text(40, 40, 8.25), "40/40  8.2 s");
}

TEST(Progress, PlainLinesWhenStderrIsNotATerminal) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("autotune kernels", 2);
    p.step("kernel a size 1: best 'x'");
    p.step("kernel a size 8: from the database", /*log_line=*/false);  // counted, not logged
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.rfind("autotune kernels 1/2  ETA ", 0), 0u) << out;
  EXPECT_NE(out.find("s  kernel a size 1: best 'x'\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("from the database"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no in-place drawing off a terminal";
}

TEST(Progress, QuietLogShowsNothing) {
  ::testing::internal::CaptureStderr();
  logger().set_level(spdlog::level::warn);  // kiln -q
  {
    Progress p("NVRTC compile", 1);
    p.step("sm_90");
  }
  logger().set_level(spdlog::level::info);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace kiln::compiler
