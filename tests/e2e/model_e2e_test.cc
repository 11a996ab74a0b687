// GPU: the bundled example model, end to end — compile, load, capture, run every mode at many
// sizes, against the CPU reference and against the numpy-computed backend-test data sets.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_compare.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "tests/support/reference_check.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"
#include "tools/tensor_io.h"

namespace kiln {
namespace {

std::filesystem::path model_dir() { return testing::example_model_dir(); }

class MlpSoftmax : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    auto config = compiler::config_load(model_dir() / "kiln.yaml");
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    config_ = *config;
    auto out = compiler::compile_model({model_dir() / "model.onnx", config_, tmp_.path()});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto model = Model::load(tmp_.path());  // a cache root with one artifact
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = *model;
    auto ref = compiler::import_canonical(model_dir() / "model.onnx", config_);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    reference_ = std::move(*ref);
  }

  testing::TempDir tmp_;
  compiler::CompileConfig config_;
  std::shared_ptr<Model> model_;
  ir::Graph reference_;
};

TEST_F(MlpSoftmax, EveryModeEverySizeMatchesReference) {
  std::mt19937 rng(42);
  const auto tol = compiler::tolerance_end_to_end(config_.precision);
  for (auto mode : {CudaGraphMode::kNone, CudaGraphMode::kPiecewise, CudaGraphMode::kFull,
                    CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kFullAndPiecewise}) {
    SCOPED_TRACE(cuda_graph_mode_name(mode));
    auto ex = Executor::create(model_, ExecutorOptions{mode, false});
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    for (int64_t s : {1, 2, 3, 5, 8, 13, 31, 33, 64, 7})
      EXPECT_TRUE(testing::run_matches_reference(**ex, *model_, reference_, s, tol, rng));
  }
}

TEST_F(MlpSoftmax, FullModeReplaysEveryCapturedSize) {
  auto ex = Executor::create(model_);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ((*ex)->mode(), CudaGraphMode::kFull);
  EXPECT_EQ((*ex)->captured_sizes(), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  std::mt19937 rng(1);
  for (int64_t s = 1; s <= 64; ++s)
    ASSERT_TRUE(testing::run_matches_reference(
        **ex, *model_, reference_, s, compiler::tolerance_end_to_end(config_.precision), rng));
  EXPECT_EQ((*ex)->stats().graph_replays, 64);
  EXPECT_EQ((*ex)->stats().eager_runs, 0);
}

// The same inputs through FULL, PIECEWISE, debug FULL, and FULL with device-pointer inputs:
// FULL and PIECEWISE run the same kernels and GEMM algorithms at the same padded size, so their
// outputs are identical to the bit; so are debug mode's and the device inputs'.
TEST_F(MlpSoftmax, FullPiecewiseDebugAndDeviceInputsAreBitwiseIdentical) {
  auto full = Executor::create(model_, ExecutorOptions{CudaGraphMode::kFull});
  auto piecewise = Executor::create(model_, ExecutorOptions{CudaGraphMode::kPiecewise});
  auto debug = Executor::create(model_, ExecutorOptions{CudaGraphMode::kFull, true});
  ASSERT_TRUE(full.ok() && piecewise.ok() && debug.ok());
  std::mt19937 rng(11);
  for (int64_t s : {1, 3, 8, 13, 33, 64}) {
    const Tensor x = tools::tensor_random(model_->inputs()[0], s, rng);
    auto a = (*full)->run({x});
    auto b = (*piecewise)->run({x});
    auto d = (*debug)->run({x});
    ASSERT_TRUE(a.ok() && b.ok() && d.ok()) << "size " << s;
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, x.data.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev, x.data.data(), x.data.size(), cudaMemcpyHostToDevice), cudaSuccess);
    // From pageable memory cudaMemcpy may return before the DMA lands, and the executor's stream
    // does not wait for the legacy stream (seen under load on the H100: stale inputs).
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto v =
        (*full)->run(std::vector<TensorView>{{x.name, x.dtype, x.shape, dev, Memory::kDevice}});
    (void)cudaFree(dev);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    for (size_t i = 0; i < a->size(); ++i) {
      const std::string what = (*a)[i].name + " at size " + std::to_string(s);
      EXPECT_TRUE((*a)[i].data == (*b)[i].data) << what << ": FULL vs PIECEWISE";
      EXPECT_TRUE((*a)[i].data == (*d)[i].data) << what << ": FULL vs debug";
      EXPECT_TRUE((*a)[i].data == (*v)[i].data) << what << ": host vs device inputs";
    }
  }
}

TEST_F(MlpSoftmax, PaddingRowsDoNotLeakAfterALargerRun) {
  auto ex = Executor::create(model_, ExecutorOptions{CudaGraphMode::kFull, false});
  ASSERT_TRUE(ex.ok());
  // Fill every row of the size-64 buffers with huge values, then run size 5 (padded to 8).
  Tensor big = Tensor::zeros("x", DType::kF32, {64, 64});
  for (int64_t i = 0; i < big.numel(); ++i) big.as<float>()[i] = 1e30f;
  ASSERT_TRUE((*ex)->run({big}).ok());
  std::mt19937 rng(5);
  EXPECT_TRUE(testing::run_matches_reference(
      **ex, *model_, reference_, 5, compiler::tolerance_end_to_end(config_.precision), rng));
}

TEST_F(MlpSoftmax, BackendTestDataSets) {
  auto ex = Executor::create(model_);
  ASSERT_TRUE(ex.ok());
  int sets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir())) {
    if (entry.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
    ++sets;
    auto x = tools::tensor_read_pb(entry.path() / "input_0.pb");
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    auto outs = (*ex)->run({*x});
    ASSERT_TRUE(outs.ok()) << outs.status().to_string();
    for (int j = 0; j < 2; ++j) {
      auto want = tools::tensor_read_pb(entry.path() / ("output_" + std::to_string(j) + ".pb"));
      ASSERT_TRUE(want.ok());
      const Tensor* got = nullptr;
      for (const Tensor& o : *outs)
        if (o.name == want->name) got = &o;
      ASSERT_NE(got, nullptr) << want->name;
      ASSERT_EQ(got->shape, want->shape);
      std::vector<double> ref(want->as<float>(), want->as<float>() + want->numel());
      auto cmp = compiler::compare_with_reference(
          got->as<float>(), ref, compiler::tolerance_end_to_end(config_.precision));
      EXPECT_TRUE(cmp.ok()) << entry.path() << " " << want->name << ": " << cmp.summary();
    }
  }
  EXPECT_GE(sets, 2);
}

TEST_F(MlpSoftmax, NanInputPropagatesLikeTheReference) {
  auto ex = Executor::create(model_);
  ASSERT_TRUE(ex.ok());
  std::mt19937 rng(3);
  Tensor x = tools::tensor_random(model_->inputs()[0], 3, rng);
  x.as<float>()[64 + 5] = std::nanf("");  // row 1
  auto outs = (*ex)->run({x});
  ASSERT_TRUE(outs.ok());
  for (const Tensor& o : *outs)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 32; ++c)
        EXPECT_EQ(std::isnan(o.as<float>()[r * 32 + c]), r == 1) << o.name << " row " << r;
}

TEST_F(MlpSoftmax, BadInputsAreClearErrors) {
  auto ex = Executor::create(model_);
  ASSERT_TRUE(ex.ok());
  auto err = [&](std::vector<Tensor> in) {
    auto r = (*ex)->run(in);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err({Tensor::zeros("nope", DType::kF32, {2, 64})}).find("nope"), std::string::npos);
  EXPECT_NE(err({Tensor::zeros("x", DType::kF32, {2, 63})}).find("x"), std::string::npos);
  EXPECT_NE(err({Tensor::zeros("x", DType::kF32, {0, 64})}), "ok");
  EXPECT_NE(err({Tensor::zeros("x", DType::kF32, {65, 64})}).find("64"), std::string::npos);
  EXPECT_NE(err({Tensor::zeros("x", DType::kI64, {2, 64})}), "ok");
  EXPECT_NE(err({Tensor::zeros("x", DType::kF32, {2, 64, 1})}), "ok");
}

}  // namespace
}  // namespace kiln
