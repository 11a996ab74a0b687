// onnx_kv_cache: past/present pairs found by structure in the KV-cache exports (tests/models/kv),
// none in the corpus of exports without a cache, and the prefill rewrite checked against
// onnxruntime's first greedy step.
#include "compiler/frontend/onnx_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/ops/op_util.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/greedy_reference.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

onnx::ModelProto load(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

// input_ids' [batch, sequence] dim names.
std::pair<std::string, std::string> ids_dims(const onnx::ModelProto& m) {
  for (const auto& in : m.graph().input())
    if (in.name() == "input_ids") {
      const auto& d = in.type().tensor_type().shape();
      return {d.dim(0).dim_param(), d.dim(1).dim_param()};
    }
  return {};
}

// greedy.json's prompts and the onnxruntime logits of the prefill step's last position.
struct Prefill {
  std::vector<int64_t> prompt;
  std::vector<double> last_logits;
};

std::vector<Prefill> prefills(const fs::path& dir) {
  std::vector<Prefill> out;
  for (const kiln::testing::GreedyReference& r :
       kiln::testing::greedy_references(dir / "greedy.json"))
    if (!r.step_logits.empty()) out.push_back({r.prompt, r.step_logits[0]});
  return out;
}

TEST(OnnxKvCache, FindsEveryPairInTheKvExports) {
  const fs::path root = kiln::testing::source_root() / "tests/models/kv";
  int models = 0;
  for (const std::string& name : kiln::testing::model_names(root)) {
    ++models;
    const std::vector<OnnxKvPair> pairs = onnx_kv_pairs(load(root / name / "model.onnx").graph());
    ASSERT_EQ(pairs.size(), 4u) << name;  // 2 layers x (key, value)
    for (int layer = 0; layer < 2; ++layer)
      for (int kv = 0; kv < 2; ++kv) {
        const std::string which = std::to_string(layer) + (kv ? ".value" : ".key");
        const OnnxKvPair& p = pairs[static_cast<size_t>(2 * layer + kv)];
        EXPECT_EQ(p.past, "past_key_values." + which) << name;
        EXPECT_EQ(p.present, "present." + which) << name;
      }
  }
  // 6 with a position_ids input, 6 without (`_nopos`); 2 on GroupQueryAttention (gqa_ort_kv*).
  EXPECT_EQ(models, 14);
}

// The prefill rewrite of every KV export computes onnxruntime's logits for each prompt (its
// greedy loop's first step, with an empty past), and the presents hold the prompt's keys and
// values: [1, kv heads, prompt length, head size].
TEST(OnnxKvCache, PrefillStepMatchesOnnxruntime) {
  const fs::path root = kiln::testing::source_root() / "tests/models/kv";
  for (const std::string& name : kiln::testing::model_names(root)) {
    const fs::path model = root / name / "model.onnx";
    const auto [batch, seq] = ids_dims(load(model));
    ImportOptions opts{seq, {{batch, 1}}};
    opts.max_size = 32;
    Result<ir::Graph> g = onnx_import_file(model, opts);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().message();
    for (int id : g->inputs) EXPECT_EQ(g->values[id].name.find("past"), std::string::npos) << name;
    ASSERT_TRUE(front_end_passes(*g, opts.max_size).ok()) << name;
    EXPECT_EQ(front_end_attention_count(*g), 2) << name;
    const std::vector<Prefill> cases = prefills(root / name);
    ASSERT_EQ(cases.size(), 2u) << name;
    for (const Prefill& c : cases) {
      const auto n = static_cast<int64_t>(c.prompt.size());
      std::map<std::string, RefTensor> in;
      in["input_ids"] = ref_make(DType::kI64, {1, n});
      in["attention_mask"] = ref_make(DType::kI64, {1, n});
      in["position_ids"] = ref_make(DType::kI64, {1, n});
      for (int64_t i = 0; i < n; ++i) {
        in["input_ids"].data[static_cast<size_t>(i)] = static_cast<double>(c.prompt[i]);
        in["attention_mask"].data[static_cast<size_t>(i)] = 1;
        in["position_ids"].data[static_cast<size_t>(i)] = static_cast<double>(i);
      }
      const int pos = g->find_value("position_ids");
      if (pos < 0 || std::find(g->inputs.begin(), g->inputs.end(), pos) == g->inputs.end())
        in.erase("position_ids");  // a `_nopos` export
      Result<std::map<std::string, RefTensor>> out = reference_run(*g, n, in);
      ASSERT_TRUE(out.ok()) << name << ": " << out.status().message();
      const RefTensor& logits = out->at("logits");
      ASSERT_EQ(logits.dims, (std::vector<int64_t>{1, n, 128})) << name;
      RefTensor last = ref_make(DType::kF32, {128}), want = ref_make(DType::kF32, {128});
      for (size_t v = 0; v < 128; ++v) {
        last.data[v] = logits.data[static_cast<size_t>((n - 1) * 128) + v];
        want.data[v] = c.last_logits[v];
      }
      EXPECT_TRUE(kiln::testing::tensors_close(last, want, 1e-3, 1e-4, name));
      const RefTensor& key = out->at("present.1.key");
      EXPECT_EQ(key.dims[0], 1) << name;
      EXPECT_EQ(key.dims[2], n) << name;
      EXPECT_EQ(key.dims[3], 16) << name;
    }
  }
}

// Near misses: a concatenated input whose axis 2 is a number (an image, not a cache), a
// Concat that only makes the output (nothing in the layer reads it), and a GroupQueryAttention
// whose past's axis 2 is a number (a fixed past, as in the op's tests).
TEST(OnnxKvCache, NearMissesAreNotPairs) {
  for (const char* text : {
           R"(<ir_version: 8, opset_import: ["" : 17]>
              g (float[1, 3, 8, 8] img, float[1, 3, 4, 8] x)
                  => (float[1, 3, 12, 8] y, float[1, 3, 12, 8] z) {
                y = Concat<axis = 2>(img, x)
                z = Relu(y)
              })",
           R"(<ir_version: 8, opset_import: ["" : 17]>
              g (float[1, 2, P, 4] past, float[1, 2, S, 4] k) => (float[1, 2, T, 4] present) {
                present = Concat<axis = 2>(past, k)
              })",
           R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
              g (float[1, 3, 16] q, float[1, 3, 8] k, float[1, 3, 8] v, float[1, 2, 4, 4] pk,
                 float[1, 2, 4, 4] pv, int32[1] sl, int32 total)
                  => (float[1, 3, 16] a, float[1, 2, 7, 4] ak) {
                a, ak = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>
                    (q, k, v, pk, pv, sl, total)
              })"}) {
    Result<std::string> bytes = kiln::testing::model_bytes_from_text(text);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(*bytes));
    EXPECT_TRUE(onnx_kv_pairs(m.graph()).empty()) << text;
  }
}

TEST(OnnxKvCache, NoPairsInExportsWithoutACache) {
  const fs::path root = kiln::testing::exported_models_dir();
  for (const std::string& name : kiln::testing::model_names(root))
    EXPECT_TRUE(onnx_kv_pairs(load(root / name / "model.onnx").graph()).empty()) << name;
}

}  // namespace
}  // namespace kiln::compiler
