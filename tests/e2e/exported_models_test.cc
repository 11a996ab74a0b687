// GPU: the exported transformer models (tests/models/exported: GPT-2, BERT, Llama from four
// exporters) compiled in fp32, fp16 and bf16, run in FULL mode (captured and padded sizes) on
// their stored inputs, against onnxruntime's stored outputs with tests/README.md's end-to-end
// tolerance. Also the launch budget: a GPT-2 layer runs in at most 9 launches.
#include <gtest/gtest.h>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_compare.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"
#include "tools/tensor_io.h"

namespace kiln {
namespace {

struct Case {
  std::string model;
  compiler::Precision precision;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model + "_" + std::string(compiler::precision_name(info.param.precision));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& m : testing::model_names(testing::exported_models_dir()))
    for (auto p : {compiler::Precision::kF32, compiler::Precision::kF16, compiler::Precision::kBF16})
      out.push_back({m, p});
  return out;
}

class ExportedModel : public ::testing::TestWithParam<Case> {};

TEST_P(ExportedModel, MatchesOnnxruntime) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const auto dir = testing::exported_models_dir() / GetParam().model;
  auto config = compiler::config_load(dir / "kiln.yaml");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  config->precision = GetParam().precision;
  config->autotune = compiler::AutotuneMode::kOff;  // numerics here; tuning has its own test
  testing::TempDir tmp;
  auto out = compiler::compile_model({dir / "model.onnx", *config, tmp.path()});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto model = Model::load(out->artifact_dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto ex = Executor::create(*model, ExecutorOptions{CudaGraphMode::kFull});
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const auto tol = compiler::tolerance_end_to_end(GetParam().precision);

  int sets = 0;
  for (int set = 0;; ++set) {
    const auto data = dir / ("test_data_set_" + std::to_string(set));
    if (!std::filesystem::exists(data)) break;
    ++sets;
    std::vector<Tensor> inputs;
    for (int i = 0; std::filesystem::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i) {
      auto t = tools::tensor_read_pb(data / ("input_" + std::to_string(i) + ".pb"));
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      inputs.push_back(std::move(*t));
    }
    auto got = (*ex)->run(inputs);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (size_t j = 0; j < got->size(); ++j) {
      std::string name;
      auto want = testing::ref_read_pb(data / ("output_" + std::to_string(j) + ".pb"), &name);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      const Tensor* o = nullptr;
      for (const Tensor& t : *got)
        if (t.name == name) o = &t;
      ASSERT_NE(o, nullptr) << "no output '" << name << "'";
      EXPECT_EQ(o->shape, want->dims) << name;
      const std::vector<double> g = tools::tensor_to_ref(*o).data;
      const std::vector<float> gf(g.begin(), g.end());
      const auto cmp = compiler::compare_with_reference(gf.data(), want->data, tol);
      EXPECT_TRUE(cmp.ok()) << "set " << set << " output '" << name << "': " << cmp.summary();
      std::printf("[ info     ] %s %s set %d '%s': %s\n", GetParam().model.c_str(),
                  std::string(compiler::precision_name(GetParam().precision)).c_str(), set,
                  name.c_str(), cmp.summary().c_str());
    }
  }
  EXPECT_GE(sets, 1);
}

INSTANTIATE_TEST_SUITE_P(All, ExportedModel, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace kiln
