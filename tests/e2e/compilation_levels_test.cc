// CPU (CI): compilation levels (compilation.level, `kiln compile -O N`) on real exports. Every
// level compiles GPU-less; each artifact records its level and is what the level promises (one
// piece without splitting, no specialised sizes below 3, more launches and no epilogues at 0);
// the front end's graphs at level 0 (unfused) and at levels 1-3 (fused, one graph) both match
// onnxruntime's stored outputs on the CPU reference. The GPU half (every level's artifact run
// against onnxruntime) is exported_models_test's CompilationLevels.
#include <gtest/gtest.h>

#include <set>

#include "cache/cache_layout.h"
#include "cache/manifest_io.h"
#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"
#include "tools/conformance.h"
#include "tools/conformance_run.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct Built {
  std::string key;
  schema::Manifest manifest;
};

int step_count(const schema::Manifest& m) {
  int n = 0;
  for (const auto& p : m.pieces()) n += p.steps_size();
  return n;
}

// GEMM steps that fold a following op: a residual (C), an activation, or a skinny kernel.
int folded_gemms(const schema::Manifest& m) {
  int n = 0;
  for (const auto& p : m.pieces())
    for (const auto& s : p.steps())
      if (s.has_gemm())
        n += s.gemm().has_c() || s.gemm().skinny_sizes_size() > 0 ||
             (s.gemm().epilogue() != schema::GEMM_EPILOGUE_NONE &&
              s.gemm().epilogue() != schema::GEMM_EPILOGUE_BIAS);
  return n;
}

class CompilationLevels : public ::testing::TestWithParam<std::string> {};

TEST_P(CompilationLevels, EachLevelIsWhatItSaysAndTheGraphsAgree) {
  const fs::path dir = testing::exported_models_dir() / GetParam();
  auto folder = tools::conformance_folder_read(dir);
  ASSERT_TRUE(folder.ok()) << folder.status().to_string();
  ASSERT_TRUE(folder->base) << dir << " has no kiln.yaml";
  auto bindings = tools::conformance_bindings(*folder, folder->base->size_dim);
  ASSERT_TRUE(bindings.ok() && bindings->size() == 1u);
  const tools::ConformanceBinding& b = bindings->front();
  testing::TempDir cache;

  std::vector<Built> built;
  for (int level = 0; level <= compiler::kMaxCompilationLevel; ++level) {
    tools::ConformanceOptions opts;
    opts.level = level;
    const compiler::CompileConfig config = tools::conformance_config(*folder, b, opts);
    auto out = compiler::compile_model({dir / "model.onnx", config, cache.path()});
    ASSERT_TRUE(out.ok()) << "level " << level << ": " << out.status().to_string();
    auto m = cache::manifest_read(out->artifact_dir / std::string(cache::kManifestFileName));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE(m->config().has_compilation_level());
    EXPECT_EQ(m->config().compilation_level(), static_cast<uint32_t>(level));
    std::printf("[ info     ] %s level %d: %d pieces, %d steps, %d kernels, %d folded GEMMs\n",
                GetParam().c_str(), level, m->pieces_size(), step_count(*m), m->kernels_size(),
                folded_gemms(*m));
    built.push_back({out->key, std::move(*m)});
  }
  std::set<std::string> keys;
  for (const Built& x : built) keys.insert(x.key);
  EXPECT_EQ(keys.size(), built.size()) << "each level is its own cache entry";
  // 0 and 1: the whole graph in one piece; 2 and 3 cut it at attention.
  EXPECT_EQ(built[0].manifest.pieces_size(), 1);
  EXPECT_EQ(built[1].manifest.pieces_size(), 1);
  EXPECT_GT(built[2].manifest.pieces_size(), 1);
  EXPECT_EQ(built[3].manifest.pieces_size(), built[2].manifest.pieces_size());
  // Only 3 specialises the compile sizes.
  for (int level = 0; level < 3; ++level)
    EXPECT_EQ(built[level].manifest.config().compile_sizes_size(), 0) << level;
  EXPECT_EQ(built[3].manifest.config().compile_sizes_size(),
            static_cast<int>(folder->base->compile_sizes.size()));
  EXPECT_GT(folder->base->compile_sizes.size(), 0u);
  // 0 launches one step per op: more steps, and no GEMM folds anything.
  EXPECT_GT(step_count(built[0].manifest), step_count(built[1].manifest));
  EXPECT_EQ(folded_gemms(built[0].manifest), 0);
  EXPECT_GT(folded_gemms(built[1].manifest), 0);
  EXPECT_EQ(step_count(built[1].manifest), step_count(built[2].manifest));

  // The graphs the levels lower: level 0's is unfused, 1-3 share one fused graph; each matches
  // onnxruntime on the CPU reference.
  std::vector<size_t> nodes;
  for (int level = 0; level <= compiler::kMaxCompilationLevel; ++level) {
    tools::ConformanceOptions opts;
    opts.level = level;
    auto graph =
        compiler::import_canonical(dir / "model.onnx", tools::conformance_config(*folder, b, opts));
    ASSERT_TRUE(graph.ok()) << tools::first_line(graph.status().to_string());
    nodes.push_back(graph->nodes.size());
    if (level > 1) continue;  // 2 and 3 lower the graph of 1 (checked by the count below)
    for (const tools::SetResult& r : tools::conformance_reference_check(
             *folder, b, *graph, compiler::tolerance_end_to_end(compiler::Precision::kF32))) {
      EXPECT_EQ(r.verdict, tools::Verdict::kPassed)
          << GetParam() << " level " << level << " " << r.set << ": " << r.detail;
      std::printf("[ info     ] %s level %d graph (%zu nodes), %s: %s\n", GetParam().c_str(), level,
                  graph->nodes.size(), r.set.c_str(), r.detail.c_str());
    }
  }
  EXPECT_GT(nodes[0], nodes[1]) << "level 0 fuses no norm, GELU or rotary";
  EXPECT_EQ(nodes[1], nodes[2]);
  EXPECT_EQ(nodes[1], nodes[3]);
}

// One decoder per exporter style and family shape (GPT-2 TorchScript with eager attention and
// tanh GELU, Llama from dynamo with RMSNorm and rotary), and an encoder with a padding mask.
INSTANTIATE_TEST_SUITE_P(Representative, CompilationLevels,
                         ::testing::Values("gpt2_ts17_eager", "llama_dynamo18", "bert_ts17_sdpa"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
