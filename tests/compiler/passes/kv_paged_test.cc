// kv_paged: every KV-cache export (tests/models/kv) compiled for generation — the attention of
// each layer becomes kiln.PagedAttention, the presents and the attention mask go, the program's
// prefill of one prompt (the reference's reading of paged attention) still computes
// onnxruntime's logits; the artifact carries the generation section and validates; and models
// that cannot generate are refused with a reason.
#include "compiler/passes/kv_paged.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/backend/artifact_write.h"
#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/ops/op_util.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_interpreter.h"
#include "onnx/onnx_pb.h"
#include "runtime/manifest_validate.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

fs::path kv_root() { return kiln::testing::source_root() / "tests/models/kv"; }

// input_ids' [batch, sequence] dim names.
std::pair<std::string, std::string> ids_dims(const fs::path& model) {
  onnx::ModelProto m;
  std::ifstream in(model, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << model;
  for (const auto& i : m.graph().input())
    if (i.name() == "input_ids") {
      const auto& d = i.type().tensor_type().shape();
      return {d.dim(0).dim_param(), d.dim(1).dim_param()};
    }
  return {};
}

CompileConfig generation_config(const fs::path& model, const std::string& precision = "fp32",
                                int64_t batch = 1) {
  const auto [b, s] = ids_dims(model);
  const std::string yaml = "size_dim: " + s + "\ndims: {" + b + ": " + std::to_string(batch) +
                           "}\nmax_size: 32\nprecision: " + precision +
                           "\ncompilation: {cudagraph_capture_sizes: [1, 8, 32]}\n"
                           "autotune: {enabled: off}\n"
                           "kv_cache: {block_size: 16, max_blocks: 64, max_sequences: 8, "
                           "max_seq_len: 128}\n";
  Result<CompileConfig> c = config_parse(yaml, "kiln.yaml");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : CompileConfig{};
}

Result<ir::Graph> generation_graph(const fs::path& model, const CompileConfig& c) {
  ImportOptions opts{c.size_dim, c.dims};
  opts.max_size = c.max_size;
  opts.generation = true;
  KILN_ASSIGN_OR_RETURN(ir::Graph g, onnx_import_file(model, opts));
  KILN_RETURN_IF_ERROR(front_end_passes_for(g, c));
  return g;
}

struct Prefill {
  std::vector<int64_t> prompt;
  std::vector<double> last_logits;  // onnxruntime, the prefill step's last position
};

std::vector<Prefill> prefills(const fs::path& dir) {
  std::ifstream f(dir / "greedy.json");
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  std::vector<Prefill> out;
  if (!j.is_object()) return out;
  for (const auto& p : j["prompts"])
    out.push_back(
        {p["prompt"].get<std::vector<int64_t>>(), p["step_logits"][0].get<std::vector<double>>()});
  return out;
}

TEST(KvPaged, EveryKvExportBecomesAGenerationProgram) {
  int models = 0;
  for (const std::string& name : kiln::testing::model_names(kv_root())) {
    ++models;
    const fs::path model = kv_root() / name / "model.onnx";
    const CompileConfig c = generation_config(model);
    Result<ir::Graph> g = generation_graph(model, c);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
    int paged = 0, plain = 0;
    for (const ir::Node& n : g->nodes) {
      paged += n.domain == "kiln" && n.op == "PagedAttention";
      plain += n.domain == "kiln" && n.op == "Attention";
    }
    EXPECT_EQ(paged, 2) << name;
    EXPECT_EQ(plain, 0) << name;
    std::vector<std::string> inputs, outputs;
    for (int v : g->inputs) inputs.push_back(g->values[v].name);
    for (int v : g->outputs) outputs.push_back(g->values[v].name);
    EXPECT_EQ(inputs, (std::vector<std::string>{"input_ids", "position_ids"})) << name;
    EXPECT_EQ(outputs, (std::vector<std::string>{"logits"})) << name;
    Result<GenerationShape> shape = generation_shape(*g);
    ASSERT_TRUE(shape.ok()) << name << ": " << shape.status().to_string();
    EXPECT_EQ(shape->layers, 2) << name;
    // GQA: Llama's one KV head. The dynamo export reaches attention through a K reshaped to
    // 3-D and back after repeat_kv, which fusion does not see through yet: its cache holds the
    // repeated heads (correct, twice the bytes).
    EXPECT_EQ(shape->kv_heads, name == "llama_ts17_kv" ? 1 : 2) << name;
    EXPECT_EQ(shape->head_dim, 16) << name;
    EXPECT_EQ(shape->vocab, 128) << name;
    EXPECT_TRUE(shape->attention_mask.empty()) << name;
    // One prompt's prefill from position 0: onnxruntime's logits at its last position.
    const std::vector<Prefill> cases = prefills(kv_root() / name);
    ASSERT_EQ(cases.size(), 2u) << name;
    for (const Prefill& p : cases) {
      const auto n = static_cast<int64_t>(p.prompt.size());
      std::map<std::string, RefTensor> in;
      in["input_ids"] = ref_make(DType::kI64, {1, n});
      in["position_ids"] = ref_make(DType::kI64, {1, n});
      for (int64_t i = 0; i < n; ++i) {
        in["input_ids"].data[static_cast<size_t>(i)] = static_cast<double>(p.prompt[i]);
        in["position_ids"].data[static_cast<size_t>(i)] = static_cast<double>(i);
      }
      Result<std::map<std::string, RefTensor>> out = reference_run(*g, n, in);
      ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
      const RefTensor& logits = out->at("logits");
      RefTensor last = ref_make(DType::kF32, {128}), want = ref_make(DType::kF32, {128});
      for (size_t v = 0; v < 128; ++v) {
        last.data[v] = logits.data[static_cast<size_t>((n - 1) * 128) + v];
        want.data[v] = p.last_logits[v];
      }
      EXPECT_TRUE(kiln::testing::tensors_close(last, want, 1e-3, 1e-4, name));
    }
  }
  EXPECT_EQ(models, 4);
}

// The whole compile, GPU-less: the manifest has the generation section and KV-cache arguments
// and passes the runtime's validation; in fp16 the cache holds f16.
TEST(KvPaged, CompiledArtifactCarriesTheGenerationContract) {
  for (const char* name : {"gpt2_ts17_kv", "llama_dynamo18_kv"}) {
    for (const char* precision : {"fp32", "fp16"}) {
      const fs::path model = kv_root() / name / "model.onnx";
      kiln::testing::TempDir cache;
      CompileRequest req{model, generation_config(model, precision), cache.path()};
      Result<std::unique_ptr<CompiledModel>> cm = compile_unpublished(req);
      ASSERT_TRUE(cm.ok()) << name << ": " << cm.status().to_string();
      Result<schema::Manifest> m = manifest_build((*cm)->inputs);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
      ASSERT_TRUE(m->has_generation()) << name;
      const schema::Generation& g = m->generation();
      EXPECT_EQ(g.num_layers(), 2u);
      EXPECT_EQ(g.head_dim(), 16u);
      EXPECT_EQ(g.vocab(), 128u);
      EXPECT_EQ(g.block_size(), 16u);
      EXPECT_EQ(g.max_blocks_per_seq(), 8u);
      EXPECT_EQ(g.sampling().grid(), 8u);  // min(max_size, max_sequences)
      EXPECT_EQ(static_cast<DType>(g.dtype()),
                std::string(precision) == "fp16" ? DType::kF16 : DType::kF32);
      std::map<int, int> kinds;
      for (const auto& piece : m->pieces())
        for (const auto& step : piece.steps())
          for (const auto& a : step.kernel().args())
            if (a.value_case() == schema::KernelArg::kKv) ++kinds[a.kv().kind()];
      EXPECT_EQ(kinds[schema::KvArg::KIND_SLOT_MAPPING], 2) << name;  // one append per layer
      EXPECT_GE(kinds[schema::KvArg::KIND_BLOCK_TABLES], 2) << name;
      EXPECT_GE(kinds[schema::KvArg::KIND_KEY_CACHE], 4) << name;
      // The runtime's validation, minus the files (publishing adds them).
      Status v = runtime::generation_validate(*m);
      EXPECT_TRUE(v.ok()) << name << ": " << v.to_string();
      v = runtime::program_validate(*m);
      EXPECT_TRUE(v.ok()) << name << ": " << v.to_string();
    }
  }
}

TEST(KvPaged, ModelsThatCannotGenerateSayWhy) {
  // No KV cache at all.
  const fs::path plain = kiln::testing::exported_models_dir() / "gpt2_ts17_eager" / "model.onnx";
  CompileConfig c = generation_config(plain);
  Result<ir::Graph> g = generation_graph(plain, c);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("no KV cache"), std::string::npos) << g.status().message();
  // The batch not bound to 1.
  const fs::path kv = kv_root() / "gpt2_ts17_kv" / "model.onnx";
  g = generation_graph(kv, generation_config(kv, "fp32", 2));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("input 'input_ids' is [2, S]"), std::string::npos)
      << g.status().message();
  // A graph without position_ids.
  ir::Graph none;
  none.kv_presents = {"present.0.key"};
  Status s = kv_paged_rewrite(none);
  EXPECT_NE(s.message().find("input 'input_ids'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kiln::compiler
