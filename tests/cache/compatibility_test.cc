#include "cache/compatibility.h"

#include <gtest/gtest.h>

#include "cache/manifest_io.h"

namespace kiln::cache {
namespace {

// One module with cubins for `archs`, one kernel in it, built with CUDA 13.0.
schema::Manifest manifest_for(std::initializer_list<const char*> archs) {
  schema::Manifest m;
  m.set_format_version(kFormatVersion);
  m.set_key("k");
  schema::Module* mod = m.add_modules();
  for (const char* a : archs) {
    auto* c = mod->add_cubins();
    c->set_arch(a);
    c->set_path(std::string("kernels/module0.") + a + ".cubin");
  }
  m.add_kernels()->set_symbol("k0");
  m.mutable_factors()->set_nvrtc_version("13.0");
  m.mutable_factors()->set_cuda_runtime_version(13000);
  return m;
}

bool contains(const Status& s, const std::string& needle) {
  return s.message().find(needle) != std::string::npos;
}

TEST(Compatibility, ExactArchAndNewEnoughDriver) {
  EXPECT_TRUE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_90", 13000}).ok());
  EXPECT_TRUE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_90", 13020}).ok());
  EXPECT_TRUE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_90", 14000}).ok());
}

TEST(Compatibility, WrongArchNamesBoth) {
  Status s = artifact_check_compatible(manifest_for({"sm_90"}), {"sm_80", 13000});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s, "built for sm_90, this GPU is sm_80")) << s.message();
  // An sm_90 cubin does not run on sm_89 or sm_100 either: the SM must match exactly.
  EXPECT_FALSE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_89", 13000}).ok());
  EXPECT_FALSE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_100", 13000}).ok());
  EXPECT_FALSE(artifact_check_compatible(manifest_for({"sm_90a"}), {"sm_9", 13000}).ok());
}

TEST(Compatibility, SeveralArchsPickTheRightCubin) {
  const schema::Manifest m = manifest_for({"sm_80", "sm_90a", "sm_100"});
  for (const auto& [device, want] : std::vector<std::pair<std::string, std::string>>{
           {"sm_80", "kernels/module0.sm_80.cubin"},
           {"sm_90", "kernels/module0.sm_90a.cubin"},
           {"sm_100", "kernels/module0.sm_100.cubin"}}) {
    EXPECT_TRUE(artifact_check_compatible(m, {device, 13000}).ok()) << device;
    Result<const schema::Module::Cubin*> c = module_cubin_for(m.modules(0), device);
    ASSERT_TRUE(c.ok()) << device;
    EXPECT_EQ((*c)->path(), want);
  }
  Status s = artifact_check_compatible(m, {"sm_86", 13000});
  EXPECT_TRUE(contains(s, "built for sm_80/sm_90a/sm_100, this GPU is sm_86")) << s.message();
  // The exact arch wins over its "a" variant.
  const schema::Manifest both = manifest_for({"sm_90a", "sm_90"});
  EXPECT_EQ(module_cubin_for(both.modules(0), "sm_90").value()->arch(), "sm_90");
}

TEST(Compatibility, OldDriverSaysUpdate) {
  Status s = artifact_check_compatible(manifest_for({"sm_90"}), {"sm_90", 12040});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      contains(s, "built with CUDA 13.0; this driver supports CUDA 12.4: update the driver"))
      << s.message();
  EXPECT_FALSE(artifact_check_compatible(manifest_for({"sm_90"}), {"sm_90", 0}).ok());
}

TEST(Compatibility, RuntimeVersionIsTheFallbackForOldManifests) {
  schema::Manifest m = manifest_for({"sm_90"});
  m.mutable_factors()->clear_nvrtc_version();
  m.mutable_factors()->set_cuda_runtime_version(12080);
  EXPECT_TRUE(artifact_check_compatible(m, {"sm_90", 12040}).ok());
  EXPECT_FALSE(artifact_check_compatible(m, {"sm_90", 11080}).ok());
}

TEST(Compatibility, ModulesWithoutKernelsNeedNoCubin) {
  schema::Manifest m = manifest_for({"sm_90"});
  m.clear_kernels();  // e.g. a GEMM-only model: cuBLASLt runs anywhere
  EXPECT_TRUE(artifact_check_compatible(m, {"sm_80", 12000}).ok());
}

TEST(Compatibility, FormatVersionMustMatch) {
  schema::Manifest m = manifest_for({"sm_90"});
  m.set_format_version(kFormatVersion + 1);
  Status s = artifact_check_compatible(m, {"sm_90", 13000});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s, "format " + std::to_string(kFormatVersion + 1))) << s.message();
}

TEST(Compatibility, KernelInAMissingModuleIsDataLoss) {
  schema::Manifest m = manifest_for({"sm_90"});
  m.mutable_kernels(0)->set_module(3);
  EXPECT_EQ(artifact_check_compatible(m, {"sm_90", 13000}).code(), StatusCode::kDataLoss);
}

TEST(Compatibility, EmptyDeviceArchIsRejected) {
  EXPECT_EQ(artifact_check_compatible(manifest_for({"sm_90"}), {"", 13000}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::cache
