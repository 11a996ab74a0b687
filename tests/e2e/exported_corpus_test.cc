// CPU: every model of the real-export corpus (tests/models/exported) through the whole compile
// pipeline without a GPU (autotune off), with the run-time size as its kiln.yaml says (the
// sequence). Encoders also compile with the batch as the size (the sequence bound from the first
// data set's inputs), and the front end's graph for that choice, at every data set's sequence
// length, runs on the CPU reference against onnxruntime's stored outputs at the fp32 end-to-end
// tolerance. Each artifact passes the runtime's manifest validation (the kernels' signatures
// against the launch program). The GPU runs of the same corpus are `kiln conformance` in
// tools/run_gpu.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/artifact_verify.h"
#include "compiler/pipeline.h"
#include "runtime/manifest_validate.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"
#include "tools/conformance.h"
#include "tools/conformance_run.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// expect.json's "encoder" (written by tests/models/export_transformers.py).
bool is_encoder(const fs::path& dir) {
  std::ifstream f(dir / "expect.json");
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object() && j.contains("encoder")) << dir / "expect.json";
  return j.is_object() && j.value("encoder", false);
}

// The batch dim's name: input_ids' first dim_param.
std::string batch_dim(const tools::ConformanceFolder& f) {
  for (const auto& in : f.inputs)
    if (in.name == "input_ids" && !in.dim_params.empty()) return in.dim_params[0];
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Compiles one binding GPU-less; returns the config it compiled with.
compiler::CompileConfig compile_ok(const tools::ConformanceFolder& f,
                                   const tools::ConformanceBinding& b, const fs::path& cache) {
  const compiler::CompileConfig config = tools::conformance_config(f, b, {});  // autotune off
  const auto t0 = std::chrono::steady_clock::now();
  auto out = compiler::compile_model({f.dir / "model.onnx", config, cache});
  EXPECT_TRUE(out.ok()) << f.name << " with size_dim '" << b.size_dim
                        << "': " << tools::first_line(out.status().to_string());
  std::printf("[ info     ] %s size_dim %s: %s in %.2f s\n", f.name.c_str(), b.size_dim.c_str(),
              out.ok() ? "compiled" : "not compiled", seconds_since(t0));
  if (out.ok()) {  // the runtime's load-time checks accept it (the kernels' signatures included)
    auto m = cache::artifact_verify(out->artifact_dir);
    const Status s = m.ok() ? runtime::manifest_validate(*m) : m.status();
    EXPECT_TRUE(s.ok()) << f.name << " with size_dim '" << b.size_dim << "': " << s.to_string();
  }
  return config;
}

class ExportedCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportedCorpus, CompilesAndEncodersMatchOnnxruntimeWithBatchAsSize) {
  const fs::path dir = testing::exported_models_dir() / GetParam();
  auto folder = tools::conformance_folder_read(dir);
  ASSERT_TRUE(folder.ok()) << folder.status().to_string();
  ASSERT_TRUE(folder->base) << dir << " has no kiln.yaml";
  ASSERT_GE(folder->sets.size(), 2u);
  testing::TempDir cache;

  // The size is the sequence (kiln.yaml): every data set shares one binding (the batch).
  auto by_seq = tools::conformance_bindings(*folder, folder->base->size_dim);
  ASSERT_TRUE(by_seq.ok()) << by_seq.status().to_string();
  ASSERT_EQ(by_seq->size(), 1u) << "the data sets bind the batch differently";
  compile_ok(*folder, by_seq->front(), cache.path());

  if (!is_encoder(dir)) return;
  // The size is the batch: the sequence is bound per data set. The first length compiles (the
  // others differ from it only in that static extent); every length's front-end graph runs on
  // the CPU reference.
  const std::string batch = batch_dim(*folder);
  ASSERT_FALSE(batch.empty()) << "input_ids has no dim_param for the batch";
  auto by_batch = tools::conformance_bindings(*folder, batch);
  ASSERT_TRUE(by_batch.ok()) << by_batch.status().to_string();
  EXPECT_EQ(by_batch->size(), folder->sets.size()) << "one binding per sequence length";
  for (const tools::ConformanceBinding& b : *by_batch) {
    const compiler::CompileConfig config = &b == &by_batch->front()
                                               ? compile_ok(*folder, b, cache.path())
                                               : tools::conformance_config(*folder, b, {});
    auto graph = compiler::import_canonical(dir / "model.onnx", config);
    ASSERT_TRUE(graph.ok()) << tools::first_line(graph.status().to_string());
    for (const tools::SetResult& r : tools::conformance_reference_check(
             *folder, b, *graph, compiler::tolerance_end_to_end(compiler::Precision::kF32))) {
      EXPECT_EQ(r.verdict, tools::Verdict::kPassed)
          << GetParam() << " " << r.set << " (batch " << r.size << "): " << r.detail;
      EXPECT_EQ(r.outputs.size(), folder->outputs.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExportedCorpus,
                         ::testing::ValuesIn(testing::model_names(testing::exported_models_dir())),
                         [](const auto& info) { return info.param; });

TEST(ExportedCorpus, HasEveryFamily) {
  const auto names = testing::model_names(testing::exported_models_dir());
  EXPECT_GE(names.size(), 60u);
  for (const char* family : {"gpt2_", "llama_", "bert_", "distilbert_", "roberta_", "gpt_neox_",
                             "mistral_", "phi3_", "qwen2_"})
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.rfind(family, 0) == 0;
    })) << family;
}

}  // namespace
}  // namespace kiln
