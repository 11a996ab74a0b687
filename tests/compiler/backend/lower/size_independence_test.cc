// The back end's whole-model properties, on the exported models and the example, without a GPU:
// - the NVRTC kernel count does not grow with the number of capture sizes (general kernels take
//   the size as an argument; only compile_sizes add specialised entry points);
// - codegen is deterministic (same model + config → the same module sources and, with NVRTC
//   run again rather than answered from memory, the same cubins);
// - one module per kernel (and per tuned kernel), each with a cubin for every target;
// - identical kernels are deduplicated (a model's identical layers share them);
// - a GPT-2 layer runs in at most 7 launches: LN, QKV GEMM, attention, O GEMM + residual, LN,
//   up GEMM + GELU, down GEMM + residual (the views around attention absorbed, and the reshape
//   between each 2-D Gemm and its epilogue looked through).
#include <gtest/gtest.h>

#include <set>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

std::filesystem::path gpt2() { return testing::exported_models_dir() / "gpt2_ts17_eager"; }

CompileConfig gpt2_config() {
  auto c = config_load(gpt2() / "kiln.yaml");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : CompileConfig{};
}

// Autotune off: these are codegen properties, and on a GPU machine timing would add tuned
// kernels (different on every compile).
std::unique_ptr<CompiledModel> build(const std::filesystem::path& dir, CompileConfig c) {
  c.autotune = AutotuneMode::kOff;
  testing::TempDir tmp;
  auto cm = compile_unpublished({dir / "model.onnx", c, tmp.path()});
  EXPECT_TRUE(cm.ok()) << cm.status().to_string();
  return cm.ok() ? std::move(*cm) : nullptr;
}

// Every module's source, in order.
std::string sources(const CompiledModel& cm) {
  std::string all;
  for (const auto& m : cm.inputs.modules) all += m.source;
  return all;
}

// Entry points in the modules: one per `extern "C" __global__`.
int entry_points(const std::string& source) {
  int n = 0;
  for (size_t p = source.find("extern \"C\" __global__"); p != std::string::npos;
       p = source.find("extern \"C\" __global__", p + 1))
    ++n;
  return n;
}

TEST(SizeIndependence, KernelCountDoesNotGrowWithCaptureSizes) {
  CompileConfig few = gpt2_config();
  few.capture_sizes = {1, 32};
  CompileConfig many = few;
  many.capture_sizes.clear();
  for (int64_t s = 1; s <= 32; ++s) many.capture_sizes.push_back(s);
  auto a = build(gpt2(), few), b = build(gpt2(), many);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->program.kernels.size(), b->program.kernels.size());
  EXPECT_EQ(sources(*a), sources(*b));  // the very same modules
  const int general = static_cast<int>(a->program.kernels.size());
  EXPECT_EQ(entry_points(sources(*a)), general * (1 + static_cast<int>(few.compile_sizes.size())));
}

TEST(SizeIndependence, CompileSizesAddSpecialisedEntriesOnly) {
  CompileConfig none = gpt2_config();
  none.compile_sizes = {};
  CompileConfig three = none;
  three.compile_sizes = {1, 8, 16};
  auto a = build(gpt2(), none), b = build(gpt2(), three);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->program.kernels.size(), b->program.kernels.size());
  EXPECT_EQ(entry_points(sources(*a)), static_cast<int>(a->program.kernels.size()));
  EXPECT_EQ(entry_points(sources(*b)), 4 * static_cast<int>(b->program.kernels.size()));
}

TEST(Codegen, DeterministicSourceAndCubins) {
  for (auto p : {Precision::kF32, Precision::kF16}) {
    CompileConfig c = gpt2_config();
    c.precision = p;
    auto a = build(gpt2(), c);
    nvrtc_forget();  // b's modules go through NVRTC again
    auto b = build(gpt2(), c);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(sources(*a), sources(*b)) << precision_name(p);
    ASSERT_EQ(a->inputs.modules.size(), b->inputs.modules.size());
    for (size_t i = 0; i < a->inputs.modules.size(); ++i)
      EXPECT_EQ(a->inputs.modules[i].cubins, b->inputs.modules[i].cubins)
          << precision_name(p) << " module " << i;
  }
}

TEST(Codegen, IdenticalKernelsAreDeduplicated) {
  auto cm = build(gpt2(), gpt2_config());
  ASSERT_TRUE(cm);
  std::set<std::string> symbols;
  int kernel_steps = 0;
  for (const auto& step : cm->program.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&step)) {
      ++kernel_steps;
      symbols.insert(cm->program.kernels[k->kernel].symbol);
    }
  EXPECT_EQ(symbols.size(), cm->program.kernels.size());  // every kernel is used
  // Two identical layers: their LayerNorms and attention share kernels.
  EXPECT_LT(cm->program.kernels.size(), static_cast<size_t>(kernel_steps));
}

TEST(Codegen, Gpt2LayerRunsInAtMostSevenLaunches) {
  for (auto p : {Precision::kF32, Precision::kF16}) {
    CompileConfig c = gpt2_config();
    c.precision = p;
    auto cm = build(gpt2(), c);
    ASSERT_TRUE(cm);
    const auto& pieces = cm->program.pieces;
    ASSERT_EQ(pieces.size(), 5u);  // compute, attention, compute, attention, compute
    ASSERT_TRUE(pieces[1].is_attention);
    // Piece 1 (attention of layer 0) and piece 2 (the rest of layer 0 and the start of layer 1
    // up to its attention): one layer's worth of work.
    // A skinny GEMM and its cuBLASLt step are one launch at any size (each runs where the other
    // does not).
    size_t launches = 0;
    for (size_t i = pieces[1].first_step; i < pieces[3].first_step; ++i) {
      const auto* k = std::get_if<KernelLaunch>(&cm->program.steps[i]);
      launches += k == nullptr || !k->run_sizes ? 1 : 0;
    }
    EXPECT_LE(launches, 7u) << precision_name(p);
    std::printf("[ info     ] gpt2 %s: %zu launches per layer, %zu in all\n",
                std::string(precision_name(p)).c_str(), launches, cm->program.steps.size());
  }
}

// A model of each kind (families, exporters, an onnxruntime-optimizer output) in one precision
// each, cycling fp32, fp16, bf16, to keep CI time down: tests/e2e's corpus test compiles every
// corpus model, and the GPU run compiles each in every precision.
TEST(Codegen, EveryExportedModelCompilesForSm80AndSm90) {
  const Precision cycle[] = {Precision::kF32, Precision::kF16, Precision::kBF16};
  int i = 0;
  for (const std::string name : {"gpt2_ts17_eager", "llama_dynamo18", "bert_ts17_sdpa",
                                  "phi3_optimum", "gpt_neox_dynamo18", "distilbert_ortopt"}) {
    for (auto p : {cycle[i++ % 3]}) {
      SCOPED_TRACE(name + " " + std::string(precision_name(p)));
      const auto dir = testing::exported_models_dir() / name;
      auto c = config_load(dir / "kiln.yaml");
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      c->precision = p;
      c->targets = {"sm_80", "sm_90"};
      auto cm = build(dir, *c);
      ASSERT_TRUE(cm);
      // A module per kernel, and one per tuned decision (the skinny GEMMs' tensor-core form at
      // sizes past one row, decided by the lowering).
      EXPECT_EQ(cm->inputs.modules.size(),
                cm->program.kernels.size() + tuned_kernels(cm->program).size());
      for (const auto& m : cm->inputs.modules) {
        EXPECT_EQ(m.cubins.size(), 2u);
        for (const auto& [arch, cubin] : m.cubins) EXPECT_FALSE(cubin.empty()) << arch;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
