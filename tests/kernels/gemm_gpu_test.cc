// GPU: the GEMM family (compiler/backend/lower/lower_gemm.cc → runtime/gemm_plan.cc) against the
// CPU reference through the whole pipeline: every epilogue (bias, ReLU, tanh GELU, residual C,
// Gemm's beta·C), batched MatMul with and without broadcast, in fp32, tf32, fp16 and bf16, at sizes
// 1, 3, 17, 1000 (M depends on S) and K, N including 17 and ~1000.
//
// Inputs are exact in the compute dtype (tests/support/gemm_models.h), so the reference (the
// ONNX graph on the same inputs) differs from the GPU only by accumulation order and output
// rounding, which is what tests/README.md's GEMM tolerance covers.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/autotune/autotune.h"
#include "compiler/autotune/gemm_autotune.h"
#include "compiler/autotune/graph_timer.h"
#include "compiler/autotune/tune_session.h"
#include "compiler/reference/reference_compare.h"
#include "runtime/gemm_plan.h"
#include "runtime/model_state.h"
#include "tests/support/gemm_models.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

void expect_matches(const OnnxBuilder& model, Precision p, int64_t k, int expected_gemms,
                    std::mt19937& rng) {
  SCOPED_TRACE(std::string(compiler::precision_name(p)) + " K=" + std::to_string(k));
  GpuCheckReport report;
  EXPECT_TRUE(gpu_model_matches_reference(model, gemm_check(p, k), rng, &report)) << report.detail;
  EXPECT_EQ(report.gemm_steps, expected_gemms);
}

struct KN {
  int64_t k, n;
};
const KN kShapes[] = {{17, 17}, {64, 48}, {999, 17}, {17, 1001}};

void sweep_epilogue(Epi e) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(2024);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : kShapes) {
      SCOPED_TRACE(std::string(epi_name(e)) + " N=" + std::to_string(s.n));
      expect_matches(dense_model(e, s.k, s.n, p), p, s.k, 1, rng);
    }
}

TEST(GemmGpu, Plain) { sweep_epilogue(Epi::kNone); }
TEST(GemmGpu, Bias) { sweep_epilogue(Epi::kBias); }
TEST(GemmGpu, BiasRelu) { sweep_epilogue(Epi::kBiasRelu); }
TEST(GemmGpu, BiasGeluTanh) { sweep_epilogue(Epi::kBiasGelu); }
TEST(GemmGpu, BiasResidual) { sweep_epilogue(Epi::kBiasResidual); }
TEST(GemmGpu, ResidualBiasRelu) { sweep_epilogue(Epi::kResidualBiasRelu); }

TEST(GemmGpu, GemmTransBAlphaBetaC) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(7);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : kShapes) {
      GemmModel b("gemm_c", p);
      b.activation("x", {s.k}, 21).activation("c", {s.n}, 22).weight("wt", {s.n, s.k}, 23);
      b.node("Gemm", {"x", "wt", "c"}, {"y"},
             {{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 0.25f}});
      expect_matches(b.finish("y"), p, s.k, 1, rng);
    }
}

TEST(GemmGpu, BatchedMatMul) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(8);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : {KN{17, 17}, KN{64, 33}}) {
      GemmModel b("bmm", p);  // [S, 4, K] @ [S, K, N]: batch S
      b.activation("a", {4, s.k}, 31).activation("bb", {s.k, s.n}, 32);
      b.node("MatMul", {"a", "bb"}, {"y"});
      expect_matches(b.finish("y"), p, s.k, 1, rng);
    }
}

TEST(GemmGpu, BatchedMatMulBroadcastA) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(9);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : {KN{17, 17}, KN{64, 33}}) {
      GemmModel b("bmm_a", p);  // [5, K] @ [S, K, N]: A broadcast (stride 0)
      b.weight("a", {5, s.k}, 41).activation("bb", {s.k, s.n}, 42);
      b.node("MatMul", {"a", "bb"}, {"y"});
      expect_matches(b.finish("y"), p, s.k, 1, rng);
    }
}

TEST(GemmGpu, BatchedMatMulBroadcastBFoldsIntoM) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(10);
  for (Precision p : kGemmPrecisions) {
    GemmModel b("bmm_b", p);  // [S, 3, K] @ [1, K, N]
    b.activation("a", {3, 17}, 51).weight("bb", {1, 17, 29}, 52);
    b.node("MatMul", {"a", "bb"}, {"y"});
    expect_matches(b.finish("y"), p, 17, 1, rng);
  }
}

TEST(GemmGpu, CapturedGraphsReplayTheEpilogues) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(11);
  for (Precision p : kGemmPrecisions) {
    GpuCheck c = gemm_check(p, 64);
    c.capture_sizes = {1, 4, 32};
    c.compile_sizes = {32};
    c.sizes = {1, 3, 17, 32};
    SCOPED_TRACE(compiler::precision_name(p));
    EXPECT_TRUE(gpu_model_matches_reference(dense_model(Epi::kBiasResidual, 64, 48, p), c, rng));
    EXPECT_TRUE(gpu_model_matches_reference(dense_model(Epi::kBiasGelu, 64, 48, p), c, rng));
  }
}

// --- Autotuning: a tuned algorithm, re-created by the runtime from the manifest, is never
// slower than the heuristic's choice on the same shape (3% allowed for timing noise), and
// computes the same result.

struct TuneShape {
  const char* name;
  schema::GemmCompute compute;
  schema::DType dtype;
  schema::GemmEpilogue epilogue;
  int64_t m, n, k;
};

schema::Manifest tune_manifest(const TuneShape& s, const std::string& arch) {
  schema::Manifest m;
  m.mutable_config()->set_max_size(static_cast<uint32_t>(s.m));
  m.mutable_config()->add_targets(arch);
  m.mutable_config()->add_compile_sizes(static_cast<uint32_t>(s.m));
  const uint64_t es = s.dtype == schema::DTYPE_F32 ? 4 : 2;
  uint64_t offset = 0;
  auto add = [&](const char* name, std::vector<int64_t> dims) {
    auto* b = m.add_buffers();
    b->set_name(name);
    b->set_location(schema::Buffer::LOCATION_ARENA);
    b->set_offset(offset);
    b->set_dtype(s.dtype);
    uint64_t n = 1;
    for (int64_t d : dims) {
      b->add_dims()->set_offset(d);
      n *= static_cast<uint64_t>(d);
    }
    offset += (n * es + 255) / 256 * 256;
    return static_cast<uint32_t>(m.buffers_size() - 1);
  };
  auto* g = m.add_pieces()->add_steps()->mutable_gemm();
  g->set_node(s.name);
  g->set_a(add("a", {s.m, s.k}));
  g->set_b(add("b", {s.k, s.n}));
  g->set_d(add("d", {s.m, s.n}));
  g->set_has_bias(true);
  g->set_bias(add("bias", {s.n}));
  g->mutable_m()->set_offset(s.m);
  g->mutable_n()->set_offset(s.n);
  g->mutable_k()->set_offset(s.k);
  g->mutable_batch()->set_offset(1);
  g->set_alpha(1.0f);
  g->set_epilogue(s.epilogue);
  g->set_compute(s.compute);
  m.set_arena_bytes(offset);
  m.set_gemm_workspace_bytes(uint64_t{32} << 20);
  return m;
}

// Multiples of 1/64 in [-1, 1]: exact in every storage dtype.
void fill_arena(const schema::Manifest& m, void* arena) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> q(-64, 64);
  std::vector<uint8_t> host(m.arena_bytes());
  for (const auto& b : m.buffers()) {
    int64_t n = 1;
    for (const auto& d : b.dims()) n *= d.offset();
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(q(rng)) / 64.0f;
      uint8_t* dst = host.data() + b.offset() + i * (b.dtype() == schema::DTYPE_F32 ? 4 : 2);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (b.dtype() == schema::DTYPE_F32) {
        std::memcpy(dst, &v, 4);
      } else if (b.dtype() == schema::DTYPE_BF16) {
        const uint16_t h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(dst, &h, 2);
      } else {  // f16: q/64 is 0 or normal with <= 7 significant bits
        uint16_t h = 0;
        if (v != 0.0f)
          h = static_cast<uint16_t>(((bits >> 31) << 15) |
                                    ((((bits >> 23) & 0xFF) - 127 + 15) << 10) |
                                    ((bits >> 13) & 0x3FF));
        std::memcpy(dst, &h, 2);
      }
    }
  }
  ASSERT_EQ(cudaMemcpy(arena, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

// Median ms per GEMM in CUDA-graph replay, as the runtime runs it and the tuner measured it.
double time_plan(const runtime::GemmPlan& plan, cublasLtHandle_t lt, void* ws, size_t ws_bytes,
                 cudaStream_t stream) {
  auto ms = compiler::graph_median_ms(stream, 1, [&](int calls) -> Status {
    for (int i = 0; i < calls; ++i) KILN_RETURN_IF_ERROR(plan.run(lt, ws, ws_bytes, stream));
    return Status::ok_status();
  });
  EXPECT_TRUE(ms.ok()) << ms.status().to_string();
  return ms.ok() ? *ms : 0.0;
}

TEST(GemmGpu, AutotunedChoiceIsNeverSlowerThanTheHeuristic) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  auto arch = compiler::tune_device_arch();
  ASSERT_TRUE(arch.ok()) << arch.status().to_string();
  const TuneShape shapes[] = {
      {"mlp_up_f16", schema::GEMM_COMPUTE_F16, schema::DTYPE_F16, schema::GEMM_EPILOGUE_BIAS_GELU,
       1000, 3072, 768},
      {"odd_f32", schema::GEMM_COMPUTE_F32, schema::DTYPE_F32, schema::GEMM_EPILOGUE_BIAS, 17, 1001,
       999},
      {"qkv_bf16", schema::GEMM_COMPUTE_BF16, schema::DTYPE_BF16, schema::GEMM_EPILOGUE_BIAS, 64,
       2304, 768},
  };
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const size_t ws_bytes = size_t{32} << 20;
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);

  for (const TuneShape& s : shapes) {
    SCOPED_TRACE(s.name);
    schema::Manifest tuned = tune_manifest(s, *arch);
    compiler::AutotuneOptions o;
    o.mode = compiler::AutotuneMode::kOn;
    compiler::AutotuneReport report;
    Status st = compiler::autotune_gemms(o, tuned, &report);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(report.timed, 1);
    ASSERT_EQ(tuned.pieces(0).steps(0).gemm().algos_size(), 1);

    schema::Manifest plain = tuned;
    plain.mutable_pieces(0)->mutable_steps(0)->mutable_gemm()->clear_algos();
    auto st_tuned = runtime::model_state_create(tuned, {});
    auto st_plain = runtime::model_state_create(plain, {});
    st_tuned->lt = lt;
    st_plain->lt = lt;
    void* arena = nullptr;
    ASSERT_EQ(cudaMalloc(&arena, tuned.arena_bytes()), cudaSuccess);
    fill_arena(tuned, arena);
    auto p_tuned = runtime::GemmPlan::create(*st_tuned, tuned.pieces(0).steps(0).gemm(),
                                             static_cast<char*>(arena), s.m, ws_bytes);
    auto p_plain = runtime::GemmPlan::create(*st_plain, plain.pieces(0).steps(0).gemm(),
                                             static_cast<char*>(arena), s.m, ws_bytes);
    ASSERT_TRUE(p_tuned.ok()) << p_tuned.status().to_string();
    ASSERT_TRUE(p_plain.ok()) << p_plain.status().to_string();
    EXPECT_EQ((*p_tuned)->algo_source(), "recorded");  // re-created, not a fallback
    EXPECT_EQ((*p_plain)->algo_source(), "heuristic");

    // Same result (D is overwritten by each; bias + A, B unchanged).
    const auto& d = tuned.buffers(static_cast<int>(tuned.pieces(0).steps(0).gemm().d()));
    const size_t d_bytes = static_cast<size_t>(s.m * s.n) * (s.dtype == schema::DTYPE_F32 ? 4 : 2);
    std::vector<uint8_t> d_plain(d_bytes), d_tuned(d_bytes);
    ASSERT_TRUE((*p_plain)->run(lt, ws, ws_bytes, stream).ok());
    ASSERT_EQ(cudaMemcpyAsync(d_plain.data(), static_cast<char*>(arena) + d.offset(), d_bytes,
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_TRUE((*p_tuned)->run(lt, ws, ws_bytes, stream).ok());
    ASSERT_EQ(cudaMemcpyAsync(d_tuned.data(), static_cast<char*>(arena) + d.offset(), d_bytes,
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    if (s.dtype == schema::DTYPE_F32) {
      std::vector<float> a(d_bytes / 4), b(d_bytes / 4);
      std::memcpy(a.data(), d_plain.data(), d_bytes);
      std::memcpy(b.data(), d_tuned.data(), d_bytes);
      int bad = 0;
      for (size_t i = 0; i < a.size(); ++i)
        bad += std::fabs(a[i] - b[i]) > 1e-3 + 1e-4 * std::fabs(a[i]);
      EXPECT_EQ(bad, 0);
    } else {
      // 16-bit: exact inputs, fp32 accumulation; two algorithms differ by at most a rounding.
      int far = 0;
      for (size_t i = 0; i + 1 < d_bytes; i += 2) {
        uint16_t x, y;
        std::memcpy(&x, &d_plain[i], 2);
        std::memcpy(&y, &d_tuned[i], 2);
        far += std::abs(static_cast<int>(x) - static_cast<int>(y)) > 2;
      }
      EXPECT_EQ(far, 0);
    }

    // Timing in graph replay: alternate the two plans, median of several rounds.
    std::vector<double> t_plain, t_tuned;
    for (int r = 0; r < 9; ++r) {
      t_plain.push_back(time_plan(**p_plain, lt, ws, ws_bytes, stream));
      t_tuned.push_back(time_plan(**p_tuned, lt, ws, ws_bytes, stream));
    }
    std::sort(t_plain.begin(), t_plain.end());
    std::sort(t_tuned.begin(), t_tuned.end());
    const double mp = t_plain[t_plain.size() / 2], mt = t_tuned[t_tuned.size() / 2];
    std::printf("%s: heuristic %.4f ms, tuned %.4f ms (autotune measured %d candidates)\n", s.name,
                mp, mt, report.timed);
    EXPECT_LE(mt, mp * 1.03) << "tuned " << mt << " ms, heuristic " << mp << " ms";
    ASSERT_EQ(cudaFree(arena), cudaSuccess);
  }
  (void)cudaFree(ws);
  (void)cudaStreamDestroy(stream);
  (void)cublasLtDestroy(lt);
}

}  // namespace
}  // namespace kiln::testing
