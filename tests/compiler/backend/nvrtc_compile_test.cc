#include "compiler/backend/nvrtc_compile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

namespace kiln::compiler {
namespace {

TEST(NvrtcCompile, CompilesForEachTarget) {
  NvrtcModule m{
      "tiny", "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n", {}};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    EXPECT_EQ(std::string(cubin->begin(), cubin->begin() + 4),
              "\x7f"
              "ELF");
  }
}

TEST(NvrtcCompile, FailureCarriesLogAndSavedSource) {
  NvrtcModule m{"broken", "extern \"C\" __global__ void k() { this_is_not_defined(); }\n", {}};
  auto r = nvrtc_compile(m, "sm_90");
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("this_is_not_defined"), std::string::npos) << msg;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(msg, match, std::regex("source saved to (\\S+)"))) << msg;
  EXPECT_TRUE(std::filesystem::exists(match[1].str())) << match[1];
  std::filesystem::remove(match[1].str());
}

TEST(NvrtcCompile, UnknownArchIsAnError) {
  NvrtcModule m{"tiny", "extern \"C\" __global__ void k() {}\n", {}};
  EXPECT_FALSE(nvrtc_compile(m, "sm_1").ok());
}

TEST(NvrtcCompile, VersionIsMajorMinor) {
  EXPECT_TRUE(std::regex_match(nvrtc_version(), std::regex("[0-9]+\\.[0-9]+")));
}

}  // namespace
}  // namespace kiln::compiler
