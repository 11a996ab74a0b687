// GPU: encoders exported without an attention_mask input (tests/models/exported/*_nomask), size =
// sequence length, compiled in fp32 with the captured sizes of their kiln.yaml. Their attention
// keys run over the size, so every padded request relies on the device-resident real size: the
// stored inputs (seq 5 and 11) replay the graphs captured at 8 and 16, and must match the stored
// onnxruntime outputs within tests/README.md's fp32 end-to-end tolerance — in FULL (one graph
// per size), PIECEWISE (attention launched eagerly between graphs) and NONE, with the padding
// zeroed or poisoned with NaN (debug), and with the sizes alternating, so a real size that was
// not rewritten before a replay would show.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

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

namespace fs = std::filesystem;

// A stored test data set: its inputs (input_<i>.pb) and onnxruntime's outputs by name.
struct DataSet {
  std::string label;
  std::vector<Tensor> inputs;
  std::vector<std::pair<std::string, compiler::RefTensor>> outputs;
};

std::vector<DataSet> data_sets(const fs::path& dir) {
  std::vector<DataSet> sets;
  for (int n = 0; fs::exists(dir / ("test_data_set_" + std::to_string(n))); ++n) {
    const fs::path d = dir / ("test_data_set_" + std::to_string(n));
    DataSet set{d.filename().string(), {}, {}};
    for (int i = 0; fs::exists(d / ("input_" + std::to_string(i) + ".pb")); ++i) {
      auto t = tools::tensor_read_pb(d / ("input_" + std::to_string(i) + ".pb"));
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      if (t.ok()) set.inputs.push_back(std::move(*t));
    }
    for (int j = 0; fs::exists(d / ("output_" + std::to_string(j) + ".pb")); ++j) {
      std::string name;
      auto want = testing::ref_read_pb(d / ("output_" + std::to_string(j) + ".pb"), &name);
      EXPECT_TRUE(want.ok()) << want.status().to_string();
      if (want.ok()) set.outputs.emplace_back(name, std::move(*want));
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

// Runs `set` and compares every output with onnxruntime's.
void expect_matches(Executor& ex, const DataSet& set, const std::string& what) {
  SCOPED_TRACE(what + ", " + set.label);
  auto got = ex.run(set.inputs);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const auto tol = compiler::tolerance_end_to_end(compiler::Precision::kF32);
  for (const auto& [name, want] : set.outputs) {
    const Tensor* out = nullptr;
    for (const Tensor& t : *got)
      if (t.name == name) out = &t;
    ASSERT_NE(out, nullptr) << "no output '" << name << "'";
    ASSERT_EQ(out->shape, want.dims) << name;
    const std::vector<double> g = tools::tensor_to_ref(*out).data;
    const std::vector<float> gf(g.begin(), g.end());
    const auto cmp = compiler::compare_with_reference(gf.data(), want.data, tol);
    EXPECT_TRUE(cmp.ok()) << "output '" << name << "': " << cmp.summary();
  }
}

class NoMaskEncoder : public ::testing::TestWithParam<std::string> {};

TEST_P(NoMaskEncoder, PaddedRunsMatchOnnxruntime) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const fs::path dir = testing::exported_models_dir() / GetParam();
  auto config = compiler::config_load(dir / "kiln.yaml");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  config->precision = compiler::Precision::kF32;
  config->autotune = compiler::AutotuneMode::kOff;
  testing::TempDir tmp;
  auto compiled = compiler::compile_model({dir / "model.onnx", *config, tmp.path()});
  ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  auto model = Model::load(compiled->artifact_dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::vector<DataSet> sets = data_sets(dir);
  ASSERT_EQ(sets.size(), 2u);  // seq 5 and 11: padded to the captured 8 and 16

  struct Run {
    const char* what;
    CudaGraphMode mode;
    bool debug;
    int64_t replays;  // graph replays expected for the 4 runs below
  };
  const Run runs[] = {
      {"FULL", CudaGraphMode::kFull, false, 4},
      {"FULL, padding poisoned", CudaGraphMode::kFull, true, 4},
      {"PIECEWISE", CudaGraphMode::kPiecewise, false, 4},
      {"NONE", CudaGraphMode::kNone, true, 0},
  };
  for (const Run& r : runs) {
    auto ex = Executor::create(*model, ExecutorOptions{r.mode, r.debug});
    ASSERT_TRUE(ex.ok()) << r.what << ": " << ex.status().to_string();
    // 5, 11, 5, 11: each replay follows one at the other size.
    for (int i = 0; i < 4; ++i) expect_matches(**ex, sets[i % 2], r.what);
    EXPECT_EQ((*ex)->stats().graph_replays, r.replays) << r.what;
    EXPECT_EQ((*ex)->stats().eager_runs, 4 - r.replays) << r.what;
  }
}

INSTANTIATE_TEST_SUITE_P(Exported, NoMaskEncoder,
                         ::testing::Values("bert_ts17_eager_nomask", "distilbert_dynamo23_nomask"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace kiln
