// The runtime end to end on a GPU: a real artifact (NVRTC cubin, weights, GEMM + kernel steps,
// an attention piece) built by hand, run in every graph mode at many sizes against a float64
// CPU reference; the load and capture reports; weights upload strategies. Skips cleanly without
// a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cache/file_blocks.h"
#include "cache/manifest_io.h"
#include "kiln/executor.h"
#include "runtime/cuda_check.h"
#include "runtime/log.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/gpu_fixture.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;
using runtime::testing::ExecutorGpu;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::is_error;
using runtime::testing::LogCapture;
using runtime::testing::make_inputs;
using runtime::testing::matches;
using runtime::testing::TestModelSpec;

class ExecutorModes : public ExecutorGpu, public ::testing::WithParamInterface<CudaGraphMode> {};

TEST_P(ExecutorModes, MatchesReferenceAtEverySize) {
  LogCapture log;
  auto ex = make(GetParam());
  ASSERT_NE(ex, nullptr);
  const CudaGraphMode effective = mixed_mode(GetParam());  // no KV-cache decode yet
  EXPECT_EQ(ex->mode(), effective);
  const CaptureReport& report = ex->capture_report();
  EXPECT_EQ(report.requested, GetParam());
  EXPECT_EQ(report.effective, effective);
  if (effective != GetParam()) {
    EXPECT_TRUE(log.has(cuda_graph_mode_name(GetParam())));
    EXPECT_NE(report.downgrade_reason.find(cuda_graph_mode_name(GetParam())), std::string::npos);
  } else {
    EXPECT_TRUE(report.downgrade_reason.empty()) << report.downgrade_reason;
  }
  const bool graphs = effective != CudaGraphMode::kNone;
  const std::vector<int64_t> want_captured =
      graphs ? std::vector<int64_t>{4, 16, 32} : std::vector<int64_t>{};
  EXPECT_EQ(ex->captured_sizes(), want_captured);
  // Captured largest first; FULL is one graph per size, PIECEWISE one per non-attention run of
  // pieces (pieces 0 and 2 around the attention piece 1).
  ASSERT_EQ(report.sizes.size(), want_captured.size());
  for (size_t i = 0; i < report.sizes.size(); ++i) {
    EXPECT_EQ(report.sizes[i].size, want_captured[want_captured.size() - 1 - i]);
    EXPECT_EQ(report.sizes[i].graphs, effective == CudaGraphMode::kFull ? 1u : 2u);
    EXPECT_GT(report.sizes[i].ms, 0.0);
  }
  EXPECT_GT(report.arena_bytes, 0u);
  EXPECT_GE(report.workspace_bytes, uint64_t{32} << 20);
  EXPECT_GE(report.total_ms, report.capture_ms);

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

TEST_F(ExecutorGpu, CaptureProgressHearsEverySizeLargestFirst) {
  std::vector<std::tuple<int64_t, size_t, size_t>> calls;
  ExecutorOptions o;
  o.mode = CudaGraphMode::kFull;
  o.capture_progress = [&](int64_t size, size_t done, size_t total) {
    calls.emplace_back(size, done, total);
  };
  auto ex = Executor::create(gpu_shared().model, o);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const std::vector<int64_t>& sizes = (*ex)->captured_sizes();
  ASSERT_EQ(calls.size(), sizes.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(std::get<0>(calls[i]), sizes[sizes.size() - 1 - i]) << "largest first";
    EXPECT_EQ(std::get<1>(calls[i]), i + 1);
    EXPECT_EQ(std::get<2>(calls[i]), sizes.size());
  }
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
  const int64_t K = gpu_shared().art.spec.k, N = gpu_shared().art.spec.n;
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
  std::shared_ptr<const Model> model = gpu_shared().model;
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
  TestModelSpec spec = gpu_shared().art.spec;
  const std::string device_arch = spec.arch;
  spec.arch = device_arch == "sm_80" ? "sm_90" : "sm_80";
  TempDir tmp;
  auto art = runtime::testing::test_artifact_build(tmp.path(), spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  EXPECT_TRUE(is_error(Model::load(art->dir).status(), StatusCode::kFailedPrecondition,
                       {"artifact built for " + spec.arch + ", this GPU is " + device_arch}));
}

TEST_F(ExecutorGpu, LoadReportHasEveryPhase) {
  const LoadReport& r = gpu_shared().model->load_report();
  EXPECT_TRUE(r.verified);
  EXPECT_EQ(r.weights_bytes, gpu_shared().art.weights.blob.size());
  EXPECT_EQ(r.weights_strategy, WeightsUpload::kDirect);  // a small file: auto picks direct
  for (double ms : {r.resolve_verify_ms, r.validate_ms, r.device_init_ms, r.weights_ms, r.cubin_ms,
                    r.cublaslt_ms})
    EXPECT_GE(ms, 0.0);
  EXPECT_GT(r.total_ms, 0.0);
  // The cuBLASLt planning runs beside the weights and the cubins (runtime/model_upload.cc).
  EXPECT_GE(r.total_ms, r.weights_ms + r.cubin_ms);
  EXPECT_GE(r.total_ms, r.cublaslt_ms);
}

// Both upload strategies, with and without hashing, give a model that computes the reference.
TEST_F(ExecutorGpu, EveryWeightsUploadStrategyWorks) {
  for (WeightsUpload w : {WeightsUpload::kDirect, WeightsUpload::kPinnedStaging}) {
    for (bool verify : {true, false}) {
      SCOPED_TRACE(std::string(weights_upload_name(w)) + (verify ? " verify" : " no verify"));
      LoadOptions o;
      o.weights = w;
      o.verify = verify;
      std::vector<std::pair<int64_t, int64_t>> uploaded;  // upload_progress calls
      o.upload_progress = [&](int64_t done, int64_t total) { uploaded.emplace_back(done, total); };
      auto model = Model::load(gpu_shared().art.dir, o);
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      ASSERT_FALSE(uploaded.empty());
      EXPECT_EQ(uploaded.back().first, uploaded.back().second) << "the last call says done";
      EXPECT_EQ(uploaded.back().second,
                static_cast<int64_t>((*model)->load_report().weights_bytes));
      for (size_t i = 1; i < uploaded.size(); ++i)
        EXPECT_GT(uploaded[i].first, uploaded[i - 1].first);
      EXPECT_EQ((*model)->load_report().weights_strategy, w);
      EXPECT_EQ((*model)->load_report().verified, verify);
      auto ex = Executor::create(*model, ExecutorOptions{CudaGraphMode::kFull});
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      Inputs in = make_inputs(11, 300);
      auto out = (*ex)->run(in.tensors);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_TRUE(matches(*out, in));
    }
  }
  LoadOptions bad;
  bad.weights = static_cast<WeightsUpload>(9);
  EXPECT_TRUE(is_error(Model::load(gpu_shared().art.dir, bad).status(),
                       StatusCode::kInvalidArgument, {"unknown strategy 9"}));
}

// A weights byte changed after publishing: loading with verify (the default) catches it in the
// bytes being uploaded, with either strategy; without verify it loads (sizes still match).
TEST_F(ExecutorGpu, VerifyCatchesChangedWeights) {
  TempDir tmp;
  auto art = runtime::testing::test_artifact_build(tmp.path(), gpu_shared().art.spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  const auto weights = art->dir / runtime::testing::kWeightsFile;
  std::filesystem::permissions(weights, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const char c = 0x7f;
    f.write(&c, 1);
  }
  for (WeightsUpload w : {WeightsUpload::kDirect, WeightsUpload::kPinnedStaging}) {
    LoadOptions o;
    o.weights = w;
    EXPECT_TRUE(is_error(Model::load(art->dir, o).status(), StatusCode::kDataLoss,
                         {runtime::testing::kWeightsFile, "XXH3"}))
        << weights_upload_name(w);
  }
  LoadOptions trusting;
  trusting.verify = false;
  EXPECT_TRUE(Model::load(art->dir, trusting).ok());
}

// The parallel readers with many blocks: the manifest rewritten to 4 KiB blocks (the test
// weights are a few of them), so several readers share the file. Intact, the model computes the
// reference; a byte changed in one block is caught there, named by its block and offset; a
// manifest without block digests still loads, verified: kDirect (hashed whole), as the load
// report says.
TEST_F(ExecutorGpu, PinnedReadersCheckEveryBlock) {
  TempDir tmp;
  auto art = runtime::testing::test_artifact_build(tmp.path(), gpu_shared().art.spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  const auto weights = art->dir / runtime::testing::kWeightsFile;
  const std::string blob = kiln::testing::read_bytes(weights);
  constexpr uint64_t kBlock = 4096;
  ASSERT_GT(blob.size(), 3 * kBlock) << "the test weights should span several blocks";
  const auto manifest_path = art->dir / cache::kManifestFileName;
  auto rewrite = [&](bool blocks) {
    Result<schema::Manifest> m = cache::manifest_read(manifest_path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    for (auto& f : *m->mutable_files()) {
      if (f.path() != runtime::testing::kWeightsFile) continue;
      f.clear_block_xxh3();
      f.set_block_bytes(blocks ? kBlock : 0);
      if (blocks)
        for (uint64_t h : cache::block_hashes(blob.data(), blob.size(), kBlock))
          f.add_block_xxh3(h);
    }
    std::filesystem::permissions(manifest_path, std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
    kiln::testing::write_bytes(manifest_path, cache::manifest_encode(*m));
  };
  auto load_pinned = [&] {
    LoadOptions o;
    o.weights = WeightsUpload::kPinnedStaging;
    return Model::load(art->dir, o);
  };
  for (bool blocks : {true, false}) {
    SCOPED_TRACE(blocks ? "4 KiB blocks" : "no block digests");
    rewrite(blocks);
    auto model = load_pinned();
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->load_report().weights_strategy,
              blocks ? WeightsUpload::kPinnedStaging : WeightsUpload::kDirect);
    auto ex = Executor::create(*model, ExecutorOptions{CudaGraphMode::kNone});
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    Inputs in = make_inputs(5, 300);
    auto out = (*ex)->run(in.tensors);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(matches(*out, in));
  }
  rewrite(true);
  std::filesystem::permissions(weights, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::string changed = blob;
  changed[3 * kBlock + 5] ^= 0x40;
  kiln::testing::write_bytes(weights, changed);
  EXPECT_TRUE(is_error(load_pinned().status(), StatusCode::kDataLoss,
                       {runtime::testing::kWeightsFile, "block 3 (bytes 12288..16384)", "XXH3"}));
}

}  // namespace
}  // namespace kiln
