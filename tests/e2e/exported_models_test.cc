// GPU: representative exported transformer models (tests/models/exported: GPT-2 from the
// TorchScript exporter, Llama from dynamo, BERT with its padding mask) compiled in fp32, fp16 and
// bf16, run in FULL mode (captured and padded sizes) on their stored inputs, against
// onnxruntime's stored outputs with tests/README.md's end-to-end tolerance — through the same
// conformance runner as `kiln conformance`, which tools/run_gpu.sh runs over the whole corpus.
// Also the launch budget: a GPT-2 layer is at most 7 launches in the artifact the runtime loads.
#include <gtest/gtest.h>

#include "cache/cache_layout.h"
#include "cache/manifest_io.h"
#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "kiln/model.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"
#include "tools/conformance_run.h"

namespace kiln {
namespace {

// One decoder per exporter style (TorchScript eager attention, dynamo), one encoder with a mask.
const char* const kModels[] = {"gpt2_ts17_eager", "llama_dynamo18", "bert_ts17_sdpa"};

struct Case {
  std::string model;
  compiler::Precision precision;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model + "_" + std::string(compiler::precision_name(info.param.precision));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* m : kModels)
    for (auto p :
         {compiler::Precision::kF32, compiler::Precision::kF16, compiler::Precision::kBF16})
      out.push_back({m, p});
  return out;
}

class ExportedModel : public ::testing::TestWithParam<Case> {};

TEST_P(ExportedModel, MatchesOnnxruntime) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  tools::ConformanceOptions opts;
  opts.precision = GetParam().precision;
  opts.mode = CudaGraphMode::kFull;
  testing::TempDir cache;
  const tools::FolderResult r = tools::conformance_run_folder(
      testing::exported_models_dir() / GetParam().model, opts, cache.path());
  EXPECT_EQ(r.verdict, tools::Verdict::kPassed) << r.name << ": " << r.detail;
  EXPECT_EQ(r.compiles, 1);  // both data sets share the batch: one binding
  EXPECT_GE(r.sets.size(), 2u);
  for (const tools::SetResult& s : r.sets) {
    EXPECT_EQ(s.verdict, tools::Verdict::kPassed) << s.set << " (S=" << s.size << "): " << s.detail;
    for (const tools::OutputCheck& c : s.outputs)
      std::printf("[ info     ] %s %s %s (S=%lld) %s\n", r.name.c_str(),
                  std::string(compiler::precision_name(GetParam().precision)).c_str(),
                  s.set.c_str(), static_cast<long long>(s.size), c.summary().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Representative, ExportedModel, ::testing::ValuesIn(cases()), case_name);

// Every compilation level (compilation.level) of each representative model gives onnxruntime's
// outputs in fp32, so the levels agree with each other within twice the tolerance: level 0 is a
// baseline to bisect a wrong answer against.
class CompilationLevel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CompilationLevel, MatchesOnnxruntime) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const auto& [model, level] = GetParam();
  tools::ConformanceOptions opts;
  opts.precision = compiler::Precision::kF32;
  opts.mode = CudaGraphMode::kFull;
  opts.level = level;
  testing::TempDir cache;
  const tools::FolderResult r =
      tools::conformance_run_folder(testing::exported_models_dir() / model, opts, cache.path());
  EXPECT_EQ(r.verdict, tools::Verdict::kPassed) << r.name << " level " << level << ": " << r.detail;
  EXPECT_GE(r.sets.size(), 2u);
  for (const tools::SetResult& s : r.sets)
    std::printf("[ info     ] %s level %d %s (S=%lld): %s\n", r.name.c_str(), level, s.set.c_str(),
                static_cast<long long>(s.size), s.detail.c_str());
}

INSTANTIATE_TEST_SUITE_P(Levels, CompilationLevel,
                         ::testing::Combine(::testing::ValuesIn(std::vector<std::string>(
                                                std::begin(kModels), std::end(kModels))),
                                            ::testing::Values(0, 1, 2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_O" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The artifact's pieces: compute, attention, compute, attention, compute. Attention of layer 0
// (piece 1) plus the rest of layer 0 and the start of layer 1 up to its attention (piece 2) is
// one layer's work: LN, QKV GEMM, attention, O GEMM + residual, LN, up GEMM + GELU, down GEMM +
// residual, with the views around attention absorbed.
TEST(ExportedModelLaunchBudget, Gpt2LayerRunsInAtMostSevenLaunches) {
  const auto dir = testing::exported_models_dir() / "gpt2_ts17_eager";
  for (auto p : {compiler::Precision::kF32, compiler::Precision::kF16}) {
    auto config = compiler::config_load(dir / "kiln.yaml");
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    config->precision = p;
    config->autotune = compiler::AutotuneMode::kOff;
    testing::TempDir cache;
    auto out = compiler::compile_model({dir / "model.onnx", *config, cache.path()});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto manifest = cache::manifest_read(out->artifact_dir / std::string(cache::kManifestFileName));
    ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
    ASSERT_EQ(manifest->pieces_size(), 5);
    // A gated skinny-GEMM kernel and its cuBLASLt step are one launch at any size.
    int launches = 0;
    for (int piece : {1, 2})
      for (const auto& step : manifest->pieces(piece).steps())
        launches += step.has_kernel() && step.kernel().gated() ? 0 : 1;
    EXPECT_LE(launches, 7) << compiler::precision_name(p);
    std::printf("[ info     ] gpt2_ts17_eager %s: %d launches per layer\n",
                std::string(compiler::precision_name(p)).c_str(), launches);
  }
}

}  // namespace
}  // namespace kiln
