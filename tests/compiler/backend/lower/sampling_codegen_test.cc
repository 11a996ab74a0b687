// The sampling kernel's codegen (compiler/backend/lower/sampling_codegen.h): parameters, launch
// geometry, refusals, and NVRTC for sm_80 and sm_90 in every logit dtype, with and without the
// log-probability output, from one token to a 256k vocabulary. No GPU needed.
#include "compiler/backend/lower/sampling_codegen.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"

namespace kiln::compiler {
namespace {

TEST(SamplingCodegen, ParamsAndGeometry) {
  const SamplingLaunch l = codegen_sampling({DType::kBF16, 128256, 64, false});
  // The signature: one row of logits (128256 bf16) read, the runtime's nine arguments, then S.
  EXPECT_EQ(l.def.symbol, "kiln_sample_bf16_v128256_r64__Krx0p256512lrrrrrrwl");
  EXPECT_EQ(l.block, 1024u);
  EXPECT_EQ(l.def.max_threads, 1024u);
  EXPECT_EQ(l.grid, 64);
  ASSERT_EQ(l.def.params.size(), 9u);
  EXPECT_EQ(l.def.params[0], "const kiln::bf16* __restrict__ logits");
  EXPECT_EQ(l.def.params[8], "int* __restrict__ tokens");
  EXPECT_NE(l.def.body.find("kiln::sample_rows<kiln::bf16, 128256, 1024, false>"),
            std::string::npos)
      << l.def.body;

  const SamplingLaunch lp = codegen_sampling({DType::kF32, 7, 1, true});
  EXPECT_EQ(lp.def.symbol, "kiln_sample_f32_v7_r1_lp__Krx0p28lrrrrrrwwl");
  EXPECT_EQ(lp.block, 32u);
  ASSERT_EQ(lp.def.params.size(), 10u);
  EXPECT_EQ(lp.def.params[9], "float* __restrict__ logprobs");
}

TEST(SamplingCodegen, BlockGrowsWithTheVocabulary) {
  EXPECT_EQ(sampling_block(1), 32u);
  EXPECT_EQ(sampling_block(256), 32u);
  EXPECT_EQ(sampling_block(2048), 256u);
  EXPECT_EQ(sampling_block(50257), 1024u);
  EXPECT_EQ(sampling_block(262144), 1024u);
}

TEST(SamplingCodegen, Refusals) {
  std::string why;
  EXPECT_TRUE(sampling_supported({DType::kF16, 262144, 64, true}, &why)) << why;
  EXPECT_FALSE(sampling_supported({DType::kI32, 100, 1, false}, &why));
  EXPECT_NE(why.find("i32"), std::string::npos) << why;
  EXPECT_FALSE(sampling_supported({DType::kF32, 0, 1, false}, &why));
  EXPECT_FALSE(sampling_supported({DType::kF32, (int64_t{1} << 24) + 1, 1, false}, &why));
  EXPECT_FALSE(sampling_supported({DType::kF32, 10, 0, false}, &why));
}

TEST(SamplingCodegen, Deterministic) {
  const SamplingKernel k{DType::kF16, 50257, 8, true};
  EXPECT_EQ(codegen_sampling(k).def.body, codegen_sampling(k).def.body);
}

TEST(SamplingCodegen, EveryDtypeCompilesWithNvrtc) {
  std::vector<KernelDef> kernels;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t vocab : {1, 7, 50257, 128256, 262144})
      for (bool lp : {false, true}) kernels.push_back(codegen_sampling({dt, vocab, 64, lp}).def);
  NvrtcModule m{"sampling_codegen_test", codegen_module_source(kernels, {}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::compiler
