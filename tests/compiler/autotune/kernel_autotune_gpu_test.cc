// Launch-configuration autotuning on the GPU (compiler/autotune/kernel_autotune):
//  - the bench rejects a candidate whose output differs from the default's and never picks it;
//  - on a model with every tunable family, every (kernel, compile size) is timed, each decision
//    re-measured is never slower than the default (within 5% noise), and the tuned model still
//    matches the CPU reference;
//  - a second compile with the tuning database written by the first decides the same without
//    timing.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>

#include "compiler/autotune/kernel_autotune.h"
#include "compiler/autotune/tune_session.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/pipeline.h"
#include "tests/compiler/autotune/kernel_program.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

using ::kiln::testing::gpu_available;
using ::kiln::testing::OnnxBuilder;

std::vector<uint8_t> bench_cubin(const LoweredProgram& program, const KernelLaunch& l,
                                 const std::vector<int64_t>& sizes) {
  auto arch = tune_device_arch();
  EXPECT_TRUE(arch.ok());
  NvrtcModule m{"bench", launch_bench_source(program, l, sizes), kernel_headers()};
  auto cubin = nvrtc_compile(m, *arch);
  EXPECT_TRUE(cubin.ok()) << cubin.status().to_string();
  return cubin.ok() ? *cubin : std::vector<uint8_t>{};
}

TEST(KernelAutotuneGpu, WrongCandidatesAreRejectedAndNeverChosen) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  auto p = testing::scale_program();
  const int64_t size = 4096;  // 16 MiB per operand
  auto bench = LaunchBench::create(p.graph, p.program, p.launch(), size,
                                   bench_cubin(p.program, p.launch(), {size}));
  ASSERT_TRUE(bench.ok()) << bench.status().to_string();
  for (int c : {0, 1}) {
    auto diff = (*bench)->differs_from_default(c);
    ASSERT_TRUE(diff.ok()) << diff.status().to_string();
    EXPECT_EQ(*diff, "") << "candidate " << c;
  }
  auto diff = (*bench)->differs_from_default(2);
  ASSERT_TRUE(diff.ok()) << diff.status().to_string();
  EXPECT_NE(diff->find("'y' element"), std::string::npos) << *diff;
  auto fast = (*bench)->time(-1), slow = (*bench)->time(1);
  ASSERT_TRUE(fast.ok() && slow.ok());
  std::printf("scale [4096, 1024] f32: default %.4f ms, one block of 32 threads %.4f ms\n", *fast,
              *slow);
  EXPECT_GT(*slow, 2 * *fast) << "one block of 32 threads should be far slower";

  AutotuneOptions o;
  o.mode = AutotuneMode::kOn;
  KernelAutotuneReport r;
  auto arch = tune_device_arch();
  ASSERT_TRUE(arch.ok());
  Status st = autotune_kernels(o, p.graph, {size}, {*arch}, p.program, &r);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r.timed, 1);
  EXPECT_EQ(r.rejected, 1);
  ASSERT_EQ(p.launch().tuned.count(size), 1u);
  const TunedChoice& t = p.launch().tuned.at(size);
  EXPECT_EQ(t.source, "autotune");
  EXPECT_TRUE(t.candidate == -1 || t.candidate == 0) << t.candidate;
  if (t.candidate == 0) {
    EXPECT_LT(t.ms, 0.98 * t.default_ms);
  }
}

// LayerNorm, an elementwise chain with SiLU, Softmax and a head transpose, fp16: one launch of
// every tunable family but attention (kernels_attention_gpu covers its candidates).
OnnxBuilder block_model() {
  OnnxBuilder b("tunable", 18);
  b.input("x", {"S", 768});
  b.random_initializer("g", {768}, 0.5f, 1.5f, 1)
      .random_initializer("beta", {768}, -0.5f, 0.5f, 2)
      .random_initializer("w", {768}, -1.0f, 1.0f, 3);
  b.node("LayerNormalization", {"x", "g", "beta"}, {"ln"}, {{"epsilon", 1e-5f}});
  b.node("Mul", {"ln", "w"}, {"m"});
  b.node("Sigmoid", {"m"}, {"sig"});
  b.node("Mul", {"m", "sig"}, {"act"});
  b.node("Softmax", {"act"}, {"sm"}, {{"axis", int64_t{-1}}}).output("sm");
  b.int64_initializer("shape", {3}, {-1, 12, 64});
  b.node("Reshape", {"act", "shape"}, {"heads"});
  b.node("Transpose", {"heads"}, {"t"}, {{"perm", std::vector<int64_t>{1, 0, 2}}}).output("t");
  return b;
}

CompileConfig tuned_config(const std::vector<int64_t>& sizes) {
  CompileConfig c;
  c.size_dim = "S";
  c.max_size = 2048;
  c.precision = Precision::kF16;
  c.compile_sizes = sizes;
  c.autotune = AutotuneMode::kOn;
  auto arch = tune_device_arch();
  if (arch.ok()) c.targets = {*arch};
  return c;
}

TEST(KernelAutotuneGpu, DecisionsAreNeverSlowerAndTheModelStaysCorrect) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  const std::vector<int64_t> sizes = {1, 64, 1000};
  ::kiln::testing::TempDir tmp;
  const auto model = tmp.path() / "m.onnx";
  block_model().save(model);
  CompileRequest req{model, tuned_config(sizes), tmp.path() / "cache"};
  req.tuning_db = tmp.path() / "tune.db";
  auto cm = compile_unpublished(req);
  ASSERT_TRUE(cm.ok()) << cm.status().to_string();
  const LoweredProgram& prog = (*cm)->program;

  int tunable = 0, improved = 0;
  for (const auto& step : prog.steps) {
    const auto* l = std::get_if<KernelLaunch>(&step);
    if (l == nullptr || l->candidates.empty()) continue;
    ++tunable;
    const auto cubin = bench_cubin(prog, *l, sizes);
    for (int64_t s : sizes) {
      ASSERT_EQ(l->tuned.count(s), 1u) << l->nodes << " at size " << s << " was not decided";
      const TunedChoice& t = l->tuned.at(s);
      EXPECT_EQ(t.source, "autotune");
      EXPECT_GT(t.default_ms, 0);
      if (t.candidate < 0) continue;
      ++improved;
      EXPECT_LT(t.ms, 0.98 * t.default_ms) << l->nodes;
      // Re-measured: the choice is not slower than the default.
      auto bench = LaunchBench::create((*cm)->graph, prog, *l, s, cubin);
      ASSERT_TRUE(bench.ok()) << bench.status().to_string();
      auto d = (*bench)->time(-1), c = (*bench)->time(t.candidate);
      ASSERT_TRUE(d.ok() && c.ok());
      std::printf("%-40s size %5lld: '%s' %.4f ms vs default '%s' %.4f ms (at tuning %.4f / %.4f)\n",
                  l->nodes.c_str(), static_cast<long long>(s),
                  l->candidates[static_cast<size_t>(t.candidate)].config.c_str(), *c,
                  l->config.c_str(), *d, t.ms, t.default_ms);
      EXPECT_LE(*c, 1.05 * *d) << l->nodes << " at size " << s;
    }
  }
  EXPECT_GE(tunable, 3) << "LayerNorm, the SiLU chain, Softmax and the transpose offer candidates";
  std::printf("%d tunable launches, %d decisions chose a candidate\n", tunable, improved);

  // The database answers a second compile: the same decisions, none timed.
  CompileRequest again = req;
  auto cm2 = compile_unpublished(again);
  ASSERT_TRUE(cm2.ok()) << cm2.status().to_string();
  for (size_t i = 0; i < prog.steps.size(); ++i) {
    const auto* a = std::get_if<KernelLaunch>(&prog.steps[i]);
    const auto* b = std::get_if<KernelLaunch>(&(*cm2)->program.steps[i]);
    if (a == nullptr || a->candidates.empty()) continue;
    ASSERT_NE(b, nullptr);
    for (int64_t s : sizes) {
      EXPECT_EQ(b->tuned.at(s).candidate, a->tuned.at(s).candidate) << a->nodes;
      EXPECT_EQ(b->tuned.at(s).source, "tuning-db");
    }
  }

  // Correct with the tuned kernels, at the tuned sizes.
  std::mt19937 rng(5);
  auto check = ::kiln::testing::gpu_check(Precision::kF16, sizes);
  check.compile_sizes = sizes;
  check.max_size = 2048;
  check.autotune = true;
  // LayerNorm, then a chain on its fp16-rounded output: the end-to-end tolerance of
  // tests/README.md.
  check.tol = tolerance_end_to_end(Precision::kF16);
  check.tol_set = true;
  ::kiln::testing::GpuCheckReport report;
  EXPECT_TRUE(::kiln::testing::gpu_model_matches_reference(block_model(), check, rng, &report))
      << report.detail;
}

}  // namespace
}  // namespace kiln::compiler
