#include "compiler/backend/nvrtc_compile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <vector>

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

// A module with its own kernel name, so no other test of this process compiled it before.
NvrtcModule numbered(const std::string& name, const std::string& header_text = "") {
  return {name,
          "#include \"h.cuh\"\nextern \"C\" __global__ void " + name +
              "(float* x) { x[threadIdx.x] *= 2.0f; }\n",
          {{"h.cuh", header_text}}};
}

TEST(NvrtcCompile, RemembersWhatItCompiledBySourceHeadersAndArch) {
  bool remembered = true;
  auto first = nvrtc_compile(numbered("memo_a"), "sm_90", &remembered);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(remembered);
  auto again = nvrtc_compile(numbered("memo_a"), "sm_90", &remembered);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(remembered);
  EXPECT_EQ(*first, *again);
  // Another arch, another header text or another source: compiled anew.
  ASSERT_TRUE(nvrtc_compile(numbered("memo_a"), "sm_80", &remembered).ok());
  EXPECT_FALSE(remembered);
  ASSERT_TRUE(nvrtc_compile(numbered("memo_a", "// changed\n"), "sm_90", &remembered).ok());
  EXPECT_FALSE(remembered);
  ASSERT_TRUE(nvrtc_compile(numbered("memo_b"), "sm_90", &remembered).ok());
  EXPECT_FALSE(remembered);
  // The module's name is only a label: the same text under another name is the same cubin.
  NvrtcModule renamed = numbered("memo_a");
  renamed.name = "other";
  ASSERT_TRUE(nvrtc_compile(renamed, "sm_90", &remembered).ok());
  EXPECT_TRUE(remembered);
}

TEST(NvrtcCompile, FailuresAreNotRemembered) {
  NvrtcModule m{"broken_twice", "extern \"C\" __global__ void k() { not_defined_twice(); }\n", {}};
  for (int i = 0; i < 2; ++i) {
    bool remembered = true;
    auto r = nvrtc_compile(m, "sm_90", &remembered);
    ASSERT_FALSE(r.ok());
    EXPECT_FALSE(remembered);
    std::smatch match;
    const std::string msg = r.status().message();
    if (std::regex_search(msg, match, std::regex("source saved to (\\S+)")))
      std::filesystem::remove(match[1].str());
  }
}

TEST(NvrtcCompile, EachKeepsTheOrderAndCountsWhatItCompiled) {
  std::vector<NvrtcModule> modules = {numbered("each_a"),
                                      numbered("each_b"),
                                      {"each_broken", "not c++ at all\n", {}},
                                      numbered("each_c")};
  ASSERT_TRUE(nvrtc_compile(modules[1], "sm_90").ok());  // remembered below
  NvrtcCounts counts;
  auto out = nvrtc_compile_each(modules, "sm_90", &counts, 2);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].ok() && out[1].ok() && out[3].ok());
  ASSERT_FALSE(out[2].ok());
  const std::string msg = out[2].status().message();
  EXPECT_NE(msg.find("each_broken"), std::string::npos) << msg;
  std::smatch match;
  if (std::regex_search(msg, match, std::regex("source saved to (\\S+)")))
    std::filesystem::remove(match[1].str());
  EXPECT_EQ(counts.compiled, 3);  // the failed one counts as compiled: NVRTC ran
  EXPECT_EQ(counts.remembered, 1);
  // Each result is its own module's cubin: asked for alone (from memory now), the same bytes.
  for (size_t i : {0u, 1u, 3u}) {
    auto alone = nvrtc_compile(modules[i], "sm_90");
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(*alone, *out[i]) << modules[i].name;
  }
}

TEST(NvrtcCompile, VersionIsMajorMinor) {
  EXPECT_TRUE(std::regex_match(nvrtc_version(), std::regex("[0-9]+\\.[0-9]+")));
}

}  // namespace
}  // namespace kiln::compiler
