// The runtime end to end on a GPU: a real artifact (NVRTC cubin, weights, GEMM + kernel steps,
// an attention piece) built by hand, run in every graph mode at many sizes against a float64
// CPU reference. Skips cleanly without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/executor.h"
#include "runtime/log.h"
#include "tests/runtime/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/runtime/test_artifact.h"

namespace kiln {
namespace {

using runtime::testing::is_error;
using runtime::testing::random_floats;
using kiln::testing::TempDir;
using runtime::testing::TestArtifact;
using runtime::testing::TestModelSpec;

struct Shared {
  std::string skip;   // why the suite skips (no device)
  std::string error;  // why the suite cannot run (a setup failure: the tests fail)
  std::unique_ptr<TempDir> tmp;
  TestArtifact art;
  std::shared_ptr<Model> model;
};

Shared& shared() {
  static Shared s;
  return s;
}

struct Inputs {
  int64_t s = 0;
  std::vector<float> x, y;
  std::vector<Tensor> tensors;
};

Tensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                  const std::vector<float>& v) {
  Tensor t = Tensor::zeros(name, DType::kF32, std::move(shape));
  std::memcpy(t.data.data(), v.data(), v.size() * sizeof(float));
  return t;
}

Inputs make_inputs(int64_t s, uint32_t seed, float scale = 1.0f) {
  const TestModelSpec& spec = shared().art.spec;
  Inputs in;
  in.s = s;
  in.x = random_floats(static_cast<size_t>(s * spec.k), seed, -scale, scale);
  in.y = random_floats(static_cast<size_t>(spec.n * s), seed + 1000, -scale, scale);
  in.tensors = {f32_tensor("x", {s, spec.k}, in.x), f32_tensor("y", {spec.n, s}, in.y)};
  return in;
}

// GEMM tolerance for fp32 (TESTING.md): rtol 1e-5, atol 1e-5 * max(1, K/2048).
::testing::AssertionResult matches(const std::vector<Tensor>& out, const Inputs& in) {
  const TestModelSpec& spec = shared().art.spec;
  const int64_t s = in.s, n = spec.n;
  if (out.size() != 2) return ::testing::AssertionFailure() << out.size() << " outputs";
  const std::vector<int64_t> z_shape = {s, n}, zt_shape = {n, s};
  if (out[0].name != "z" || out[0].shape != z_shape || out[1].name != "zt" ||
      out[1].shape != zt_shape)
    return ::testing::AssertionFailure() << "output names/shapes differ at size " << s;
  std::vector<double> z, zt;
  runtime::testing::test_reference(spec, shared().art.weights, in.x, in.y, s, &z, &zt);
  const double rtol = 1e-5, atol = 1e-5 * std::max(1.0, static_cast<double>(spec.k) / 2048.0);
  const std::vector<double>* want[] = {&z, &zt};
  for (int o = 0; o < 2; ++o) {
    if (out[o].data.size() != want[o]->size() * sizeof(float))
      return ::testing::AssertionFailure()
             << out[o].name << " has " << out[o].data.size() << " bytes";
    const float* got = out[o].as<float>();
    for (size_t i = 0; i < want[o]->size(); ++i) {
      const double b = (*want[o])[i];
      if (!std::isfinite(got[i]) || std::abs(got[i] - b) > atol + rtol * std::abs(b))
        return ::testing::AssertionFailure() << out[o].name << "[" << i << "] = " << got[i]
                                             << ", expected " << b << " (size " << s << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

class ExecutorGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Shared& s = shared();
    std::string why;
    if (!cuda_device_available(&why)) {
      s.skip = "no CUDA device: " + why;
      return;
    }
    auto arch = runtime::device_arch(0);
    if (!arch.ok()) {
      s.error = arch.status().to_string();
      return;
    }
    s.tmp = std::make_unique<TempDir>();
    TestModelSpec spec;
    spec.arch = *arch;
    auto art = runtime::testing::test_artifact_build(s.tmp->path(), spec);
    if (!art.ok()) {
      s.error = art.status().to_string();
      return;
    }
    s.art = *art;
    auto model = Model::load(s.art.dir);
    if (!model.ok()) {
      s.error = model.status().to_string();
      return;
    }
    s.model = *model;
  }
  static void TearDownTestSuite() {
    shared().model.reset();
    shared().tmp.reset();
  }
  void SetUp() override {
    if (!shared().skip.empty()) GTEST_SKIP() << shared().skip;
    ASSERT_TRUE(shared().error.empty()) << shared().error;
  }
  std::unique_ptr<Executor> make(std::optional<CudaGraphMode> mode, bool debug = false) {
    ExecutorOptions o;
    o.mode = mode;
    o.debug = debug;
    auto ex = Executor::create(shared().model, o);
    EXPECT_TRUE(ex.ok()) << ex.status().to_string();
    return ex.ok() ? std::move(*ex) : nullptr;
  }
};

// Collects runtime log lines while alive.
struct LogCapture {
  std::vector<std::string> lines;
  runtime::LogSink previous;
  LogCapture() {
    previous = runtime::log_set_sink([this](std::string_view l) { lines.emplace_back(l); });
  }
  ~LogCapture() { runtime::log_set_sink(previous); }
  bool has(const std::string& needle) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(needle) != std::string::npos; });
  }
};

class ExecutorModes : public ExecutorGpu, public ::testing::WithParamInterface<CudaGraphMode> {};

TEST_P(ExecutorModes, MatchesReferenceAtEverySize) {
  LogCapture log;
  auto ex = make(GetParam());
  ASSERT_NE(ex, nullptr);
  CudaGraphMode effective = GetParam();
  if (effective == CudaGraphMode::kFullAndPiecewise) effective = CudaGraphMode::kPiecewise;
  if (effective == CudaGraphMode::kFullDecodeOnly) effective = CudaGraphMode::kNone;
  EXPECT_EQ(ex->mode(), effective);
  if (effective != GetParam()) {
    EXPECT_TRUE(log.has(cuda_graph_mode_name(GetParam())));
  }
  const bool graphs = effective != CudaGraphMode::kNone;
  const std::vector<int64_t> want_captured =
      graphs ? std::vector<int64_t>{4, 16, 32} : std::vector<int64_t>{};
  EXPECT_EQ(ex->captured_sizes(), want_captured);

  int64_t replays = 0, eager = 0;
  uint32_t seed = 1;
  for (int64_t s : {1, 3, 4, 16, 32, 64, 40, 17, 5, 33}) {
    Inputs in = make_inputs(s, seed++);
    auto out = ex->run(in.tensors);
    ASSERT_TRUE(out.ok()) << "size " << s << ": " << out.status().to_string();
    EXPECT_TRUE(matches(*out, in));
    (graphs && s <= 32 ? replays : eager) += 1;
  }
  EXPECT_EQ(ex->stats().graph_replays, replays);
  EXPECT_EQ(ex->stats().eager_runs, eager);
  if (graphs) {
    EXPECT_TRUE(log.has("size 64 > largest captured size 32: running eagerly"));
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, ExecutorModes,
                         ::testing::Values(CudaGraphMode::kNone, CudaGraphMode::kPiecewise,
                                           CudaGraphMode::kFull, CudaGraphMode::kFullAndPiecewise,
                                           CudaGraphMode::kFullDecodeOnly),
                         [](const auto& info) {
                           return std::string(cuda_graph_mode_name(info.param));
                         });

TEST_F(ExecutorGpu, DefaultModeIsTheArtifacts) {
  auto ex = make(std::nullopt);
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->mode(), CudaGraphMode::kFull);
}

TEST_F(ExecutorGpu, DebugPoisonStillMatches) {
  auto ex = make(CudaGraphMode::kPiecewise, /*debug=*/true);
  ASSERT_NE(ex, nullptr);
  uint32_t seed = 50;
  for (int64_t s : {3, 16, 20, 50}) {
    Inputs in = make_inputs(s, seed++);
    auto out = ex->run(in.tensors);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(matches(*out, in));
  }
}

TEST_F(ExecutorGpu, PaddingRowsDoNotLeak) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  const std::pair<int64_t, int64_t> pairs[] = {{60, 5}, {30, 17}, {32, 1}};
  uint32_t seed = 70;
  for (const auto& [big, small] : pairs) {
    Inputs first = make_inputs(big, seed++, 1000.0f);  // leaves large values in the arena
    ASSERT_TRUE(ex->run(first.tensors).ok());
    Inputs second = make_inputs(small, seed++);
    auto out = ex->run(second.tensors);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(matches(*out, second)) << "size " << small << " after " << big;
  }
}

TEST_F(ExecutorGpu, BadInputsAreClearErrors) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  const int64_t K = shared().art.spec.k, N = shared().art.spec.n;
  auto with = [&](int64_t sx, int64_t kx, int64_t sy) {
    return std::vector<Tensor>{Tensor::zeros("x", DType::kF32, {sx, kx}),
                               Tensor::zeros("y", DType::kF32, {N, sy})};
  };
  auto renamed = with(5, K, 5);
  renamed[0].name = "q";
  EXPECT_TRUE(is_error(ex->run(renamed).status(), StatusCode::kInvalidArgument,
                       {"unknown input(s) 'q'", "missing input(s) 'x'"}));
  auto half = with(5, K, 5);
  half[0].dtype = DType::kF16;
  EXPECT_TRUE(is_error(ex->run(half).status(), StatusCode::kInvalidArgument,
                       {"input 'x' is f16, the model expects f32"}));
  auto rank = with(5, K, 5);
  rank[0].shape = {5, K, 1};
  EXPECT_TRUE(is_error(ex->run(rank).status(), StatusCode::kInvalidArgument,
                       {"input 'x' has 3 dims, the model expects 2"}));
  EXPECT_TRUE(is_error(ex->run(with(5, K + 1, 5)).status(), StatusCode::kInvalidArgument,
                       {"input 'x' dim 1 is 97, the model expects 96"}));
  EXPECT_TRUE(is_error(ex->run(with(0, K, 0)).status(), StatusCode::kInvalidArgument, {"size 0"}));
  EXPECT_TRUE(is_error(ex->run(with(65, K, 65)).status(), StatusCode::kInvalidArgument,
                       {"implies size 65", "max_size 64"}));
  EXPECT_TRUE(is_error(ex->run(with(5, K, 3)).status(), StatusCode::kInvalidArgument,
                       {"input 'x' implies size 5, input 'y' implies size 3"}));
  EXPECT_EQ(ex->stats().graph_replays + ex->stats().eager_runs, 0);
  Inputs in = make_inputs(7, 99);  // still works after the errors
  auto out = ex->run(in.tensors);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(matches(*out, in));
}

TEST_F(ExecutorGpu, TimeDevice) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  ASSERT_TRUE(ex->run(make_inputs(16, 5).tensors).ok());
  auto replay = ex->time_device(16, 10);
  ASSERT_TRUE(replay.ok()) << replay.status().to_string();
  EXPECT_GT(*replay, 0.0);
  auto eager = ex->time_device(40, 5);
  ASSERT_TRUE(eager.ok()) << eager.status().to_string();
  EXPECT_GT(*eager, 0.0);
  EXPECT_FALSE(ex->time_device(0, 5).ok());
  EXPECT_FALSE(ex->time_device(65, 5).ok());
  EXPECT_FALSE(ex->time_device(16, 0).ok());
}

TEST_F(ExecutorGpu, TwoExecutorsShareOneModel) {
  std::shared_ptr<const Model> model = shared().model;
  auto a = Executor::create(model, ExecutorOptions{CudaGraphMode::kFull, false});
  auto b = Executor::create(model, ExecutorOptions{CudaGraphMode::kNone, false});
  ASSERT_TRUE(a.ok() && b.ok());
  model.reset();  // the executors keep the model alive
  for (int64_t s : {9, 31}) {
    Inputs in = make_inputs(s, static_cast<uint32_t>(200 + s));
    auto ra = (*a)->run(in.tensors);
    auto rb = (*b)->run(in.tensors);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_TRUE(matches(*ra, in));
    EXPECT_TRUE(matches(*rb, in));
  }
}

TEST_F(ExecutorGpu, WrongArchIsAClearError) {
  TestModelSpec spec = shared().art.spec;
  const std::string device_arch = spec.arch;
  spec.arch = device_arch == "sm_80" ? "sm_90" : "sm_80";
  TempDir tmp;
  auto art = runtime::testing::test_artifact_build(tmp.path(), spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  EXPECT_TRUE(is_error(Model::load(art->dir).status(), StatusCode::kFailedPrecondition,
                       {"artifact built for " + spec.arch + ", this GPU is " + device_arch}));
}

}  // namespace
}  // namespace kiln
