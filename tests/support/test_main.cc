// The main of every test executable: GoogleTest's, plus one switch for the GPU machine.
//
// GPU tests skip cleanly without a device ("no CUDA device: ..." — every device skip says so),
// which keeps CI green on machines without one. On the GPU machine the same skip would hide a
// broken driver, so KILN_REQUIRE_GPU=1 turns it into a failure: each test skipped for want of a
// device is named, and the executable exits non-zero.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kNoDevice = "no CUDA device";

class RequireGpuListener : public testing::EmptyTestEventListener {
 public:
  // The name is taken here: inside OnTestPartResult GoogleTest holds the lock that
  // UnitTest::current_test_info() needs.
  void OnTestStart(const testing::TestInfo& test) override {
    current_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.skipped()) return;
    const std::string_view message = result.message() != nullptr ? result.message() : "";
    if (message.find(kNoDevice) == std::string_view::npos) return;
    const std::string name = current_.empty() ? "(outside a test)" : current_;
    std::fprintf(stderr,
                 "[  FAILED  ] %s: skipped for want of a CUDA device (KILN_REQUIRE_GPU=1)\n",
                 name.c_str());
    skipped_.push_back(name);
  }
  void OnTestEnd(const testing::TestInfo&) override { current_.clear(); }
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  std::string current_;
  std::vector<std::string> skipped_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* require = std::getenv("KILN_REQUIRE_GPU");
  RequireGpuListener* listener = nullptr;
  if (require != nullptr && std::string_view(require) == "1") {
    listener = new RequireGpuListener;  // owned by GoogleTest's listener list
    testing::UnitTest::GetInstance()->listeners().Append(listener);
  }
  int rc = RUN_ALL_TESTS();
  if (listener != nullptr && !listener->skipped().empty()) {
    std::fprintf(stderr, "KILN_REQUIRE_GPU=1: %zu test(s) skipped for want of a CUDA device\n",
                 listener->skipped().size());
    if (rc == 0) rc = 1;
  }
  return rc;
}
