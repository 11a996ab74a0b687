// The whole front end on real exporter output (tests/models/exported: tiny GPT-2, Llama and BERT
// from the TorchScript and dynamo exporters and onnxruntime's fusions): every model imports with
// no unsupported op, reports exactly its attention blocks, splits into compute and attention
// pieces in order, and its fused graph computes what onnxruntime computed.
#include "compiler/frontend/front_end.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "compiler/frontend/model_inspect.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

fs::path exported_root() { return testing::source_root() / "tests/models/exported"; }

std::vector<std::string> exported_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(exported_root(), ec))
    if (fs::exists(e.path() / "model.onnx")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A field of expect.json (written by tests/models/export_transformers.py): the text after
// `"key": ` up to the next comma, brace or newline.
std::string expect_field(const fs::path& dir, const std::string& key) {
  std::ifstream f(dir / "expect.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\"" + key + "\": *([^,}\n]+)"))) return "";
  return m[1];
}

int expected_attention_ops(const fs::path& dir) {
  const std::string v = expect_field(dir, "attention_ops");
  return v.empty() ? -1 : std::stoi(v);
}

class ExportedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportedModel, ImportsFusesSplitsAndMatchesOnnxruntime) {
  const fs::path dir = exported_root() / GetParam();
  Result<CompileConfig> config = config_load(dir / "kiln.yaml");
  ASSERT_TRUE(config.ok()) << config.status().message();
  Result<ModelInspection> r = model_inspect(dir / "model.onnx", &*config);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->unsupported.empty())
      << r->unsupported.size() << " unsupported, first '"
      << (r->unsupported.empty() ? "" : r->unsupported[0].op_type) << "'";
  ASSERT_TRUE(r->front_end) << r->error;
  const FrontEnd& fe = *r->front_end;

  const int want = expected_attention_ops(dir);
  ASSERT_GT(want, 0);
  EXPECT_EQ(r->attention_ops(), want);
  // compute, attention, compute, attention, ..., compute
  ASSERT_EQ(fe.pieces.size(), static_cast<size_t>(2 * want + 1));
  for (size_t k = 0; k < fe.pieces.size(); ++k) {
    EXPECT_EQ(fe.pieces[k].kind, k % 2 ? Piece::Kind::kSplit : Piece::Kind::kCompute) << k;
    if (k % 2) {
      EXPECT_EQ(fe.pieces[k].nodes.size(), 1u);
    }
  }
  // Two layers: the first, middle and last compute pieces differ (embedding, layer, head).
  EXPECT_EQ(unique_compute_pieces(fe.pieces), 3);
  // Masks are recognised, never materialised: decoders are causal; a model with an
  // attention_mask input pads its keys from it.
  const bool encoder = expect_field(dir, "encoder") == "true";
  bool has_mask_input = false;
  for (int i : fe.graph.inputs) has_mask_input |= fe.graph.values[i].name == "attention_mask";
  EXPECT_TRUE(fe.attention_notes.empty())
      << "'" << fe.attention_notes[0].node << "': " << fe.attention_notes[0].reason;
  for (const ir::Node& n : fe.graph.nodes) {
    if (n.domain != "kiln" || n.op != "Attention") continue;
    EXPECT_FALSE(n.inputs.size() > 3 && n.inputs[3] >= 0) << "a general mask is left";
    EXPECT_EQ(n.attr_int("causal", 0), encoder ? 0 : 1);
    const bool padded = n.inputs.size() > 4 && n.inputs[4] >= 0;
    EXPECT_EQ(padded, has_mask_input);
    if (padded) {
      EXPECT_EQ(fe.graph.values[n.inputs[4]].name, "attention_mask");
    }
  }
  // No shape computation survives folding.
  for (const char* op : {"Shape", "Size", "ConstantOfShape", "Softmax"})
    EXPECT_EQ(testing::count_ops(fe.graph, op), 0) << op;

  // The fused graph against onnxruntime's outputs, both data sets (S = 5 and 11).
  for (int k = 0; k < 2; ++k) {
    const fs::path data = dir / ("test_data_set_" + std::to_string(k));
    std::map<std::string, RefTensor> inputs;
    for (int i = 0; fs::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i) {
      std::string name;
      Result<RefTensor> t =
          testing::ref_read_pb(data / ("input_" + std::to_string(i) + ".pb"), &name);
      ASSERT_TRUE(t.ok()) << t.status().message();
      inputs[name] = *t;
    }
    const int64_t s = inputs.begin()->second.dims.at(1);  // [batch, seq]: S is the sequence
    auto out = reference_run(fe.graph, s, inputs);
    ASSERT_TRUE(out.ok()) << out.status().message();
    std::string name;
    Result<RefTensor> want_out = testing::ref_read_pb(data / "output_0.pb", &name);
    ASSERT_TRUE(want_out.ok());
    // onnxruntime computes in float32, the reference in float64: tests/README.md's fp32
    // end-to-end tolerance (rtol 1e-3), with atol 1e-4 for logits near zero.
    EXPECT_TRUE(testing::tensors_close(out->at(name), *want_out, 1e-3, 1e-4,
                                       GetParam() + " set " + std::to_string(k)));
  }
}

INSTANTIATE_TEST_SUITE_P(Exporters, ExportedModel, ::testing::ValuesIn(exported_models()),
                         [](const auto& info) { return info.param; });

// Every family through every export path that worked on the GPU machine (report.json lists
// the exporter's and onnxruntime's own failures, which are not in the corpus).
TEST(ExportedModels, AllFamiliesAndExportersPresent) {
  const auto names = exported_models();
  EXPECT_GE(names.size(), 70u);
  std::vector<std::string> want;
  for (const char* f : {"gpt2", "llama", "qwen2", "mistral", "gpt_neox", "phi3", "bert", "roberta",
                        "distilbert"})
    for (const char* path : {"_ts17_sdpa", "_ts17_eager", "_dynamo18", "_dynamo18_nomask",
                             "_dynamo23", "_dynamo23_nomask", "_optimum"})
      want.push_back(std::string(f) + path);
  for (const char* n : {"bert_ts17_sdpa_nomask", "bert_ts17_eager_nomask", "gpt2_ortopt",
                        "bert_ortopt", "roberta_ortopt", "distilbert_ortopt"})
    want.push_back(n);
  for (const std::string& n : want)
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

TEST(InspectDefaults, PicksTheSequenceDim) {
  const fs::path model = exported_root() / "bert_ts17_sdpa/model.onnx";
  Result<ModelInspection> r = model_inspect(model, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->config_given);
  EXPECT_EQ(r->config.size_dim, "seq");
  EXPECT_EQ(r->config.dims.at("batch"), 1);
  EXPECT_TRUE(r->unsupported.empty());
  EXPECT_GT(r->ops.at("MatMul"), 0);
}

TEST(InspectErrors, UnsupportedOpsAreListedNotImported) {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
g (float[N, 4] x) => (float[N, 4] y) {
  a = NonZero(x)
  y = custom.Frobnicate(x)
})";
  Result<std::string> bytes = testing::model_bytes_from_text(text);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const fs::path p = fs::temp_directory_path() / "kiln_inspect_unsupported.onnx";
  std::ofstream(p, std::ios::binary) << *bytes;
  Result<ModelInspection> r = model_inspect(p, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->unsupported.size(), 2u);
  EXPECT_EQ(r->unsupported[0].op_type, "NonZero");
  EXPECT_EQ(r->unsupported[0].domain, "ai.onnx");
  EXPECT_EQ(r->unsupported[1].op_type, "Frobnicate");
  EXPECT_EQ(r->unsupported[1].domain, "custom");
  EXPECT_FALSE(r->front_end);
  fs::remove(p);
}

}  // namespace
}  // namespace kiln::compiler
